"""The one table between keras_vit variable paths and checkpoint keys.

Every checkpoint reader (`keras_vit.weights.formats`) produces a flat dict
keyed by the canonical names of `keras_vit.weights.canonical` (the official
vit_jax `.npz` ones, pre-Linen numbering, e.g.
`Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel`).
keras_vit layers are named after those keys, so the mapping is a handful of
renames, a table on the rule engine (`keras_vit.weights.rules`). Hybrid
models need no extra rule: their ResNet variables (`conv_root/kernel`, `block1/unit1/gn1/gamma`, ...) differ
from the official keys only by Keras' `gamma`/`beta`.
"""

from keras_vit.weights import canonical as C
from keras_vit.weights.rules import RuleTable

# keras_vit variable path -> checkpoint key, first match wins. Keras
# normalisation layers call their affine weights gamma/beta; Flax calls them
# scale/bias (LayerNorm and GroupNorm alike). Paths matching nothing else
# keep their name.
_T = "Transformer/"
TABLE = RuleTable(
    (
        ("embedding/cls", C.CLS),
        ("embedding/dist", C.DIST),
        ("embedding/reg", C.REG),
        ("embedding/pos_embedding", C.POSEMB),
        ("encoderblock_{i}/{path}/gamma", _T + "encoderblock_{i}/{path}/scale"),
        ("encoderblock_{i}/{path}/beta", _T + "encoderblock_{i}/{path}/bias"),
        ("encoderblock_{i}/{path}", _T + "encoderblock_{i}/{path}"),
        ("encoder_norm/gamma", C.ENCODER_NORM + "scale"),
        ("encoder_norm/beta", C.ENCODER_NORM + "bias"),
        ("{path}/gamma", "{path}/scale"),
        ("{path}/beta", "{path}/bias"),
        ("gamma", "scale"),
        ("beta", "bias"),
        ("{path}", "{path}"),
    )
)

# Checkpoint key prefixes of the classifier, dropped for `include_top=False`.
HEAD_PREFIX = C.HEAD
HEAD_DIST_PREFIX = C.HEAD_DIST
PRE_LOGITS_PREFIX = C.PRE_LOGITS
POSEMB_KEY = C.POSEMB
CLS_KEY = C.CLS
DIST_KEY = C.DIST
POSITION_PREFIX_KEYS = C.POSITION_PREFIX_KEYS


def checkpoint_key(path):
    """The official checkpoint key of a keras_vit variable path.

    Args:
        path: a variable path, e.g. `"encoderblock_0/LayerNorm_0/gamma"`.

    Returns:
        The key, e.g. `"Transformer/encoderblock_0/LayerNorm_0/scale"`.

    Example:

    >>> checkpoint_key("embedding/pos_embedding")
    'Transformer/posembed_input/pos_embedding'
    >>> checkpoint_key("block1/unit1/gn_proj/beta")
    'block1/unit1/gn_proj/bias'
    """
    return TABLE.canonical_key(path)


def model_variables(model):
    """`{checkpoint key: variable}` for every weight of a model.

    Raises:
        ValueError: if two variables map to the same key (a model whose layer
            names do not follow the checkpoint).
    """
    table = {}
    for variable in model.weights:
        key = checkpoint_key(variable.path)
        if key in table:
            raise ValueError(
                f"Variables {table[key].path!r} and {variable.path!r} of model "
                f"{model.name!r} both map to checkpoint key {key!r}."
            )
        table[key] = variable
    return table


def model_state(model):
    """`{checkpoint key: NumPy array}` of a model's current weights.

    The inverse of loading: an official-layout flat dict (as in the `.npz`
    files), e.g. for `numpy.savez` or for an independent reference.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8,
    ...                       num_layers=1, num_heads=2, mlp_dim=8, classes=3)
    >>> model_state(model)["head/kernel"].shape
    (8, 3)
    """
    import keras

    return {
        key: keras.ops.convert_to_numpy(variable)
        for key, variable in model_variables(model).items()
    }
