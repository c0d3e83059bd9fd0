"""The forward pass of `keras_vit.ViT`, in the steps everything else reuses.

`ViT.__init__` builds its graph by calling these functions on a symbolic
input; `ViT.forward_intermediates`, `ViT.forward_features` and
`ViT.forward_head`, the inspection tools, masked-patch pre-training and
the converter call the same functions on the same layers, eagerly or on
new symbolic inputs (a feature model inside another model). The steps:

1. `stem`: the layers before the patches (a hybrid's ResNet; none in a
   plain ViT);
2. `embed`: patches, patch embedding with the prefix tokens and position
   embedding (the `embedding` layer), dropout and the optional norm before
   the blocks; `embed_patches` and `embed_tokens` are its two halves, for
   changing the patch embeddings in between (masked-patch pre-training);
   `rope` (or `rope_at`) the rotary tables of the patch grid, computed
   once (layer `rope`) for every block of a model with a rotary embedding;
3. `run_blocks`: the Transformer blocks, tapping chosen block outputs;
4. `final_norm`: the encoder's final norm (none when the norm is applied
   to the pooled features, `pooled_norm=True`);
5. `head`: pooling, the embedding's projection and unit-length scaling
   (image-text models), pre-logits, classifier(s) and activation.

`Stages` holds the model's layers by step; `stages(model)` returns it.
The model's methods on these steps: `keras_vit.models.forward_methods`.
"""

import numbers

import keras
from keras import ops

from keras_vit.layers import PatchDropout, PatchEncoder, Patches, TokenGrid, TransformerBlock
from keras_vit.layers.config import block_kv_heads
from keras_vit.layers.neck import ConvNeck
from keras_vit.layers.norms import block_norm
from keras_vit.layers.pooling import split_token_grid
from keras_vit.layers.relative_position import GRID_TABLE_KINDS, RelativePositionTable
from keras_vit.layers.rotary import RotaryEmbedding
from keras_vit.layers.seeds import derive_seed
from keras_vit.models import heads, patch_inputs
from keras_vit.validation import check_choice

# The layouts of the patch tokens a feature holds (timm's `output_fmt`).
FEATURE_LAYOUTS = ("NHWC", "NLC")


class Stages:
    """The layers of a ViT, by the step of the forward pass that runs them.

    Not a layer: a plain record of the model's own layers (no variables of
    its own, nothing Keras tracks or saves).

    Attributes:
        stem: None (no stem) or a callable from images to the stem's
            feature map (a functional sub-model of the ViT's own layers).
        patches, embedding, dropout: the `Patches`, `PatchEncoder` and
            `Dropout` layers.
        patch_dropout: None or the `PatchDropout` (training only).
        pre_norm: None or the norm before the first block.
        rope: None or the layer whose per-grid tables every block takes:
            the `RotaryEmbedding` (layer `rope`) or the
            `RelativePositionTable` (layer `rel_pos`).
        blocks: the `TransformerBlock`s, in order.
        norm: None or the encoder's final norm (`encoder_norm`).
        neck: None or the convolutional neck in its place (`neck`, a
            `keras_vit.layers.neck.ConvNeck`).
        fc_norm: None or the norm of the pooled features.
        head_layers: `{name: layer}` of the head (pooling, `projection`,
            `l2_normalize`, `pre_logits`, `head`, `head_dist`, ...), as the
            model has them.
        num_prefix_tokens: class, distillation and register tokens.
    """

    def __init__(self):
        self.stem = None
        self.patches = self.embedding = self.dropout = self.pre_norm = None
        self.patch_dropout = None
        self.rope = None
        self.blocks = []
        self.norm = self.fc_norm = self.neck = None
        self.head_layers = {}
        self.num_prefix_tokens = 0
        self.include_top = True
        self.pooling = None
        self.classifier = "token"


def stages(model):
    """The `Stages` of a built `keras_vit.ViT`."""
    return model._forward_stages


