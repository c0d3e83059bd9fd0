"""`MultiHeadSelfAttention` with the official ViT weight layout."""

import math

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.kernels import call_sublayer
from keras_vit.kernels.portable import masked_softmax
from keras_vit.layers.config import check_qkv_bias, qkv_biases
from keras_vit.layers.norms import RMSNorm, check_norm_kind, norm_layer
from keras_vit.layers.qk_norm import QKNorm
from keras_vit.layers.relative_position import (
    RELATIVE_POSITIONS,
    DecomposedRelativePosition,
    RelativePositionMlp,
    pad_prefix,
)
from keras_vit.layers.rotary import LAYOUTS, apply_rotary, rotary_spec
from keras_vit.layers.seeds import check_seed
from keras_vit.validation import (
    check_bool,
    check_choice,
    check_int,
    check_positive_float,
    check_positive_int,
    check_rate,
    pair,
)


def tokens_shape(shape, count):
    """`shape` `(batch, tokens, D)` with `count` tokens (None: as it is)."""
    shape = tuple(shape)
    return shape if count is None else (shape[0], count, *shape[2:])


def as_attention_mask(mask, query_tokens=None):
    """A layer's `attention_mask` as `(batch, 1|heads, queries, keys)` booleans.

    Args:
        mask: None, or a boolean (or integer: nonzero means True) tensor,
            True where a query may attend to a key: `(batch, tokens)` (a
            key-padding mask: every query may attend to the keys marked),
            `(batch, tokens, tokens)`, or `(batch, 1 or heads, tokens, tokens)`.
        query_tokens: None or an int `n`: only the first `n` queries' rows
            are kept.

    Returns:
        None or a boolean tensor of rank 4.

    Example:

    >>> import numpy as np
    >>> tuple(as_attention_mask(np.ones((2, 5), bool)).shape)
    (2, 1, 1, 5)
    >>> tuple(as_attention_mask(np.ones((2, 5, 5), bool), query_tokens=1).shape)
    (2, 1, 1, 5)
    """
    if mask is None:
        return None
    mask = ops.convert_to_tensor(mask)
    dtype = keras.backend.standardize_dtype(mask.dtype)
    rank = len(mask.shape)
    if rank not in (2, 3, 4) or not (dtype == "bool" or "int" in dtype):
        raise ValueError(
            "`attention_mask` must be a boolean (or 0/1 integer) tensor of shape "
            "(batch, tokens), (batch, tokens, tokens) or (batch, 1 or heads, tokens, tokens). "
            f"Received: attention_mask with shape={tuple(mask.shape)}, dtype={dtype}"
        )
    if dtype != "bool":
        mask = ops.not_equal(mask, 0)
    if rank == 2:
        return mask[:, None, None, :]
    if rank == 3:
        mask = mask[:, None]
    if query_tokens is not None and mask.shape[2] != 1:
        mask = mask[:, :, :query_tokens]
    return mask


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head self-attention (paper eq. 2, App. A).

    Weights are `query`, `key`, `value` (kernel `(D, heads, head_dim)`, bias
    `(heads, head_dim)`) and `out` (kernel `(heads, head_dim, D)`, bias
    `(D,)`): the layout of the official checkpoints and of Keras'
    `MultiHeadAttention`, so they load without reshaping. With
    `qkv_bias=False` the query, key and value projections have no bias (as
    some timm and transformers checkpoints), with a triple some of them
    have none (DINOv3's key); `out_bias=False` drops the output's.

    With `rope_layout`, the call takes rotary tables (`rope=`) and turns
    the queries and keys by them before the attention, which stays the
    fused kernel: the tables hold one row per token, identity rows (sine 0,
    cosine 1) for the prefix tokens (`RotaryEmbedding(num_prefix_tokens=)`
    makes them once per grid for every block).

    The ordinary call runs the projections as 2D matrix products and the
    attention through `keras_vit.kernels.attention` (the backend's
    fused kernel where it is the fastest). `attention_probs()` computes the
    softmax explicitly (in float32) for inspection; attention dropout, when
    training with a non-zero rate, takes the explicit path too. Quantized or
    LoRA-enabled projections are called as the Keras layers they are. The
    softmax is taken in float32 whatever the compute dtype.

    Args:
        num_heads: int, number of heads.
        head_dim: int, width of each head.
        dropout_rate: float in [0, 1), dropout on the attention probabilities.
        qkv_bias: True (default), False or a `(query, key, value)` triple
            of bools: which of the query, key and value projections add a
            bias.
        out_bias: bool, default True: whether the output projection adds a
            bias.
        out_norm: None (default) or a float, the epsilon of a norm of the
            attention's output (over `heads * head_dim`) before the output
            projection (sublayer `norm`; EVA02-CLIP's `scale_attn_inner`),
            of kind `qk_norm_kind`.
        rope_layout: None (default: no rotary embedding) or the layout of
            the rotary tables the call gets, "half" or "interleaved"
            (`keras_vit.layers.rotary.LAYOUTS`).
        kernel_initializer, bias_initializer: initializers of the projections.
        qk_norm: None (default) or a float, the epsilon of a LayerNorm of
            the queries and of the keys over `head_dim` before their product
            (`QKNorm`, sublayer `qk_norm`; ViT-22B, timm's `qk_norm=True`).
        qk_norm_kind: the kind of that norm (and of `out_norm`), a name of
            `keras_vit.layers.norms.NORMS`, default "layernorm".
        seed: None (default: drawn from Keras' global generator, which
            `keras.utils.set_random_seed` seeds) or an int, the seed of the
            attention dropout.
        differential: bool, default False: differential attention (Ye et
            al., arXiv:2410.05258; timm's `DiffAttention`). The projections
            have `2 * num_heads` heads of `head_dim / 2` (the weights' layout);
            head `h`'s two maps `a_1`, `a_2` (heads `2h`, `2h + 1`) both read
            its values (heads `2h`, `2h + 1` together), and its output is
            `RMSNorm(a_1 v - lambda a_2 v) * (1 - lambda_init)` with
            `lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2)
            + lambda_init` (weights `lambda_*`, `sub_norm`).
        block_index: int, default 0: the block's index, which sets
            differential attention's `lambda_init = 0.8 - 0.6 exp(-0.3 i)`.
        relative_position: None (default), "mlp", "shared_mlp" or
            "decomposed": a relative position term on the logits (see
            `keras_vit.layers.relative_position`): with "mlp" the layer's own
            MLP (sublayer `rel_pos`) maps the coordinates the call gets as
            `rope=` to a bias, with "shared_mlp" the call gets the bias
            itself; with "decomposed", MViTv2's term of the queries
            (sublayer `relative_position`, its tables learned for
            `relative_position_size`), and the call takes `grid`. The logits
            then take the explicit softmax path.
        relative_position_dim: int, default 128: the hidden width of the
            "mlp" kind's MLP.
        num_kv_heads: None (default: `num_heads`) or an int dividing it:
            grouped-query attention's key and value heads (`key`, `value`
            kernels `(D, num_kv_heads, head_dim)`); query head `h` reads
            key/value head `h // (num_heads // num_kv_heads)`, as timm's
            `AttentionRope` (Sapiens2).
        relative_position_size: None (default) or `(h, w)`: with
            "decomposed" (which needs it), the grid its tables are learned
            for.

    Call arguments:
        x: `(batch, tokens, D)`.
        training: bool, the attention dropout's mode.
        query_tokens: None (default: every token) or an int `n`: only the
            first `n` tokens' queries are computed (each still attends to
            every token), and only their outputs returned.
        attention_mask: None (default: every token attends to every token)
            or a boolean tensor, True where a query may attend to a key:
            `(batch, tokens)` (a key-padding mask), `(batch, tokens, tokens)`
            or `(batch, 1 or heads, tokens, tokens)` (a causal mask, for
            one). 0/1 integers are read as booleans. A token that may attend
            to no token gets a zero attention output.
        rope: None (default) or the rotary tables of `RotaryEmbedding`
            with its prefix rows: `(2, tokens, head_dim)` (sines, cosines)
            or `(2, tokens, heads, head_dim)` (per head: RoPE-ViT mixed);
            needs `rope_layout`. With `relative_position` "mlp" or
            "shared_mlp", the patch grid's relative positions instead
            (`RelativePositionTable`'s output).
        grid: with `relative_position="decomposed"`, `(h, w)` of the
            tokens' grid (static ints; the tokens are its cells, row by row).

    Returns:
        `(batch, tokens, D)` (`(batch, n, D)` with `query_tokens=n`).

    Example:

    >>> import numpy as np
    >>> layer = MultiHeadSelfAttention(num_heads=2, head_dim=4)
    >>> tuple(layer(np.zeros((1, 5, 8), "float32")).shape)
    (1, 5, 8)
    >>> tuple(layer(np.zeros((1, 5, 8), "float32"), query_tokens=1).shape)
    (1, 1, 8)
    >>> causal = np.tril(np.ones((1, 5, 5), bool))
    >>> tuple(layer(np.zeros((1, 5, 8), "float32"), attention_mask=causal).shape)
    (1, 5, 8)
    >>> from keras_vit.layers.rotary import RotaryEmbedding
    >>> tables = RotaryEmbedding(4, "dinov3", num_prefix_tokens=1)(np.zeros((1, 2, 2, 8), "float32"))
    >>> rotary = MultiHeadSelfAttention(num_heads=2, head_dim=4, qkv_bias=(True, False, True),
    ...                                 rope_layout="half")
    >>> tuple(rotary(np.zeros((1, 5, 8), "float32"), rope=tables).shape)
    (1, 5, 8)
    """

    def __init__(
        self,
        num_heads,
        head_dim,
        dropout_rate=0.0,
        qkv_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        seed=None,
        qk_norm=None,
        qk_norm_kind="layernorm",
        out_bias=True,
        out_norm=None,
        rope_layout=None,
        differential=False,
        block_index=0,
        relative_position=None,
        relative_position_dim=128,
        num_kv_heads=None,
        relative_position_size=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_kv_heads = check_positive_int(num_kv_heads, "num_kv_heads", allow_none=True)
        self.differential = check_bool(differential, "differential")
        self.block_index = check_int(block_index, "block_index", minimum=0)
        self.relative_position = check_choice(relative_position, (None,) + RELATIVE_POSITIONS, "relative_position")
        self.relative_position_dim = check_positive_int(relative_position_dim, "relative_position_dim")
        self.relative_position_size = None if relative_position_size is None else pair(
            relative_position_size, "relative_position_size")
        if (self.relative_position == "decomposed") != (self.relative_position_size is not None):
            raise ValueError(
                "`relative_position_size` (the grid of the tables) goes with, and only with, "
                f"relative_position='decomposed'. Received: relative_position={self.relative_position!r}, "
                f"relative_position_size={self.relative_position_size}"
            )
        self.qk_norm_epsilon = None if qk_norm is None else check_positive_float(qk_norm, "qk_norm")
        self.qk_norm_kind = check_norm_kind(qk_norm_kind)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.head_dim = check_positive_int(head_dim, "head_dim")
        self.dropout_rate = check_rate(dropout_rate, "dropout_rate")
        self.qkv_bias = check_qkv_bias(qkv_bias)
        self.out_bias = check_bool(out_bias, "out_bias")
        self.out_norm_epsilon = None if out_norm is None else check_positive_float(out_norm, "out_norm")
        self.rope_layout = None if rope_layout is None else check_choice(rope_layout, LAYOUTS, "rope_layout")
        self.seed = check_seed(seed)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = False

    @property
    def _heads(self):
        """`(heads, head width)` of the projections: differential attention
        splits each head's queries, keys and values in two."""
        if self.differential:
            return 2 * self.num_heads, self.head_dim // 2
        return self.num_heads, self.head_dim

    def build(self, input_shape):
        dim = input_shape[-1]
        heads, width = self._heads
        projection = dict(
            output_shape=(None, heads, width),
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
        )
        if self.num_kv_heads is not None and (self.num_heads % self.num_kv_heads or self.differential):
            raise ValueError(
                "`num_kv_heads` must divide `num_heads` (and differential attention has no grouped heads). "
                f"Received: num_kv_heads={self.num_kv_heads}, num_heads={self.num_heads}, "
                f"differential={self.differential}"
            )
        if self.differential and self.head_dim % 2:
            raise ValueError(
                f"Differential attention splits each head in two: `head_dim` must be even. "
                f"Received: head_dim={self.head_dim}"
            )
        kv_heads = self.num_kv_heads or heads
        for name, bias in zip(("query", "key", "value"), qkv_biases(self.qkv_bias)):
            shape = (None, heads if name == "query" else kv_heads, width)
            layer = keras.layers.EinsumDense(
                "btd,dhk->bthk", name=name, bias_axes="hk" if bias else None, **dict(projection, output_shape=shape)
            )
            layer.build(input_shape)
            setattr(self, name, layer)
        self.norm = None
        if self.out_norm_epsilon is not None:
            self.norm = norm_layer(self.qk_norm_kind, self.out_norm_epsilon, "norm", dtype=self.dtype_policy)
            self.norm.build((None, None, self.num_heads * self.head_dim))
        self.out = keras.layers.EinsumDense(
            "bthk,hkd->btd",
            output_shape=(None, dim),
            bias_axes="d" if self.out_bias else None,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="out",
        )
        self.out.build((None, None, heads, width))
        self.qk_norm = None
        if self.qk_norm_epsilon is not None:
            self.qk_norm = QKNorm(
                self.qk_norm_epsilon, norm_kind=self.qk_norm_kind, dtype=self.dtype_policy, name="qk_norm"
            )
            self.qk_norm.build((None, None, heads, width), (None, None, kv_heads, width))
        self._build_differential()
        self.rel_pos = None
        if self.relative_position == "mlp":
            self.rel_pos = RelativePositionMlp(self.num_heads, self.relative_position_dim, name="rel_pos")
            self.rel_pos.build((None, None, 2))
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, seed=self.seed, dtype=self.dtype_policy
        )
        self.decomposed = None
        if self.relative_position == "decomposed":
            self.decomposed = DecomposedRelativePosition(
                self.relative_position_size, self.head_dim, name="relative_position", dtype=self.dtype_policy
            )
            self.decomposed.build()
        self.built = True

    def _build_differential(self):
        """Differential attention's lambda vectors (`lambda_q1`, `lambda_k1`,
        `lambda_q2`, `lambda_k2`, each of a half head's width) and the RMSNorm
        of each head's output (`sub_norm`, epsilon 1e-5), as timm's `DiffAttention`."""
        self.sub_norm = None
        if not self.differential:
            return
        half = self.head_dim // 2
        init = keras.initializers.RandomNormal(stddev=0.1)
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            setattr(self, name, self.add_weight(name=name, shape=(half,), initializer=init))
        self.sub_norm = RMSNorm(epsilon=1e-5, name="sub_norm", dtype=self.dtype_policy)
        self.sub_norm.build((None, None, self.num_heads, self.head_dim))

    @property
    def lambda_init(self):
        """Differential attention's constant part of lambda, `0.8 - 0.6 exp(-0.3 block_index)`."""
        return 0.8 - 0.6 * math.exp(-0.3 * self.block_index)

    @classmethod
    def for_block(cls, config, num_heads, head_dim, grid_size=None, **kwargs):
        """The attention a block with `config` (a `BlockConfig`) holds;
        `grid_size` is the model's patch grid, the tables' size in a global
        block with relative positions."""
        layout = None if config.rope is None else rotary_spec(config.rope, **(config.rope_settings or {})).layout
        size = None
        if config.relative_position == "decomposed":
            size = config.window_size or grid_size
            if size is None:
                raise ValueError(
                    "A global block with relative positions needs the model's patch grid (`grid_size`) to size "
                    "its tables."
                )
        return cls(
            num_heads,
            head_dim,
            dropout_rate=config.attention_dropout_rate,
            qkv_bias=config.qkv_bias,
            qk_norm=config.layer_norm_epsilon if config.qk_norm else None,
            qk_norm_kind=config.norm_kind,
            out_bias=config.attention_out_bias,
            out_norm=config.layer_norm_epsilon if config.attention_out_norm else None,
            rope_layout=layout,
            differential=config.differential_attention,
            relative_position=config.relative_position,
            relative_position_dim=config.relative_position_dim,
            relative_position_size=size,
            **kwargs,
        )

    def _rotate(self, q, k, rope, query_tokens=None):
        if self.relative_position is not None:
            return q, k  # the tables are relative positions, for the logits
        if rope is None:
            if self.rope_layout is not None:
                raise ValueError(
                    f"Layer {self.name!r} has a rotary position embedding (rope_layout="
                    f"{self.rope_layout!r}): its call needs the rotary tables, `rope=`."
                )
            return q, k
        if self.rope_layout is None:
            raise ValueError(
                f"Layer {self.name!r} was built without a rotary embedding (rope_layout=None); "
                "it takes no `rope` tables."
            )
        sin, cos = rope[0], rope[1]
        k = apply_rotary(k, sin, cos, layout=self.rope_layout)
        if query_tokens is not None:  # the queries of the first tokens only: their rows
            sin, cos = sin[:query_tokens], cos[:query_tokens]
        return apply_rotary(q, sin, cos, layout=self.rope_layout), k

    def _project(self, x, query_tokens=None, rope=None):
        queries = x if query_tokens is None else x[:, :query_tokens]
        # (batch, tokens, D) by (D, heads, head_dim).
        q = kernels.project(self.query, queries)
        k = kernels.project(self.key, x)
        v = kernels.project(self.value, x)
        if self.qk_norm is not None:
            q, k = call_sublayer(self.qk_norm, q, k)
        q, k = self._rotate(q, k, rope, query_tokens)
        if self.num_kv_heads is not None and self.num_kv_heads != self.num_heads:
            # Grouped-query attention: query head h reads key/value head h // groups.
            groups = self.num_heads // self.num_kv_heads
            k, v = ops.repeat(k, groups, axis=2), ops.repeat(v, groups, axis=2)
        return q, k, v

    def _position_bias(self, rope, tokens, queries):
        """The relative position bias of the logits `(1, heads, queries, tokens)`, or None."""
        if self.relative_position not in ("mlp", "shared_mlp"):
            return None
        if rope is None:
            raise ValueError(
                f"Layer {self.name!r} has a relative position bias ({self.relative_position!r}): its "
                "call needs the grid's relative positions, `rope=` (`RelativePositionTable`)."
            )
        bias = self.rel_pos(rope) if self.rel_pos is not None else rope
        return pad_prefix(ops.cast(bias, "float32"), tokens, queries)

    def _output(self, context):
        if self.differential:
            context = self._differential_heads(context)
        if self.norm is not None:
            shape = ops.shape(context)
            merged = ops.reshape(context, (shape[0], shape[1], self.num_heads * self.head_dim))
            context = ops.reshape(call_sublayer(self.norm, merged), shape)
        # (batch, tokens, heads, head_dim) by (heads, head_dim, D).
        return kernels.project(self.out, context, axes=2)

    def _probs(self, q, k, mask=None, bias=None):
        # The softmax runs in float32 whatever the compute dtype.
        scale = 1.0 / math.sqrt(q.shape[-1])
        if bias is None:
            return kernels.attention_probs(q, k, scale=scale, mask=mask)
        logits = ops.cast(ops.einsum("bqhd,bthd->bhqt", q, k), "float32") * scale + bias
        return masked_softmax(logits, mask)

    def attention_probs(self, x, attention_mask=None, rope=None):
        """Attention probabilities `(batch, heads, tokens, tokens)`, float32
        (differential attention: both maps of each head, `2 * heads`)."""
        if self.decomposed is not None:
            raise ValueError(
                f"Layer {self.name!r} adds decomposed relative positions to its logits: its probabilities are "
                "not read (inspection covers attention without them)."
            )
        q, k, _ = self._project(x, rope=rope)
        return self._probs(q, k, as_attention_mask(attention_mask), self._position_bias(rope, x.shape[1], None))

    def _values(self, v):
        """Differential attention's values for its `2 * heads` maps: each
        map's head holds its head's two halves of the values in turn."""
        if not self.differential:
            return (v,)
        shape = ops.shape(v)
        pairs = ops.reshape(v, (shape[0], shape[1], self.num_heads, 2, shape[3]))
        return tuple(ops.repeat(pairs[:, :, :, n], 2, axis=2) for n in range(2))

    def _differential_heads(self, context):
        """`attn_1 v - lambda attn_2 v` of each head, RMS-normed and scaled
        by `1 - lambda_init`, from the `2 * heads` maps' outputs."""
        first, second = context
        shape = ops.shape(first)
        halves = [ops.reshape(c, (shape[0], shape[1], self.num_heads, 2, shape[3])) for c in (first, second)]
        maps = [ops.concatenate([halves[0][:, :, :, n], halves[1][:, :, :, n]], axis=-1) for n in range(2)]
        # lambda in float32 (timm's), whatever the variables' dtype.
        q1, k1, q2, k2 = (ops.cast(w, "float32") for w in (self.lambda_q1, self.lambda_k1, self.lambda_q2,
                                                           self.lambda_k2))
        lam = ops.exp(ops.sum(q1 * k1)) - ops.exp(ops.sum(q2 * k2)) + self.lambda_init
        out = maps[0] - ops.cast(lam, maps[0].dtype) * maps[1]
        out = call_sublayer(self.sub_norm, out) * (1.0 - self.lambda_init)
        return ops.reshape(out, (shape[0], shape[1], 2 * self.num_heads, shape[3]))

    def _context(self, q, k, v, mask, bias, training):
        scale = 1.0 / math.sqrt(q.shape[-1])
        if (training and self.dropout_rate > 0) or bias is not None:
            probs = call_sublayer(self.dropout, self._probs(q, k, mask, bias), training=training)
            return ops.einsum("bhqt,bthk->bqhk", ops.cast(probs, v.dtype), v)
        return kernels.attention(q, k, v, scale=scale, mask=mask)

    def call(self, x, training=None, query_tokens=None, attention_mask=None, rope=None, grid=None):
        mask = as_attention_mask(attention_mask, query_tokens)
        q, k, v = self._project(x, query_tokens, rope)
        if self.decomposed is not None:
            if grid is None or mask is not None or query_tokens is not None or (training and self.dropout_rate > 0):
                raise ValueError(
                    f"Layer {self.name!r} adds decomposed relative positions: its call takes the tokens' `grid` "
                    "and no attention mask, query subset or attention dropout."
                )
            rows, columns = self.decomposed.terms(q, grid)
            context = [kernels.decomposed_attention(q, k, values, rows, columns) for values in self._values(v)]
        else:
            bias = self._position_bias(rope, ops.shape(x)[1], query_tokens)
            context = [self._context(q, k, values, mask, bias, training) for values in self._values(v)]
        return self._output(context if self.differential else context[0])

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(self, x, training=None, query_tokens=None, attention_mask=None, rope=None, grid=None):
        return keras.KerasTensor(tokens_shape(x.shape, query_tokens), dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "head_dim": self.head_dim,
                "dropout_rate": self.dropout_rate,
                "qkv_bias": self.qkv_bias,
                "seed": self.seed,
                "qk_norm": self.qk_norm_epsilon,
                "qk_norm_kind": self.qk_norm_kind,
                "out_bias": self.out_bias,
                "out_norm": self.out_norm_epsilon,
                "rope_layout": self.rope_layout,
                "differential": self.differential,
                "block_index": self.block_index,
                "relative_position": self.relative_position,
                "relative_position_dim": self.relative_position_dim,
                "num_kv_heads": self.num_kv_heads,
                "relative_position_size": self.relative_position_size,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(
                    self.bias_initializer
                ),
            }
        )
        return config
