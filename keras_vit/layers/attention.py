"""`MultiHeadSelfAttention` with the official ViT weight layout."""

import math

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.kernels import call_sublayer
from keras_vit.layers.config import check_qkv_bias, qkv_biases
from keras_vit.layers.norms import check_norm_kind, norm_layer
from keras_vit.layers.qk_norm import QKNorm
from keras_vit.layers.relative_position import DecomposedRelativePosition, attention_with_bias
from keras_vit.layers.rotary import LAYOUTS, apply_rotary, rotary_spec
from keras_vit.layers.seeds import check_seed
from keras_vit.validation import (
    check_bool,
    check_choice,
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
        relative_position_size: None (default) or `(h, w)`: a decomposed
            relative position term on the logits (sublayer
            `relative_position`, `keras_vit.layers.relative_position`), its
            tables learned for that grid; the call then takes `grid`.

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
            needs `rope_layout`.
        grid: with `relative_position_size`, `(h, w)` of the tokens' grid
            (static ints; the tokens are its cells, row by row).

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
        relative_position_size=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.relative_position_size = None if relative_position_size is None else pair(
            relative_position_size, "relative_position_size")
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

    def build(self, input_shape):
        dim = input_shape[-1]
        projection = dict(
            output_shape=(None, self.num_heads, self.head_dim),
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
        )
        for name, bias in zip(("query", "key", "value"), qkv_biases(self.qkv_bias)):
            layer = keras.layers.EinsumDense(
                "btd,dhk->bthk", name=name, bias_axes="hk" if bias else None, **projection
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
        self.out.build((None, None, self.num_heads, self.head_dim))
        self.qk_norm = None
        if self.qk_norm_epsilon is not None:
            self.qk_norm = QKNorm(
                self.qk_norm_epsilon, norm_kind=self.qk_norm_kind, dtype=self.dtype_policy, name="qk_norm"
            )
            self.qk_norm.build((None, None, self.num_heads, self.head_dim))
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, seed=self.seed, dtype=self.dtype_policy
        )
        self.relative_position = None
        if self.relative_position_size is not None:
            self.relative_position = DecomposedRelativePosition(
                self.relative_position_size, self.head_dim, name="relative_position", dtype=self.dtype_policy
            )
            self.relative_position.build()
        self.built = True

    @classmethod
    def for_block(cls, config, num_heads, head_dim, grid_size=None, **kwargs):
        """The attention a block with `config` (a `BlockConfig`) holds;
        `grid_size` is the model's patch grid, the tables' size in a global
        block with relative positions."""
        layout = None if config.rope is None else rotary_spec(config.rope, **(config.rope_settings or {})).layout
        size = None
        if config.relative_position is not None:
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
            relative_position_size=size,
            **kwargs,
        )

    def _rotate(self, q, k, rope, query_tokens=None):
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
        return q, k, v

    def _output(self, context):
        if self.norm is not None:
            shape = ops.shape(context)
            merged = ops.reshape(context, (shape[0], shape[1], self.num_heads * self.head_dim))
            context = ops.reshape(call_sublayer(self.norm, merged), shape)
        # (batch, tokens, heads, head_dim) by (heads, head_dim, D).
        return kernels.project(self.out, context, axes=2)

    def _probs(self, q, k, mask=None):
        # The softmax runs in float32 whatever the compute dtype.
        return kernels.attention_probs(q, k, scale=1.0 / math.sqrt(self.head_dim), mask=mask)

    def attention_probs(self, x, attention_mask=None, rope=None):
        """Attention probabilities `(batch, heads, tokens, tokens)`, float32."""
        if self.relative_position is not None:
            raise ValueError(
                f"Layer {self.name!r} adds relative positions to its logits: its probabilities are not read "
                "(inspection covers attention without them)."
            )
        q, k, _ = self._project(x, rope=rope)
        return self._probs(q, k, as_attention_mask(attention_mask))

    def call(self, x, training=None, query_tokens=None, attention_mask=None, rope=None, grid=None):
        mask = as_attention_mask(attention_mask, query_tokens)
        q, k, v = self._project(x, query_tokens, rope)
        if self.relative_position is not None:
            if grid is None or mask is not None or query_tokens is not None or (training and self.dropout_rate > 0):
                raise ValueError(
                    f"Layer {self.name!r} adds relative positions: its call takes the tokens' `grid` and no "
                    "attention mask, query subset or attention dropout."
                )
            bias = self.relative_position(q, grid=grid)
            context = attention_with_bias(q, k, v, 1.0 / math.sqrt(self.head_dim), bias)
        elif training and self.dropout_rate > 0:
            probs = call_sublayer(self.dropout, self._probs(q, k, mask), training=training)
            context = ops.einsum("bhqt,bthk->bqhk", ops.cast(probs, v.dtype), v)
        else:
            context = kernels.attention(q, k, v, scale=1.0 / math.sqrt(self.head_dim), mask=mask)
        return self._output(context)

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
