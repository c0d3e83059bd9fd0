"""The encoder's norms by name: the one factory every norm site calls.

A ViT normalises its tokens in several places: twice in every block
(`LayerNorm_0`, `LayerNorm_2`), before the first block (`pre_norm`), after
the last (`encoder_norm`, or `fc_norm` on the pooled features), in the MAP
head (`LayerNorm_0`) and on the queries and keys (`QKNorm`). Each of them
is made by `norm_layer` with the kind that the model's `BlockConfig` names
(`norm_kind`), so a new kind of norm is one entry of `NORMS`: a function
`(epsilon, center, name, dtype) -> layer` normalising over the last axis.

"layernorm" is Keras' own `LayerNormalization`, whose weights (`gamma`,
`beta`) carry the names that every checkpoint converter maps; "rmsnorm" is
`RMSNorm` (weight `gamma`).

Example:

>>> import numpy as np
>>> norm = norm_layer("layernorm", epsilon=1e-6, name="LayerNorm_0")
>>> x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
>>> y = keras.ops.convert_to_numpy(norm(x))
>>> bool(np.allclose(y.mean(-1), 0, atol=1e-5)), [w.name for w in norm.weights]
(True, ['gamma', 'beta'])
>>> norm_layer("batchnorm", epsilon=1e-6, name="n")
Traceback (most recent call last):
...
ValueError: `norm_kind` must be one of ('layernorm', 'rmsnorm'). Received: norm_kind='batchnorm'
"""

import keras
from keras import ops

from keras_vit.validation import check_choice, check_positive_float


@keras.saving.register_keras_serializable(package="keras_vit")
class RMSNorm(keras.layers.Layer):
    """Root-mean-square norm over the last axis, with a learned scale.

    `x / sqrt(mean(x ** 2) + epsilon) * gamma`: no mean is subtracted and
    there is no offset, as transformers' and timm's `RMSNorm` define it. It
    is computed in float32 whatever the layer's compute dtype (as
    transformers does) and the result cast to the compute dtype.

    Args:
        epsilon: float, default 1e-6, added to the mean square.

    Input shape:
        `(..., D)`.

    Returns:
        The normalised input, of its shape. Weight: `gamma` `(D,)`, ones.

    Example:

    >>> import numpy as np
    >>> x = np.array([[3.0, -4.0]], "float32")
    >>> keras.ops.convert_to_numpy(RMSNorm(epsilon=1e-6)(x)).astype("float64").round(4).tolist()
    [[0.8485, -1.1314]]

    Reference:
        Zhang and Sennrich, "Root Mean Square Layer Normalization",
        arXiv:1910.07467.
    """

    def __init__(self, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = check_positive_float(epsilon, "epsilon")
        # The input and the scale are read in float32, never autocast.
        self.autocast = False

    def build(self, input_shape):
        self.gamma = self.add_weight(
            name="gamma", shape=(input_shape[-1],), initializer="ones", autocast=False
        )
        self.built = True

    def call(self, x):
        x = ops.cast(x, "float32")
        y = x * ops.rsqrt(ops.mean(ops.square(x), axis=-1, keepdims=True) + self.epsilon)
        return ops.cast(y * ops.cast(self.gamma, "float32"), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon})
        return config


def _layer_norm(epsilon, center, name, dtype):
    return keras.layers.LayerNormalization(epsilon=epsilon, center=center, name=name, dtype=dtype)


def _rms_norm(epsilon, center, name, dtype):
    return RMSNorm(epsilon=epsilon, name=name, dtype=dtype)  # no offset to center


# Each kind of norm by its name in `BlockConfig.norm_kind`.
NORMS = {"layernorm": _layer_norm, "rmsnorm": _rms_norm}


def check_norm_kind(kind):
    """`kind` if it names a norm of `NORMS`, else a `ValueError` listing them."""
    return check_choice(kind, tuple(NORMS), "norm_kind")


def norm_layer(kind, epsilon, name, dtype=None, center=True):
    """A new norm layer of `kind` over the last axis.

    Args:
        kind: a name of `NORMS`: "layernorm" (`keras.layers.LayerNormalization`)
            or "rmsnorm" (`RMSNorm`).
        epsilon: float, added to the variance.
        name: the layer's name (the checkpoints' name for that site).
        dtype: dtype or dtype policy of the layer.
        center: bool, default True: a learned offset where the kind has one
            (ViT-22B's query/key norms have none).

    Returns:
        An unbuilt Keras layer.
    """
    return NORMS[check_norm_kind(kind)](epsilon=epsilon, center=center, name=name, dtype=dtype)


def block_norm(config, name, dtype=None):
    """The norm a `keras_vit.layers.config.BlockConfig` chooses, named `name`.

    Example:

    >>> from keras_vit.layers.config import BlockConfig
    >>> block_norm(BlockConfig(layer_norm_epsilon=1e-5), "encoder_norm").epsilon
    1e-05
    """
    return norm_layer(config.norm_kind, config.layer_norm_epsilon, name, dtype=dtype)
