"""`MapHead`: multi-head attention pooling (SigLIP's MAP head)."""

import math

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.layers.attention import as_attention_mask
from keras_vit.layers.config import MLP_ACTIVATIONS
from keras_vit.layers.norms import check_norm_kind, norm_layer
from keras_vit.layers.transformer import MlpBlock
from keras_vit.validation import (
    check_bool,
    check_choice,
    check_positive_float,
    check_positive_int,
    head_width,
)


def build_projections(layer, names, input_shape):
    """Builds the projections of a pooling head's attention as attributes of
    `layer`: each of `names` from tokens `(b, t, D)` to heads `(b, t, heads,
    head_dim)` (biased with `layer.qkv_bias`), and `out` back to `D`."""
    dim = input_shape[-1]
    common = dict(kernel_initializer=layer.kernel_initializer, dtype=layer.dtype_policy)
    for name in names:
        projection = keras.layers.EinsumDense(
            "btd,dhk->bthk", output_shape=(None, layer.num_heads, layer.head_dim),
            bias_axes="hk" if layer.qkv_bias else None, name=name, **common,
        )
        projection.build(input_shape)
        setattr(layer, name, projection)
    layer.out = keras.layers.EinsumDense(
        "bthk,hkd->btd", output_shape=(None, dim), bias_axes="d", name="out", **common
    )
    layer.out.build((None, None, layer.num_heads, layer.head_dim))
    layer.built = True


