"""`ViT.for_inference`: the frozen copy with per-call work done once.

The copy is the model's class built again from its config (at a new image
size where asked), its variables assigned one at a time from the
original's, the learned position embedding resized once, and on torch its
projection kernels marked for oneDNN's layout (`kernels.pack_for_inference`).
Subclasses change the config and the values through the model's hooks
`_inference_config` and `_inference_values` (a hybrid folds its kernels'
standardisation in).
"""

import keras
import numpy as np

from keras_vit import kernels
from keras_vit.layers.interpolation import interpolate_position_embedding
from keras_vit.models.lora import refuse_adapters
from keras_vit.validation import pair
from keras_vit.weights.posemb import resample_posemb


def inference_copy(model, image_size=None):
    """The `for_inference` copy of a `ViT` (see `ViT.for_inference`).

    Args:
        model: a `keras_vit.ViT` (or subclass).
        image_size: None (the model's own size), an int or `(height, width)`.

    Returns:
        A new model of the same class with `trainable=False`.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                       num_layers=1, num_heads=2, mlp_dim=32, classes=10)
    >>> inference_copy(model, 48).grid_size
    (6, 6)
    """
    # The copy is built from the plain kernels, without the adapters.
    refuse_adapters(model, "`for_inference()`")
    config = model._inference_config(model.get_config())
    if image_size is not None:
        size = pair(image_size, "image_size")
        config["image_size"] = size
        config["input_shape"] = size + (model.num_channels,)
    copy = model.__class__.from_config(config)
    # The original's variables themselves, copied one at a time below: a
    # copy of all the weights at once would hold the model a third time.
    values = model._inference_values({v.path: v for v in model.weights})
    if copy.grid_size != model.grid_size and model.position_embedding == "learned":
        path = copy.get_layer("embedding").pos_embedding.path
        family = model.position_interpolation
        table = keras.ops.convert_to_numpy(values[path])
        if family == "official":
            values[path] = resample_posemb(table, copy.grid_size, model.num_prefix_rows, old_grid=model.grid_size)
        else:  # the family's own resize, as the model does on the fly
            values[path] = keras.ops.convert_to_numpy(interpolate_position_embedding(
                table, copy.grid_size, model.grid_size, model.num_prefix_rows, family
            ))
    for variable in copy.weights:
        value = values[variable.path]
        if isinstance(value, keras.Variable):
            value = keras.ops.convert_to_numpy(value)
        variable.assign(np.asarray(value, variable.dtype))
    copy.trainable = False
    kernels.pack_for_inference(copy.weights)
    return copy
