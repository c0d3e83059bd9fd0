"""The options of the encoder, as two small frozen records.

`BlockConfig` holds what every Transformer block of a model shares (norm,
MLP, attention, LayerScale, dropout); `EncoderConfig` what sits around the
blocks (patch embedding, a norm before the first block). `TransformerBlock`
takes a `BlockConfig`, the model's embedding and encoder read an
`EncoderConfig`; `keras_vit.ViT` accepts every field of both as a keyword
and serialises each record as one dict in its config.

A new option is a field here (with its check in `__post_init__`) and the
layer that reads it: the model's constructor, its `get_config`, the preset
overrides and the argument checks derive from the fields.

Example:

>>> config = BlockConfig(qkv_bias=False, mlp_activation="quick_gelu")
>>> config.get_config()["qkv_bias"], config.mlp_activation
(False, 'quick_gelu')
>>> BlockConfig.from_config(config.get_config()) == config
True
>>> BlockConfig(mlp_activation="relu")
Traceback (most recent call last):
...
ValueError: `mlp_activation` must be one of ('gelu_tanh', 'gelu', 'quick_gelu'). Received: mlp_activation='relu'
"""

import dataclasses

from keras_vit.layers.interpolation import POSITION_INTERPOLATIONS
from keras_vit.layers.norms import check_norm_kind
from keras_vit.layers.relative_position import GRID_TABLE_KINDS, RELATIVE_POSITIONS
from keras_vit.layers.rotary import VARIANTS as ROTARY_VARIANTS
from keras_vit.layers.rotary import rotary_spec
from keras_vit.layers.sincos import STYLES
from keras_vit.validation import (
    check_bool,
    check_choice,
    check_positive_float,
    check_positive_int,
    check_rate,
    check_record_config,
)

# The MLP's activation, by the names timm gives them: "gelu_tanh", the tanh
# approximation of the official code; "gelu", the exact erf GELU
# (timm/DeiT); "quick_gelu", `x * sigmoid(1.702 x)` (OpenAI CLIP).
MLP_ACTIVATIONS = ("gelu_tanh", "gelu", "quick_gelu")
# The MLP of a block: "plain" Dense-activation-Dense (`MlpBlock`) or the
# gated "swiglu" of DINOv2-giant (`SwiGluMlp`).
MLP_KINDS = ("plain", "swiglu")
# The position embedding: "learned" (a weight), fixed 2D sin-cos, computed
# for each input's grid ("sincos" is MAE's layout; `sincos_<style>` another
# style of `keras_vit.layers.sincos.STYLES`), or "none" (the positions come
# from a rotary embedding alone: DINOv3, RoPE-ViT).
POSITION_EMBEDDINGS = ("learned", "sincos") + tuple(f"sincos_{s}" for s in STYLES if s != "mae") + (
    "sincos_1d", "none")
# Those that lay out a clip's tubelets (the 2D sin-cos tables follow one image's grid).
VIDEO_POSITION_EMBEDDINGS = ("learned", "sincos_1d", "none")
# Where a block's norms sit: "pre", before each branch (the ViT's), or
# "post", on each branch's output before its residual sum (Swin v2's
# res-post-norm: timm's `ResPostBlock`, EVA02-enormous's `use_post_norm`).
NORM_POSITIONS = ("pre", "post")
# Metadata of the fields that change training only, never the weights: a
# preset's model may take other values (`keras_vit.presets.OVERRIDES`).
TRAINING = {"training_only": True}


def _training(default):
    return dataclasses.field(default=default, metadata=TRAINING)


def check_qkv_bias(value, name="qkv_bias"):
    """`value` as True, False or a `(query, key, value)` triple of bools.

    A triple whose three entries agree is their bool, so that one model has
    one spelling.

    Example:

    >>> check_qkv_bias([True, False, True]), check_qkv_bias((False,) * 3)
    ((True, False, True), False)
    """
    if isinstance(value, bool):
        return value
    items = tuple(value) if isinstance(value, (list, tuple)) else None
    if items is None or len(items) != 3 or not all(isinstance(v, bool) for v in items):
        raise ValueError(
            f"`{name}` must be True, False or a (query, key, value) triple of them. "
            f"Received: {name}={value!r}"
        )
    return items[0] if len(set(items)) == 1 else items