@keras.saving.register_keras_serializable(package="keras_vit")
class MapHead(keras.layers.Layer):
    """Pools `(batch, tokens, D)` to `(batch, D)` with a learned probe.

    A learned probe token attends to all the tokens (multi-head attention
    with its own query, key, value and output projections); the result `y`
    then passes `y + MLP(LayerNorm(y))`. This is big_vision's `MAPHead`
    (Zhai et al. 2022), the pooling of SigLIP, transformers'
    `SiglipMultiheadAttentionPoolingHead` and timm's `AttentionPoolLatent`.

    Weight names are big_vision's, so that its checkpoints load by renaming:
    `probe` `(1, 1, D)`; `MultiHeadDotProductAttention_0/{query,key,value}`
    (kernel `(D, heads, head_dim)`, bias `(heads, head_dim)`) and `.../out`
    (kernel `(heads, head_dim, D)`, bias `(D,)`), the layout of
    `MultiHeadSelfAttention`; `LayerNorm_0` (`gamma`, `beta`); `MlpBlock_0`
    (`Dense_0`, `Dense_1`). transformers' `head.attention.in_proj_weight`
    splits into the query, key and value kernels, timm's `attn_pool.q` is the
    query and `attn_pool.kv` the key and value.

    Args:
        num_heads: int, attention heads; must divide the token width.
        mlp_dim: int, hidden width of the MLP.
        layer_norm_epsilon: float, default 1e-6 (big_vision, SigLIP).
        activation: the MLP's activation, default "gelu_tanh" (SigLIP's
            `gelu_pytorch_tanh`, big_vision's `nn.gelu`); "gelu" (exact) or
            "quick_gelu", as `MlpBlock`.
        qkv_bias: bool, default True: biases on the query, key and value
            projections (the output keeps its bias).
        kernel_initializer: initializer of the projections.
        norm_kind: the kind of the norm before the MLP, a name of
            `keras_vit.layers.norms.NORMS`, default "layernorm".

    Call arguments:
        tokens: `(batch, tokens, D)`.
        token_mask: None (default: every token) or a boolean `(batch,
            tokens)`: the probe attends to the tokens marked True only
            (the valid patches of a padded NaFlex batch).

    Returns:
        `(batch, D)`.

    Example:

    >>> import numpy as np
    >>> head = MapHead(num_heads=2, mlp_dim=16)
    >>> tuple(head(np.zeros((3, 5, 8), "float32")).shape)
    (3, 8)
    >>> valid = np.array([[True] * 3 + [False] * 2] * 3)
    >>> tuple(head(np.zeros((3, 5, 8), "float32"), token_mask=valid).shape)
    (3, 8)
    >>> sorted({w.path.split("/")[1] for w in head.weights})
    ['LayerNorm_0', 'MlpBlock_0', 'MultiHeadDotProductAttention_0', 'probe']

    Reference:
        Zhai et al., "Scaling Vision Transformers", arXiv:2106.04560;
        Zhai et al., "Sigmoid Loss for Language Image Pre-Training",
        arXiv:2303.15343.
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        layer_norm_epsilon=1e-6,
        activation="gelu_tanh",
        qkv_bias=True,
        kernel_initializer="glorot_uniform",
        norm_kind="layernorm",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        self.layer_norm_epsilon = check_positive_float(layer_norm_epsilon, "layer_norm_epsilon")
        self.activation = check_choice(activation, MLP_ACTIVATIONS, "activation")
        self.qkv_bias = check_bool(qkv_bias, "qkv_bias")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.norm_kind = check_norm_kind(norm_kind)
        self.input_spec = keras.layers.InputSpec(ndim=3)

    def build(self, input_shape):
        dim = input_shape[-1]
        self.head_dim = head_width(dim, self.num_heads)
        self.probe = self.add_weight(
            name="probe", shape=(1, 1, dim), initializer=keras.initializers.GlorotUniform()
        )
        self.attention = _ProbeAttention(
            self.num_heads,
            self.head_dim,
            qkv_bias=self.qkv_bias,
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="MultiHeadDotProductAttention_0",
        )
        self.attention.build(input_shape)
        self.norm = norm_layer(
            self.norm_kind, self.layer_norm_epsilon, "LayerNorm_0", dtype=self.dtype_policy
        )
        self.norm.build((None, 1, dim))
        self.mlp = MlpBlock(
            self.mlp_dim,
            activation=self.activation,
            dtype=self.dtype_policy,
            name="MlpBlock_0",
        )
        self.mlp.build((None, 1, dim))
        self.built = True

    def call(self, tokens, token_mask=None):
        probe = ops.cast(self.probe, self.compute_dtype)
        probe = ops.broadcast_to(probe, (ops.shape(tokens)[0], 1, probe.shape[-1]))
        y = self.attention(probe, tokens, as_attention_mask(token_mask))
        y = y + self.mlp(self.norm(y))
        return y[:, 0]

    def compute_output_shape(self, tokens_shape, token_mask_shape=None):
        return (tokens_shape[0], tokens_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "activation": self.activation,
                "qkv_bias": self.qkv_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "norm_kind": self.norm_kind,
            }
        )
        return config


class _ProbeAttention(keras.layers.Layer):
    """Multi-head attention of a query sequence to a key/value sequence.

    The weights of `MultiHeadSelfAttention` (`query`, `key`, `value`, `out`
    `EinsumDense`s); the products run through `kernels.project` and
    `kernels.attention` as there, so that exporters see plain matrix products.
    Built and owned by `MapHead` (not serialised on its own).
    """

    def __init__(self, num_heads, head_dim, qkv_bias=True, kernel_initializer="glorot_uniform",
                 **kwargs):
        super().__init__(**kwargs)
        self.qkv_bias = qkv_bias
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        build_projections(self, ("query", "key", "value"), input_shape)

    def call(self, queries, tokens, attention_mask=None):
        q = kernels.project(self.query, queries)
        k = kernels.project(self.key, tokens)
        v = kernels.project(self.value, tokens)
        context = kernels.attention(q, k, v, scale=1.0 / math.sqrt(self.head_dim), mask=attention_mask)
        return kernels.project(self.out, context, axes=2)

    def compute_output_shape(self, queries_shape, tokens_shape, attention_mask_shape=None):
        return tuple(queries_shape)
