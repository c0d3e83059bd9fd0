"""The encoder's norms by name: the one factory every norm site calls.

A ViT normalises its tokens in several places: twice in every block
(`LayerNorm_0`, `LayerNorm_2`), before the first block (`pre_norm`), after
the last (`encoder_norm`, or `fc_norm` on the pooled features), in the MAP
head (`LayerNorm_0`) and on the queries and keys (`QKNorm`). Each of them
is made by `norm_layer` with the kind that the model's `BlockConfig` names
(`norm_kind`), so a new kind of norm is one entry of `NORMS`: a function
`(epsilon, center, name, dtype) -> layer` normalising over the last axis.

"layernorm" is Keras' own `LayerNormalization`, whose weights (`gamma`,
`beta`) carry the names that every checkpoint converter maps.

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
ValueError: `norm_kind` must be one of ('layernorm',). Received: norm_kind='batchnorm'
"""

import keras

from keras_vit.validation import check_choice


def _layer_norm(epsilon, center, name, dtype):
    return keras.layers.LayerNormalization(epsilon=epsilon, center=center, name=name, dtype=dtype)


# Each kind of norm by its name in `BlockConfig.norm_kind`.
NORMS = {"layernorm": _layer_norm}


def check_norm_kind(kind):
    """`kind` if it names a norm of `NORMS`, else a `ValueError` listing them."""
    return check_choice(kind, tuple(NORMS), "norm_kind")


def norm_layer(kind, epsilon, name, dtype=None, center=True):
    """A new norm layer of `kind` over the last axis.

    Args:
        kind: a name of `NORMS`: "layernorm" (`keras.layers.LayerNormalization`).
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