def qkv_biases(value):
    """The `(query, key, value)` bias flags of a checked `qkv_bias`.

    Example:

    >>> qkv_biases(True), qkv_biases((True, False, True))
    ((True, True, True), (True, False, True))
    """
    return (value,) * 3 if isinstance(value, bool) else tuple(value)


def check_kv_heads(value, name="num_kv_heads"):
    """`value` as None, a positive int or a tuple of them (one per block).

    Example:

    >>> check_kv_heads([4, 2]), check_kv_heads(2), check_kv_heads(None)
    ((4, 2), 2, None)
    """
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    items = tuple(value) if isinstance(value, (list, tuple)) else None
    if not items or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in items):
        raise ValueError(
            f"`{name}` must be None, a positive int or one positive int per block. Received: {name}={value!r}"
        )
    return items


def block_kv_heads(value, num_layers, num_heads):
    """The key/value heads of each block for `num_kv_heads` (None: `num_heads`).

    Raises:
        ValueError: for a per-block list of another length, or a count that
            does not divide `num_heads`.

    Example:

    >>> block_kv_heads(None, 2, 4), block_kv_heads((4, 2), 2, 4)
    ((4, 4), (4, 2))
    """
    heads = (num_heads if value is None else value,) * num_layers if not isinstance(value, tuple) else value
    if len(heads) != num_layers or any(num_heads % h for h in heads):
        raise ValueError(
            f"`num_kv_heads` must give each of the {num_layers} blocks a number of key/value heads that divides "
            f"num_heads={num_heads}. Received: num_kv_heads={value!r}"
        )
    return tuple(heads)


def check_rope(rope, settings):
    """`(rope, settings)` checked: a variant of `keras_vit.layers.rotary.VARIANTS`
    (or None) and a dict of `RotarySpec` fields replacing the variant's
    (or None), normalised as `rotary_spec` normalises them.

    Example:

    >>> check_rope("pe", {"reference_grid": [14, 14]})
    ('pe', {'reference_grid': (14, 14)})
    """
    if rope is None:
        if settings:
            raise ValueError(
                f"`rope_settings` needs a `rope` variant. Received: rope=None, rope_settings={settings!r}"
            )
        return None, None
    check_choice(rope, tuple(ROTARY_VARIANTS), "rope")
    if settings is None:
        return rope, None
    if not isinstance(settings, dict):
        raise ValueError(
            f"`rope_settings` must be None or a dict of `RotarySpec` fields. Received: rope_settings={settings!r}"
        )
    spec = rotary_spec(rope, **settings)
    return rope, {name: getattr(spec, name) for name in settings if settings[name] is not None} or None


