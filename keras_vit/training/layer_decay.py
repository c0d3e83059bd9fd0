"""Layer-wise learning-rate decay (BEiT, timm's `layer_decay`).

Fine-tuning a pre-trained ViT, the layers near the input change least:
block `i` learns at `lr * decay ** (num_layers + 1 - layer_id)`. The layer ids
are those of timm's `param_groups_layer_decay` for its `VisionTransformer`
(`group_matcher`): 0 for the stem (class and distillation tokens, position
embedding, patch embedding; a hybrid's ResNet is part of timm's
`patch_embed`), `i + 1` for block `i`, `num_layers` for the final norm (timm
groups it with the last block), and `num_layers + 1` (rate `lr`) for what
follows: pooling norm and heads. keras_vit's register tokens are embedding
weights and get id 0 (timm's pattern does not name `reg_token`, which
therefore falls to the head's id there).

Keras optimizers have one learning rate. Scaling the gradients instead would
be wrong for Adam(W), whose update does not depend on the gradient's scale;
`layer_decay_optimizer` scales each variable's learning rate in the update
itself, as a torch parameter group's `lr` does, and with it the decoupled
weight decay (torch's AdamW decays by `lr * weight_decay` of the group).
"""

import keras

from keras_vit.validation import check_fraction

_BLOCK_PREFIX = "encoderblock_"
_FINAL_NORM = "encoder_norm"
_STEM_END = "embedding"


def layer_ids(model):
    """`{top-level layer name: layer id}` of a keras_vit model, timm's ids.

    Args:
        model: a keras_vit model (`ViT`, `ViTHybrid`) with `num_layers`.

    Returns:
        A dict with every top-level layer that holds weights.
    """
    num_layers = model.num_layers
    ids, seen_embedding = {}, False
    for layer in model.layers:
        name = layer.name
        if name.startswith(_BLOCK_PREFIX) and name[len(_BLOCK_PREFIX):].isdigit():
            ids[name] = int(name[len(_BLOCK_PREFIX):]) + 1
        elif name == _FINAL_NORM:
            ids[name] = num_layers
        elif not seen_embedding:
            ids[name] = 0  # the stem, up to and including the patch embedding
        else:
            ids[name] = num_layers + 1
        seen_embedding = seen_embedding or name == _STEM_END
    return ids


def check_layer_decay(decay):
    """`decay` as a float in (0, 1], or a `ValueError` naming it."""
    return check_fraction(decay, "layer_decay")


def layer_decay_multipliers(model, decay):
    """`{variable path: learning-rate multiplier}` for every weight of `model`.

    The multiplier of a weight in layer id `k` is
    `decay ** (num_layers + 1 - k)`.

    Args:
        model: a keras_vit model.
        decay: float in (0, 1], e.g. 0.75 (BEiT, MAE fine-tuning of B/16).

    Returns:
        A dict keyed by `variable.path`.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8,
    ...                       num_layers=2, num_heads=2, mlp_dim=8, classes=3)
    >>> rates = layer_decay_multipliers(model, 0.5)
    >>> [rates[p] for p in ("embedding/kernel", "encoderblock_0/LayerNorm_0/gamma",
    ...                     "encoder_norm/gamma", "head/kernel")]
    [0.125, 0.25, 0.5, 1.0]
    """
    decay = check_layer_decay(decay)
    ids = layer_ids(model)
    top = model.num_layers + 1
    return {v.path: decay ** (top - ids.get(v.path.partition("/")[0], top)) for v in model.weights}


class LayerDecayMixin:
    """Per-variable learning-rate multipliers for a Keras optimizer.

    Placed before a stock optimizer class (`layer_decay_optimizer` makes
    the pair): `update_step` runs the stock update with the variable's rate,
    and the decoupled weight decay moves into it with the same rate. Only
    `update_step` is per variable in every backend's loop, so the torch
    backend's fused multi-tensor updates are not used by these classes.

    Args:
        lr_multipliers: `{variable path: float}`; other variables get 1.
    """

    def __init__(self, *args, lr_multipliers=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lr_multipliers = {str(k): float(v) for k, v in dict(lr_multipliers or {}).items()}

    def build(self, variables):
        super().build(variables)
        # By position, as the optimizer's own slots are found.
        self._multipliers = [self.lr_multipliers.get(v.path, 1.0) for v in variables]

    def _apply_weight_decay(self, variables):
        """Done in `update_step`, with each variable's own rate."""

    def update_step(self, gradient, variable, learning_rate):
        scale = self._multipliers[self._get_variable_index(variable)]
        learning_rate = keras.ops.multiply(keras.ops.cast(learning_rate, variable.dtype), scale)
        if self.weight_decay is not None and self._use_weight_decay(variable):
            wd = keras.ops.cast(self.weight_decay, variable.dtype)
            self.assign(variable, variable - variable * wd * learning_rate)
        super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        config = super().get_config()
        config["lr_multipliers"] = dict(self.lr_multipliers)
        return config


_CLASSES = {}


def layer_decay_class(base):
    """The registered subclass `LayerDecay{base}` of a stock Keras optimizer class."""
    name = base.__name__
    if name not in _CLASSES:
        cls = type(f"LayerDecay{name}", (LayerDecayMixin, base), {"__module__": __name__})
        _CLASSES[name] = keras.saving.register_keras_serializable(package="keras_vit")(cls)
    return _CLASSES[name]


def layer_decay_optimizer(optimizer, model, decay):
    """A copy of a stock Keras optimizer with layer-wise learning-rate decay.

    Args:
        optimizer: an unbuilt `keras.optimizers.SGD`, `AdamW`, ... (any
            stock class; its config, schedule included, is kept).
        model: the keras_vit model it will train.
        decay: float in (0, 1].

    Returns:
        An optimizer of class `LayerDecay{SGD, AdamW, ...}`.

    Example:

    >>> import keras, keras_vit
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8,
    ...                       num_layers=2, num_heads=2, mlp_dim=8, classes=3)
    >>> opt = layer_decay_optimizer(keras.optimizers.AdamW(1e-3), model, 0.75)
    >>> type(opt).__name__, opt.lr_multipliers["embedding/kernel"]
    ('LayerDecayAdamW', 0.421875)
    """
    # The public class: torch's fused variants (same name) skip `update_step`.
    base = getattr(keras.optimizers, type(optimizer).__name__, None)
    if base is None or not isinstance(optimizer, base):
        raise ValueError(
            "`optimizer` must be a stock Keras optimizer (keras.optimizers.SGD, AdamW, ...). "
            f"Received: {type(optimizer).__name__}"
        )
    multipliers = layer_decay_multipliers(model, decay)
    config = optimizer.get_config()
    if isinstance(optimizer._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
        config["learning_rate"] = optimizer._learning_rate  # the object, not its config
    return layer_decay_class(base)(lr_multipliers=multipliers, **config)