def build_stages(model, dtype):
    """New layers for `model` (a `ViT` being constructed), by step.

    The stem is built by the model's own hook (`ViT._stem`), as it is a
    function of its input; everything after it is created here.
    """
    s = Stages()
    s.include_top, s.pooling, s.classifier = model.include_top, model.pooling, model.classifier
    s.num_prefix_tokens = model.num_prefix_tokens
    video = model.encoder_config.num_frames is not None
    s.patches = Patches(model.patch_size, crop=model.encoder_config.crop_to_patches, name="patches", dtype=dtype,
                        tubelet_size=model.encoder_config.tubelet_size if video else None)
    s.embedding = PatchEncoder.for_encoder(
        model.encoder_config,
        model.hidden_size,
        model.patch_size,
        model.grid_size,
        block_config=model.block_config,
        class_token=model.has_class_token,
        distillation_token=model.distillation_token,
        num_register_tokens=model.num_register_tokens,
        name="embedding",
        dtype=dtype,
    )
    s.dropout = keras.layers.Dropout(
        model.dropout_rate, seed=derive_seed(model.seed, "dropout"), name="dropout", dtype=dtype
    )
    if model.encoder_config.patch_dropout_rate:
        s.patch_dropout = PatchDropout(
            model.encoder_config.patch_dropout_rate, model.num_prefix_tokens,
            seed=derive_seed(model.seed, "patch_dropout"), name="patch_dropout", dtype=dtype,
        )
    if model.encoder_config.pre_norm:
        s.pre_norm = block_norm(model.block_config, "pre_norm", dtype)
    s.rope = _position_tables(model, dtype)
    kv_heads = block_kv_heads(model.encoder_config.num_kv_heads, model.num_layers, model.num_heads)
    for i in range(model.num_layers):
        # Stochastic depth grows linearly from 0 in the first block.
        rate = model.stochastic_depth_rate * i / max(model.num_layers - 1, 1)
        s.blocks.append(
            TransformerBlock(
                model.num_heads,
                model.mlp_dim,
                block_config=model.block_config.at_block(i),
                stochastic_depth_rate=rate,
                seed=derive_seed(model.seed, i),
                block_index=i,
                num_kv_heads=None if kv_heads[i] == model.num_heads else kv_heads[i],
                grid_size=model.grid_size if model.block_config.relative_position == "decomposed" else None,
                name=f"encoderblock_{i}",
                dtype=dtype,
            )
        )
    s.head_layers = heads.head_layers(model, dtype)
    if model.encoder_config.neck_channels is not None:
        # The neck ends in a norm of its own, in place of the encoder's.
        s.neck = ConvNeck(model.encoder_config.neck_channels, model.layer_norm_epsilon, name="neck", dtype=dtype)
    elif not model.encoder_config.final_norm:
        pass  # timm's `final_norm=False`: the tokens leave the blocks as they are
    elif not model.pooled_norm:
        s.norm = block_norm(model.block_config, "encoder_norm", dtype)
    elif "pool" in s.head_layers:
        # Without pooling (include_top=False, pooling=None) the tokens come
        # out unnormalised, and the model has no norm at all.
        epsilon = model.encoder_config.pooled_norm_epsilon
        config = model.block_config if epsilon is None else model.block_config.replace(layer_norm_epsilon=epsilon)
        s.fc_norm = block_norm(config, "fc_norm", dtype)
    return s


def _position_tables(model, dtype):
    """The layer making the per-grid tables every block takes: the
    `RotaryEmbedding` (layer `rope`), the `RelativePositionTable` (layer
    `rel_pos`), or None."""
    config = model.block_config
    if config.relative_position in GRID_TABLE_KINDS:
        return RelativePositionTable(
            model.num_heads, config.relative_position_dim, shared=config.relative_position == "shared_mlp",
            name="rel_pos", dtype=dtype,
        )
    if config.rope is None:
        return None
    if model.encoder_config.patch_dropout_rate:
        # The tables are per grid position: a token dropped from the
        # sequence would shift the rows of the ones after it.
        raise ValueError(
            "`patch_dropout_rate` cannot be combined with `rope` (the rotary tables follow the "
            f"full patch grid). Received: patch_dropout_rate={model.encoder_config.patch_dropout_rate}, "
            f"rope={config.rope!r}"
        )
    mixed = RotaryEmbedding.is_mixed(config.rope)
    return RotaryEmbedding(
        model.hidden_size // model.num_heads, config.rope,
        depth=model.num_layers if mixed else None, num_heads=model.num_heads if mixed else None,
        seed=derive_seed(model.seed, "rope") if mixed else None,
        num_prefix_tokens=model.num_prefix_tokens, name="rope", dtype=dtype,
        **(config.rope_settings or {}),
    )


