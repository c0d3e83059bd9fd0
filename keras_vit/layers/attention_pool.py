"""`AttentionPoolHead`: AIMv2's attention-pool head."""

import math

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.layers.attention import as_attention_mask
from keras_vit.layers.map_head import build_projections
from keras_vit.validation import check_bool, check_positive_int, head_width


@keras.saving.register_keras_serializable(package="keras_vit")
class AttentionPoolHead(keras.layers.Layer):
    """Pools `(batch, tokens, D)` to `(batch, D)`: a learned query attends to the tokens.

    The query `(1, 1, D)` is used as it is, split into heads (no query
    projection); the tokens pass a key and a value projection, the heads'
    attention outputs are concatenated and projected once more:
    `out(softmax(q k^T / sqrt(head_dim)) v)`. This is AIMv2's head
    (transformers' `Aimv2AttentionPoolingHead`: `cls_token`, `k_proj`,
    `v_proj`, `output_proj`). Unlike the MAP head (`MapHead`, SigLIP), it
    has no query projection, norm or MLP.

    Weights: `query` `(1, 1, D)`; `key`, `value` (kernel `(D, heads,
    head_dim)`, bias `(heads, head_dim)` with `qkv_bias`) and `out` (kernel
    `(heads, head_dim, D)`, bias `(D,)`), the layout of
    `MultiHeadSelfAttention`.

    Args:
        num_heads: int, attention heads; must divide the token width.
        qkv_bias: bool, default False (AIMv2's): biases on the key and value
            projections (the output projection has one).
        kernel_initializer: initializer of the projections.

    Call arguments:
        tokens: `(batch, tokens, D)`.
        token_mask: None (default: every token) or a boolean `(batch,
            tokens)`: the query attends to the tokens marked True only.

    Returns:
        `(batch, D)`.

    Example:

    >>> import numpy as np
    >>> head = AttentionPoolHead(num_heads=2)
    >>> tuple(head(np.zeros((3, 5, 8), "float32")).shape)
    (3, 8)
    >>> sorted(w.path.split("/", 1)[1] for w in head.weights)
    ['key/kernel', 'out/bias', 'out/kernel', 'query', 'value/kernel']

    Reference:
        Fini et al., "Multimodal Autoregressive Pre-training of Large Vision
        Encoders", arXiv:2411.14402.
    """

    def __init__(self, num_heads, qkv_bias=False, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.qkv_bias = check_bool(qkv_bias, "qkv_bias")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.input_spec = keras.layers.InputSpec(ndim=3)

    def build(self, input_shape):
        dim = input_shape[-1]
        self.head_dim = head_width(dim, self.num_heads)
        self.query = self.add_weight(
            name="query", shape=(1, 1, dim), initializer=keras.initializers.RandomNormal(stddev=0.02)
        )
        build_projections(self, ("key", "value"), input_shape)

    def query_heads(self):
        """The query split into heads, `(1, 1, heads, head_dim)`."""
        return ops.reshape(ops.cast(self.query, self.compute_dtype), (1, 1, self.num_heads, self.head_dim))

    def call(self, tokens, token_mask=None):
        q = self.query_heads()
        q = ops.broadcast_to(q, (ops.shape(tokens)[0],) + tuple(q.shape[1:]))
        k = kernels.project(self.key, tokens)
        v = kernels.project(self.value, tokens)
        context = kernels.attention(
            q, k, v, scale=1.0 / math.sqrt(self.head_dim), mask=as_attention_mask(token_mask)
        )
        return kernels.project(self.out, context, axes=2)[:, 0]

    def compute_output_shape(self, tokens_shape, token_mask_shape=None):
        return (tokens_shape[0], tokens_shape[-1])

    def get_config(self):
        return {
            **super().get_config(), "num_heads": self.num_heads, "qkv_bias": self.qkv_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