class _Record:
    """What both records share: serialisation and keyword handling."""

    @classmethod
    def field_names(cls):
        """The record's fields, in order (each a keyword of `keras_vit.ViT`)."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def training_fields(cls):
        """The fields that change training only (dropout rates), not weights."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("training_only"))

    @classmethod
    def defaults(cls):
        """`{field: default}`."""
        return {f.name: f.default for f in dataclasses.fields(cls)}

    def get_config(self):
        """The fields as a JSON-serialisable dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_config(cls, config):
        """The record of a `get_config()` dict (or the record itself)."""
        if isinstance(config, cls):
            return config
        argument = next(name for name, record in RECORDS.items() if record is cls)
        return cls(**check_record_config(cls, config, argument))

    @classmethod
    def from_arguments(cls, config=None, **keywords):
        """A record from a base (None, a record or its dict) and keywords.

        Args:
            config: None (the defaults), a record or its `get_config()` dict.
            **keywords: values of fields, which replace the base's; keywords
                that are not fields of this record are ignored (a model
                passes its keywords to each of its records).

        Returns:
            A new record; every field checked.
        """
        base = cls() if config is None else cls.from_config(config)
        fields = {name: value for name, value in keywords.items() if name in cls.field_names()}
        return dataclasses.replace(base, **fields) if fields else base

    def replace(self, **fields):
        """A copy with `fields` changed (checked as the constructor checks)."""
        return dataclasses.replace(self, **fields)

    def _set(self, name, value):
        object.__setattr__(self, name, value)  # the records are frozen


@dataclasses.dataclass(frozen=True)
class BlockConfig(_Record):
    """What every Transformer block of a model shares.

    Args:
        layer_norm_epsilon: float > 0, default 1e-6 (the official value):
            the epsilon of every norm of the encoder.
        norm_kind: the kind of every norm of the encoder (the blocks',
            the final one, `pre_norm`, the MAP head's and `qk_norm`): a
            name of `keras_vit.layers.norms.NORMS`, default "layernorm".
        mlp_activation: the MLP's activation: "gelu_tanh" (default, the
            official code's tanh approximation), "gelu" (exact erf GELU,
            timm/DeiT) or "quick_gelu" (`x * sigmoid(1.702 x)`, OpenAI
            CLIP).
        qkv_bias: True (default), False, or a `(query, key, value)` triple
            of bools: biases on the query, key and value projections
            (DINOv3's key has none: `(True, False, True)`).
        attention_out_bias: bool, default True: a bias on the attention's
            output projection (`out`; AIMv2's has none).
        attention_out_norm: bool, default False: a norm of the attention's
            output before its output projection (EVA02-CLIP's
            `scale_attn_inner`, timm's `attn.norm`; sublayer `norm`).
        mlp_bias: bool, default True: biases on the MLP's projections (plain
            and gated).
        mlp_norm: bool, default False: a norm of the MLP's hidden
            activations before its last projection (EVA02's `scale_mlp`,
            timm's `mlp.norm`; sublayer `norm`), plain or gated.
        layer_scale_init: None (default) or a positive float: LayerScale on
            both branches of every block, initialised to this value.
        dropout_rate: float in [0, 1), default 0: dropout after attention,
            after each MLP Dense (and, in `ViT`, after the position
            embedding).
        attention_dropout_rate: float in [0, 1), default 0: dropout on the
            attention probabilities.
        mlp_kind: "plain" (default: Dense, activation, Dense) or "swiglu" (the
            gated MLP of DINOv2-giant, `SwiGluMlp`; `mlp_activation` does
            not apply to it, its gate is SiLU).
        qk_norm: bool, default False: a norm of the queries and keys
            over the head width before their product (ViT-22B, timm's
            `qk_norm`; `QKNorm`, with `norm_kind` and `layer_norm_epsilon`).
        remat: bool, default False: rematerialise each block in training
            (`keras.remat`: jax.checkpoint, torch.utils.checkpoint,
            tf.recompute_grad): its activations are recomputed in the
            backward pass instead of kept, trading compute for memory; the
            gradients are the same. Needs `dropout_rate`,
            `attention_dropout_rate` and stochastic depth at 0 (a random mask
            drawn again in the recomputation would differ).
        rope: None (default) or a rotary position embedding on the queries
            and keys of the patch tokens (prefix tokens left unrotated): a
            variant of `keras_vit.layers.rotary.VARIANTS`, "dinov3",
            "eva02", "pe", "axial" or "mixed" (RoPE-ViT's learned
            frequencies, weight `rope/frequencies`). The model computes the
            tables once per input grid (layer `rope`,
            `keras_vit.layers.rotary.RotaryEmbedding`) and hands them to
            every block, so any image size and aspect ratio works.
        rope_settings: None (default) or a dict of `RotarySpec` fields
            replacing the variant's (`base`, `reference_grid`,
            `grid_offset`, `order`, `layout`, `normalize_coords`,
            `min_period`, `max_period`).
        norm_position: "pre" (default: `x + f(norm(x))`, the ViT's) or
            "post" (`x + norm(f(x))`, Swin v2's res-post-norm; timm's
            `ResPostBlock` and `use_post_norm`): where the block's two norms
            sit. The weights are the same (`LayerNorm_0` with attention,
            `LayerNorm_2` with the MLP).
        parallel: bool, default False: attention and MLP in parallel on one
            norm, `x + attention(norm(x)) + mlp(norm(x))` (ViT-22B; timm's
            `ParallelScalingBlock`): the block has no `LayerNorm_2`.
        differential_attention: bool, default False: differential attention
            (Ye et al., arXiv:2410.05258; timm's `DiffAttention`): each head
            splits its queries and keys in two and takes the difference of
            the two softmax maps, weighted by a learned lambda; see
            `keras_vit.layers.attention.MultiHeadSelfAttention`.
        relative_position: None (default), "mlp", "shared_mlp" or
            "decomposed": a relative position term on the attention logits
            of the patch tokens (`keras_vit.layers.relative_position`).
            "mlp" and "shared_mlp": a bias from an MLP of their log-spaced
            relative coordinates (timm's `RelPosMlp`), one per block
            ("mlp") or one for the model ("shared_mlp", layer `rel_pos`);
            the model computes the coordinates once per input grid, so any
            image size works. "decomposed": MViTv2's decomposed term
            (ViTDet, SAM; weights `relative_position/height` and `/width` of
            each attention, learned for the window, or for a global block
            the model's patch grid).
        relative_position_dim: int, default 128: the hidden width of the
            "mlp" and "shared_mlp" kinds' MLP.
        window_size: None (default: every token attends to every token) or
            an int: the blocks attend within non-overlapping windows of
            this many patch tokens a side, the grid padded with zeros to a
            multiple (ViTDet, SAM; `keras_vit.layers.relative_position`);
            needs a model without prefix tokens.
        global_attention_blocks: a tuple of block indices, default ():
            with `window_size`, the blocks that attend over the whole grid.

    Example:

    >>> BlockConfig.from_arguments(mlp_activation="gelu", classes=3).mlp_activation
    'gelu'
    """

    layer_norm_epsilon: float = 1e-6
    norm_kind: str = "layernorm"
    mlp_activation: str = "gelu_tanh"
    qkv_bias: bool = True
    layer_scale_init: object = None
    dropout_rate: float = _training(0.0)
    attention_dropout_rate: float = _training(0.0)
    mlp_kind: str = "plain"
    qk_norm: bool = False
    remat: bool = _training(False)
    attention_out_bias: bool = True
    attention_out_norm: bool = False
    mlp_bias: bool = True
    mlp_norm: bool = False
    rope: object = None
    rope_settings: object = None
    norm_position: str = "pre"
    parallel: bool = False
    differential_attention: bool = False
    relative_position: object = None
    relative_position_dim: int = 128
    window_size: object = None
    global_attention_blocks: tuple = ()

    def __post_init__(self):
        self._set("layer_norm_epsilon", check_positive_float(self.layer_norm_epsilon, "layer_norm_epsilon"))
        check_norm_kind(self.norm_kind)
        check_choice(self.mlp_activation, MLP_ACTIVATIONS, "mlp_activation")
        self._set("qkv_bias", check_qkv_bias(self.qkv_bias))
        for name in ("attention_out_bias", "attention_out_norm", "mlp_bias", "mlp_norm"):
            check_bool(getattr(self, name), name)
        rope, settings = check_rope(self.rope, self.rope_settings)
        self._set("rope", rope)
        self._set("rope_settings", settings)
        if self.layer_scale_init is not None:
            self._set("layer_scale_init", check_positive_float(self.layer_scale_init, "layer_scale_init"))
        self._set("dropout_rate", check_rate(self.dropout_rate, "dropout_rate"))
        self._set(
            "attention_dropout_rate", check_rate(self.attention_dropout_rate, "attention_dropout_rate")
        )
        check_choice(self.mlp_kind, MLP_KINDS, "mlp_kind")
        self._check_windows()
        check_bool(self.qk_norm, "qk_norm")
        check_bool(self.remat, "remat")
        check_choice(self.norm_position, NORM_POSITIONS, "norm_position")
        check_bool(self.parallel, "parallel")
        check_bool(self.differential_attention, "differential_attention")
        check_positive_int(self.relative_position_dim, "relative_position_dim")
        if self.parallel and self.norm_position != "pre":
            raise ValueError(
                "A parallel block has one norm, before both branches: `parallel=True` needs "
                f"`norm_position='pre'`. Received: norm_position={self.norm_position!r}"
            )
        if self.relative_position is not None and self.differential_attention:
            raise ValueError(
                "Differential attention's two maps per head take no relative position bias: "
                "`relative_position` and `differential_attention` cannot be combined. Received: "
                f"relative_position={self.relative_position!r}, differential_attention=True"
            )
        if self.relative_position is not None and self.rope is not None:
            raise ValueError(
                "A block takes one kind of position tables: `relative_position` and `rope` cannot be "
                f"combined. Received: relative_position={self.relative_position!r}, rope={self.rope!r}"
            )
        if self.remat and (self.dropout_rate or self.attention_dropout_rate):
            raise ValueError(
                "`remat=True` needs `dropout_rate=0` and `attention_dropout_rate=0` (the "
                "recomputed forward pass would draw other dropout masks). Received: "
                f"dropout_rate={self.dropout_rate}, attention_dropout_rate={self.attention_dropout_rate}"
            )

    def _check_windows(self):
        check_positive_int(self.window_size, "window_size", allow_none=True)
        if self.relative_position is not None:
            check_choice(self.relative_position, RELATIVE_POSITIONS, "relative_position")
        blocks = self.global_attention_blocks
        items = list(blocks) if isinstance(blocks, (list, tuple)) else None
        if items is None or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in items):
            raise ValueError(
                "`global_attention_blocks` must be a tuple of block indices (ints >= 0). "
                f"Received: global_attention_blocks={blocks!r}"
            )
        if items and self.window_size is None:
            raise ValueError(
                "`global_attention_blocks` names the blocks that attend globally among windowed ones: it needs "
                f"`window_size`. Received: global_attention_blocks={blocks!r}, window_size=None"
            )
        self._set("global_attention_blocks", tuple(sorted(set(items))))
        if self.window_size is not None and self.relative_position in GRID_TABLE_KINDS:
            raise ValueError(
                "`window_size` takes the \"decomposed\" relative positions only (the MLP's bias covers the full "
                f"patch grid). Received: window_size={self.window_size}, relative_position={self.relative_position!r}"
            )
        if self.window_size is not None and self.rope is not None:
            raise ValueError(
                "`window_size` cannot be combined with `rope` (the rotary tables follow the full patch grid). "
                f"Received: window_size={self.window_size}, rope={self.rope!r}"
            )

    def at_block(self, index):
        """The record of block `index`: without a window where the block
        attends over the whole grid (`global_attention_blocks`).

        Example:

        >>> config = BlockConfig(window_size=14, global_attention_blocks=(2, 5))
        >>> config.at_block(1).window_size, config.at_block(2).window_size
        (14, None)
        """
        if self.window_size is None:
            return self
        window = None if index in self.global_attention_blocks else self.window_size
        return self.replace(window_size=window, global_attention_blocks=())


@dataclasses.dataclass(frozen=True)
class EncoderConfig(_Record):
    """What sits around the Transformer blocks.

    Args:
        patch_bias: bool, default True: a bias in the patch embedding
            (OpenAI CLIP's has none).
        patch_norm: bool, default False: a norm of the patch embeddings
            before the position embedding, of the blocks' `norm_kind` and
            `layer_norm_epsilon` (AIMv2's RMSNorm, timm's `embed_norm_layer`;
            layer `embedding/norm`).
        pre_norm: bool, default False: a norm (layer `pre_norm`) on the
            tokens before the first block (CLIP's `pre_layrnorm`).
        class_token: None (default: a class token when the classifier is
            "token", none for "gap" and "map") or bool: whether to prepend a
            class token whatever the classifier (timm's `class_token`).
        position_embedding: "learned" (default, weight `pos_embedding`),
            "sincos" (fixed 2D sin-cos of MAE, recomputed for each input's
            grid, no weight; `"sincos_mocov3"`, `"sincos_big_vision"` other
            layouts, see `keras_vit.layers.sincos`) or "none" (no absolute
            position embedding: the positions come from `rope` alone).
        position_interpolation: how a learned position embedding is resized
            for another grid: a name of
            `keras_vit.layers.interpolation.POSITION_INTERPOLATIONS`, default
            "official" (corner-aligned linear); "vit", "clip", "siglip",
            "mae", "dinov2", ... resize as transformers does for that family.
        patch_dropout_rate: float in [0, 1), default 0: in training, drop
            this fraction of the patch tokens of each image after the
            position embedding (`keras_vit.layers.PatchDropout`, FLIP /
            timm's `patch_drop_rate`; layer `patch_dropout`); the class,
            distillation and register tokens are always kept; no effect at
            inference.
        map_num_heads: None (default: the blocks' `num_heads`) or a
            positive int: the heads of the MAP head (`classifier` or
            `pooling` "map"; Perception Encoder's `attn_pool` has 8).
        map_mlp_dim: None (default: the blocks' `mlp_dim`) or a positive
            int: the MLP width of the MAP head.
        num_kv_heads: None (default: the blocks' `num_heads`), an int, or
            one int per block: the key and value heads of grouped-query
            attention (Sapiens2, timm's `num_kv_heads`); each divides
            `num_heads`, and query head `h` reads key/value head
            `h // (num_heads // num_kv_heads)`.
        crop_to_patches: bool, default False: images whose sides are not
            multiples of the patch size lose their last rows and columns
            (timm's patch convolution reads whole patches only:
            `vit_so400m_patch14_siglip_384` sees 378 of its 384 pixels);
            by default such images are refused.
        final_norm: bool, default True: a norm after the blocks (layer
            `encoder_norm`, or `fc_norm` on the pooled features with
            `pooled_norm`); False leaves the tokens unnormalised (timm's
            `final_norm=False`: RADIO, InternViT, Perception Encoder's
            language and spatial towers).
        neck_channels: None (default) or a positive int: a convolutional
            neck after the blocks (SAM's, ViTDet's: a 1 x 1 and a 3 x 3
            convolution without bias, each followed by a LayerNorm over the
            channels; layer `neck`, `keras_vit.layers.neck.ConvNeck`) that
            turns the patch tokens into this many channels on their grid;
            a model with a neck has no final norm (its neck ends in one) and
            no prefix tokens.
        num_frames: None (default: the model takes images) or a positive
            int: the model takes video clips `(batch, frames, height,
            width, channels)` and its position table is learned for clips
            of this many frames; clips of other lengths (multiples of
            `tubelet_size`) are accepted, a learned table resized in time
            as in space. The tubelet tokens run in (time, row, column)
            order (VideoMAE, ViViT). Not with a rotary embedding, relative
            positions, windows, a neck or the 2D sin-cos tables.
        tubelet_size: positive int, default 1: the frames of one token
            (a tubelet of `tubelet_size x ph x pw` pixels; layer
            `patches`, `keras_vit.layers.Patches`); it divides
            `num_frames`, and stays 1 for images.
        pooled_norm_epsilon: None (default: the blocks'
            `layer_norm_epsilon`) or a positive float: the epsilon of the
            norm of the pooled features (`fc_norm`, with `pooled_norm`;
            VideoMAE's classifier keeps PyTorch's 1e-5 there).

    Example:

    >>> EncoderConfig(pre_norm=True).get_config()
    {'patch_bias': True, 'patch_norm': False, 'pre_norm': True, 'class_token': None, 'position_embedding': 'learned', 'position_interpolation': 'official', 'patch_dropout_rate': 0.0, 'map_num_heads': None, 'map_mlp_dim': None, 'final_norm': True, 'num_kv_heads': None, 'crop_to_patches': False, 'neck_channels': None, 'num_frames': None, 'tubelet_size': 1, 'pooled_norm_epsilon': None}
    """

    patch_bias: bool = True
    patch_norm: bool = False
    pre_norm: bool = False
    class_token: object = None
    position_embedding: str = "learned"
    position_interpolation: str = "official"
    patch_dropout_rate: float = _training(0.0)
    map_num_heads: object = None
    map_mlp_dim: object = None
    final_norm: bool = True
    num_kv_heads: object = None
    crop_to_patches: bool = False
    neck_channels: object = None
    num_frames: object = None
    tubelet_size: int = 1
    pooled_norm_epsilon: object = None

    def __post_init__(self):
        check_bool(self.patch_bias, "patch_bias")
        check_bool(self.patch_norm, "patch_norm")
        check_bool(self.pre_norm, "pre_norm")
        if self.class_token is not None:
            check_bool(self.class_token, "class_token")
        check_choice(self.position_embedding, POSITION_EMBEDDINGS, "position_embedding")
        check_choice(
            self.position_interpolation, tuple(POSITION_INTERPOLATIONS), "position_interpolation"
        )
        self._set("patch_dropout_rate", check_rate(self.patch_dropout_rate, "patch_dropout_rate"))
        for name in ("map_num_heads", "map_mlp_dim", "neck_channels"):
            check_positive_int(getattr(self, name), name, allow_none=True)
        check_bool(self.final_norm, "final_norm")
        self._set("num_kv_heads", check_kv_heads(self.num_kv_heads))
        check_bool(self.crop_to_patches, "crop_to_patches")
        self._check_video()
        if self.pooled_norm_epsilon is not None:
            self._set("pooled_norm_epsilon", check_positive_float(self.pooled_norm_epsilon, "pooled_norm_epsilon"))

    def _check_video(self):
        check_positive_int(self.num_frames, "num_frames", allow_none=True)
        check_positive_int(self.tubelet_size, "tubelet_size")
        if self.num_frames is None:
            if self.tubelet_size != 1:
                raise ValueError(
                    "`tubelet_size` groups the frames of a clip: it needs `num_frames`. "
                    f"Received: tubelet_size={self.tubelet_size}, num_frames=None"
                )
            return
        if self.num_frames % self.tubelet_size:
            raise ValueError(
                "`num_frames` must be a multiple of `tubelet_size`. "
                f"Received: num_frames={self.num_frames}, tubelet_size={self.tubelet_size}"
            )
        if self.position_embedding not in VIDEO_POSITION_EMBEDDINGS:
            raise ValueError(
                f"A video model (num_frames) takes a position_embedding of {VIDEO_POSITION_EMBEDDINGS}. "
                f"Received: position_embedding={self.position_embedding!r}"
            )
        if self.neck_channels is not None:
            raise ValueError(
                "A video model (num_frames) has no convolutional neck (it lays out one image's grid). "
                f"Received: neck_channels={self.neck_channels}"
            )


# Each record by the name it has in a model's arguments and config.
RECORDS = {"block_config": BlockConfig, "encoder_config": EncoderConfig}


def record_keywords():
    """Every keyword the records read: the fields of all records."""
    return tuple(name for record in RECORDS.values() for name in record.field_names())


def training_fields():
    """The fields of all records that change training only (dropout rates)."""
    return tuple(name for record in RECORDS.values() for name in record.training_fields())


def expose_records(*keys):
    """Class decorator: the fields of the records `keys` as read-only properties.

    `model.qkv_bias` reads `model.block_config.qkv_bias`: a new field is an
    attribute of the layers and models that hold its record, unwritten.
    """

    def decorate(cls):
        for key in keys:
            record = RECORDS[key]
            for name in record.field_names():
                if name not in vars(cls):
                    getter = lambda self, key=key, name=name: getattr(getattr(self, key), name)  # noqa: E731
                    setattr(cls, name, property(getter, doc=f"`{key}.{name}` (read-only)."))
        return cls

    return decorate