def attach_stem(s, inputs, features, name):
    """Gives `s` the stem from `inputs` to `features` (none when they are one)."""
    if features is not inputs:
        # The same layers on an input of any size (a sub-model of the
        # model's own fixed-size input would keep that size when saved).
        s.stem = keras.models.clone_model(
            keras.Model(inputs, features, name=name),
            input_tensors=keras.Input((None, None, inputs.shape[-1]), name="image"),
            clone_function=lambda layer: layer,
        )
    return s


def stem(s, images, training=None):
    """Step 1: the stem's feature map (the images themselves without one)."""
    return images if s.stem is None else s.stem(images, training=training)


def _after_embedding(s, x, training):
    x = s.dropout(x, training=training)
    if s.patch_dropout is not None:
        x = s.patch_dropout(x, training=training)
    return x if s.pre_norm is None else s.pre_norm(x)


def embed(s, features, training=None):
    """Step 2: `(tokens entering the first block, patch grid)`.

    Args:
        s: the `Stages`.
        features: the stem's output (the images for a plain ViT).
        training: the dropout's mode.

    Returns:
        Tokens `(batch, prefix + h * w, D)` and the patches
        `(batch, h, w, ph * pw * C)` whose grid they come from.
    """
    patches = s.patches(features)
    return _after_embedding(s, s.embedding(patches), training), patches


def embed_patches(s, features):
    """The first half of `embed`: `(patch embeddings (batch, h * w, D), (h, w))`
    (`(t, h, w)` for a video model's clips).

    Eager (or inside a traced call): it calls a method of the embedding
    layer, which a symbolic functional graph cannot hold.
    """
    patches = s.patches(features)
    grid = tuple(
        patches.shape[i] if patches.shape[i] is not None else ops.shape(patches)[i]
        for i in range(1, len(patches.shape) - 1)
    )
    return s.embedding.embed_patches(ops.cast(patches, s.embedding.compute_dtype)), grid


def embed_tokens(s, tokens, grid, training=None):
    """The second half of `embed`: prefix tokens, position embedding, dropout
    and the norm before the blocks, on patch embeddings `(batch, h * w, D)`."""
    return _after_embedding(s, s.embedding.add_positions(tokens, grid), training)


def rope(s, patches):
    """Step 2's rotary tables for the grid of `patches` (of `embed`), or None
    for a model without a rotary embedding: every token's row (identity
    rows for the prefix tokens), computed once for all blocks."""
    return None if s.rope is None else s.rope(patches)


def rope_at(s, grid):
    """The rotary tables of a `(h, w)` grid (ints or scalar tensors), or
    None; eager (or inside a traced call), as `embed_patches`."""
    return None if s.rope is None else s.rope.tables(grid)


def block_rope(s, tables, index):
    """Block `index`'s slice of the tables (its own for "mixed")."""
    if tables is None or not isinstance(s.rope, RotaryEmbedding) or not RotaryEmbedding.is_mixed(s.rope.variant):
        return tables
    return tables[:, index]


def block_indices(count, indices):
    """timm's `indices` rule: sorted block indices to tap.

    None: every block; an int `n`: the last `n`; a sequence: those blocks
    (negative values count from the end).

    Example:

    >>> block_indices(4, None), block_indices(4, 2), block_indices(4, (-1, 0))
    ([0, 1, 2, 3], [2, 3], [0, 3])
    """
    if indices is None:
        return list(range(count))
    whole = lambda i: isinstance(i, numbers.Integral) and not isinstance(i, bool)  # noqa: E731
    if whole(indices):
        if not 0 <= indices <= count:
            raise ValueError(
                f"`indices` as an int takes the last n of the {count} blocks, 0 <= n <= {count}. "
                f"Received: indices={indices!r}"
            )
        return list(range(count - int(indices), count))
    try:
        items = list(indices)
    except TypeError:
        items = None
    ok = items is not None and all(
        whole(i) and -count <= i < count for i in items
    )
    if not ok:
        raise ValueError(
            f"`indices` must be None, an int or a sequence of block indices in "
            f"[-{count}, {count - 1}]. Received: indices={indices!r}"
        )
    return sorted({int(i) % count for i in items})


