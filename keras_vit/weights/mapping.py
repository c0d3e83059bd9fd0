"""The one table between keras_vit variable paths and checkpoint keys.

Every checkpoint reader in `keras_vit.weights.sources` produces a flat dict
keyed by the official vit_jax `.npz` names (pre-Linen numbering, e.g.
`Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel`).
keras_vit layers are named after those keys, so the mapping is a handful of
renames, listed below as data. Hybrid models need no extra rule: their
ResNet variables (`conv_root/kernel`, `block1/unit1/gn1/gamma`, ...) differ
from the official keys only by Keras' `gamma`/`beta`.
"""

import re

# (model path pattern, checkpoint key template), first match wins; the
# templates use `re` group references. Paths matching nothing keep their name.
PATH_RULES = (
    (r"^embedding/cls$", "cls"),
    (r"^embedding/dist$", "dist"),
    (r"^embedding/reg$", "reg"),
    (r"^embedding/pos_embedding$", "Transformer/posembed_input/pos_embedding"),
    (r"^(encoderblock_\d+/.*)$", r"Transformer/\1"),
    (r"^(encoder_norm/.*)$", r"Transformer/\1"),
)

# Keras normalisation layers call their affine weights gamma/beta; Flax calls
# them scale/bias (LayerNorm and GroupNorm alike).
LEAF_RENAMES = {"gamma": "scale", "beta": "bias"}

# Checkpoint key prefixes of the classifier, dropped for `include_top=False`
# (`head_dist`: DeiT's second head, on the distillation token).
HEAD_PREFIX = "head/"
HEAD_DIST_PREFIX = "head_dist/"
PRE_LOGITS_PREFIX = "pre_logits/"
POSEMB_KEY = "Transformer/posembed_input/pos_embedding"
# The prefix tokens with a position row (class, distillation), in row order;
# register tokens (`reg`) have none.
CLS_KEY = "cls"
DIST_KEY = "dist"
POSITION_PREFIX_KEYS = (CLS_KEY, DIST_KEY)

_COMPILED = tuple((re.compile(pattern), template) for pattern, template in PATH_RULES)


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
    head, _, leaf = path.rpartition("/")
    path = f"{head}/{LEAF_RENAMES.get(leaf, leaf)}" if head else LEAF_RENAMES.get(leaf, leaf)
    for pattern, template in _COMPILED:
        if pattern.match(path):
            return pattern.sub(template, path)
    return path


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
