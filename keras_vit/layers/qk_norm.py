"""`QKNorm`: a norm of the attention queries and keys (ViT-22B)."""

import keras

from keras_vit.layers.norms import check_norm_kind, norm_layer
from keras_vit.validation import check_bool, check_positive_float


@keras.saving.register_keras_serializable(package="keras_vit")
class QKNorm(keras.layers.Layer):
    """Normalises queries and keys over `head_dim` before their dot product.

    ViT-22B (Dehghani et al. 2023) applies a LayerNorm to the queries and to
    the keys of every head, so that the attention logits cannot grow without
    bound (its training diverged without); timm's `qk_norm=True`, which
    takes the block's kind of norm for them. Each norm has its own scale
    (and offset) of shape `(head_dim,)`, shared by the heads: weights
    `query_norm` and `key_norm` (timm's `attn.q_norm` and `attn.k_norm`).

    The attention layer calls it between the projections and the dot
    product: `q, k = qk_norm(q, k)`.

    Args:
        epsilon: float, default 1e-6 (timm's ViT LayerNorm).
        center: bool, default True: whether each norm adds a learned
            offset, where its kind has one (ViT-22B's LayerNorms have none:
            `center=False`).
        norm_kind: a name of `keras_vit.layers.norms.NORMS`, default
            "layernorm".

    Input shape:
        `query`, `key`: `(batch, tokens, heads, head_dim)` each (the number
        of tokens may differ).

    Returns:
        `(query, key)`, normalised, of the input shapes.

    Example:

    >>> import numpy as np
    >>> q = np.random.default_rng(0).normal(3.0, 2.0, size=(1, 5, 2, 4)).astype("float32")
    >>> nq, nk = QKNorm()(q, q)
    >>> bool(np.abs(keras.ops.convert_to_numpy(nq).mean(axis=-1)).max() < 1e-5)
    True

    Reference:
        Dehghani et al., "Scaling Vision Transformers to 22 Billion
        Parameters", arXiv:2302.05442, §2.
    """

    def __init__(self, epsilon=1e-6, center=True, norm_kind="layernorm", **kwargs):
        super().__init__(**kwargs)
        self.epsilon = check_positive_float(epsilon, "epsilon")
        self.center = check_bool(center, "center")
        self.norm_kind = check_norm_kind(norm_kind)

    def build(self, query_shape, key_shape=None):
        head_dim = query_shape[-1]
        if key_shape is not None and key_shape[-1] != head_dim:
            raise ValueError(
                "Queries and keys must have the same head width. Received: "
                f"query shape {tuple(query_shape)}, key shape {tuple(key_shape)}"
            )
        norm = dict(center=self.center, dtype=self.dtype_policy)
        self.query_norm = norm_layer(self.norm_kind, self.epsilon, "query_norm", **norm)
        self.key_norm = norm_layer(self.norm_kind, self.epsilon, "key_norm", **norm)
        self.query_norm.build(query_shape)
        self.key_norm.build(key_shape if key_shape is not None else query_shape)
        self.built = True

    def call(self, query, key):
        return self.query_norm(query), self.key_norm(key)

    def compute_output_shape(self, query_shape, key_shape=None):
        return tuple(query_shape), tuple(key_shape if key_shape is not None else query_shape)

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon, "center": self.center, "norm_kind": self.norm_kind})
        return config