def head_tokens(s):
    """How many leading tokens the head reads, or None when it reads them all.

    A head that pools the class (and distillation) token reads the first one
    (two); every other head, MAP pooling included, reads every token, as
    does a model without pooling.
    """
    pools = [layer for name, layer in s.head_layers.items() if name.startswith("pool")]
    counts = [getattr(layer, "leading_tokens", None) for layer in pools]
    if not counts or None in counts:
        return None
    return max(counts)


def run_blocks(s, x, indices=(), training=None, stop_early=False, output_tokens=None, rope=None,
               token_mask=None, grid=None):
    """Step 3: the blocks on tokens `x`, tapping the outputs of `indices`.

    Args:
        s: the `Stages`.
        x: tokens `(batch, prefix + patches, D)` entering the first block.
        rope: the rotary tables of `x`'s grid (`rope`, `rope_at`); needed
            by, and only by, a model with a rotary embedding.
        indices: sorted block indices (see `block_indices`) whose outputs
            are returned.
        training: the dropout's and stochastic depth's mode.
        stop_early: stop after the last tapped block (the returned tokens
            are then that block's output).
        output_tokens: None (default) or an int `n`: the last block of the
            model computes the outputs of the first `n` tokens only (see
            `head_tokens`); not with taps of the last block or `stop_early`.
        token_mask: None (default) or a boolean `(batch, tokens)`: the
            tokens every token may attend to (the valid ones of a NaFlex batch).
        grid: None (default) or the patches of `embed` (their grid): needed
            by, and only by, blocks with windows or relative positions.

    Returns:
        `(tokens after the last block run, [tapped outputs, in order])`.
    """
    wanted = set(indices)
    last = len(s.blocks) - 1
    if stop_early:
        last = max(indices, default=-1)
    if output_tokens is not None and (stop_early or last in wanted):
        raise ValueError("`output_tokens` cuts the last block's output: it cannot be tapped.")
    if (rope is None) != (s.rope is None):
        raise ValueError(
            "The blocks of a model with a rotary embedding take its tables (`rope=`), and only "
            f"those. Received: rope={'None' if rope is None else 'tables'} for a model with rope="
            f"{None if s.rope is None else s.rope.variant!r}"
        )
    taps = []
    for i, block in enumerate(s.blocks[: last + 1]):
        extra = {} if rope is None else {"rope": block_rope(s, rope, i)}
        if token_mask is not None:
            extra["attention_mask"] = token_mask
        if block.uses_grid:
            extra["grid"] = grid
        if i == len(s.blocks) - 1 and output_tokens is not None:
            x = block(x, training=training, output_tokens=output_tokens, **extra)
        else:
            x = block(x, training=training, **extra)
        if i in wanted:
            taps.append(x)
    return x, taps


def _rope(s, patches):
    """The rotary tables of images' patches; none for a patch dict (a model
    with a rotary embedding refuses it, `patch_inputs.check_patch_dict`)."""
    return None if patches is None else rope(s, patches)


def _embed_any(s, inputs, training):
    """`(tokens, patches or None, token mask or None)` of images or a patch dict."""
    if patch_inputs.is_patch_dict(inputs):
        x, mask = patch_inputs.embed(s, inputs, training=training)
        return x, None, mask
    x, patches = embed(s, stem(s, inputs, training=training), training=training)
    return x, patches, None


def outputs(s, images, training=None):
    """`model(images)`: every step, the last block computing only the tokens
    the head reads (`head_tokens`), which is exact and, for a class-token
    head, skips ~7 % of a 12-block model's work. `images` may be a NaFlex
    patch dict (`keras_vit.models.patch_inputs`): the blocks and the
    pooling then read its valid tokens only."""
    x, patches, mask = _embed_any(s, images, training)
    x, _ = run_blocks(s, x, training=training, output_tokens=head_tokens(s), rope=_rope(s, patches),
                      token_mask=mask, grid=patches)
    return head(s, final_norm(s, x, patches), token_mask=mask)


def final_norm(s, x, grid=None):
    """Step 4: the encoder's final norm on every token (identity with
    `pooled_norm`), or its neck on the patch tokens (which takes their
    `grid`, the patches of `embed`)."""
    if s.neck is not None:
        if grid is None:
            raise ValueError("A model with a neck needs the patch grid (`grid`) after its blocks.")
        return s.neck(x, grid=grid)
    return x if s.norm is None else s.norm(x)


def head(s, tokens, pre_logits=False, activation=True, token_mask=None):
    """Step 5: the output of the model from the final tokens.

    Args:
        s: the `Stages`.
        tokens: the output of `final_norm`.
        pre_logits: return the pooled features (after `fc_norm`, the
            embedding's projection and scaling and the pre-logits layer)
            instead of the classifier's output.
        activation: apply the classifier's activation (False: logits).
        token_mask: None or a boolean `(batch, tokens)`: the tokens the
            pooling reads (the valid ones of a NaFlex batch).

    Returns:
        What the model returns for these tokens (or its pre-activation
        value); a model without head returns its tokens or their pooling.
    """
    layers = s.head_layers
    if "pool" not in layers:
        return tokens
    x = layers["pool"](tokens) if token_mask is None else layers["pool"](tokens, token_mask=token_mask)
    if s.fc_norm is not None:
        x = s.fc_norm(x)
    for name in ("projection", "l2_normalize"):
        if name in layers:
            x = layers[name](x)
    if not s.include_top:
        return x
    if "pre_logits" in layers:
        x = layers["pre_logits"](x)
    if pre_logits:
        return x
    x = layers["head"](x)
    if "head_dist" in layers:
        # DeiT at inference: the mean of the class and distillation heads.
        second = layers["head_dist"](layers["pool_dist"](tokens))
        x = layers["head_average"]([x, second])
    if activation and "predictions" in layers:
        return layers["predictions"](x)
    return x


def split_tokens(s, tokens, patches, output_fmt="NHWC"):
    """Patch tokens as a grid (`"NHWC"`) or sequence (`"NLC"`), and the prefix.

    Args:
        s: the `Stages`.
        tokens: `(batch, prefix + h * w, D)`.
        patches: the `(batch, h, w, ...)` patches of `embed`: their grid.
        output_fmt: "NHWC" or "NLC".

    Returns:
        `(patch tokens, prefix tokens (batch, prefix, D))`.
    """
    check_choice(output_fmt, FEATURE_LAYOUTS, "output_fmt")
    spatial = output_fmt == "NHWC"
    if isinstance(tokens, keras.KerasTensor):  # a node of a functional model: a layer
        return TokenGrid(s.num_prefix_tokens, spatial, dtype=s.embedding.dtype_policy)([tokens, patches])
    # Inside a call, the computation itself: a layer made per call costs
    # its construction each time, and torch.compile cannot trace one.
    return split_token_grid(tokens, patches, s.num_prefix_tokens, spatial)


def intermediates(s, images, indices=None, norm=False, output_fmt="NHWC",
                  return_prefix_tokens=False, intermediates_only=False, training=None):
    """`ViT.forward_intermediates` on the `Stages` `s` (see there)."""
    check_choice(output_fmt, FEATURE_LAYOUTS, "output_fmt")
    taps = block_indices(len(s.blocks), indices)
    x, patches, mask = _embed_any(s, images, training)
    if patches is None and taps and output_fmt != "NLC":
        raise ValueError(
            "The patches of a NaFlex batch lie on per-image grids: their features come as "
            f"sequences. Pass output_fmt='NLC'. Received: output_fmt={output_fmt!r}"
        )
    x, features = run_blocks(s, x, taps, training=training, stop_early=intermediates_only,
                             rope=_rope(s, patches), token_mask=mask, grid=patches)
    outputs = []
    for y in features:
        # A token sequence stands for the grid when there is none (NLC only).
        grid_like = y if patches is None else patches
        spatial, prefix = split_tokens(s, final_norm(s, y, patches) if norm else y, grid_like, output_fmt)
        outputs.append((spatial, prefix) if return_prefix_tokens else spatial)
    if intermediates_only:
        return outputs
    return final_norm(s, x, patches), outputs
