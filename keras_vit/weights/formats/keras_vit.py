"""keras_vit's own weight files (`model.save_weights` `.weights.h5`, or the
weights inside a `.keras` archive) -> the canonical layout.

Keras reads its own files; `keras_vit.weights.mapping` names each variable
by its canonical key.
"""

import zipfile

import numpy as np

from keras_vit.weights.canonical import Checkpoint
from keras_vit.weights.files import check_file
from keras_vit.weights.mapping import checkpoint_key


def _structure_template(model, pre_logits):
    """A model with `model`'s layer tree and tiny shapes, to read files with.

    Keras' weight loader walks a model's layers and hands each the arrays
    stored for it; shapes do not matter for reading, so the template is small
    (one token, one unit per attention head). It has a head, and a
    pre-logits layer when `pre_logits`, so that a file's classifier is read
    whether or not `model` keeps it.
    """
    config = model.get_config()
    cell = tuple(model.effective_patch_size)
    config.update(
        weights=None,
        include_top=True,
        classes=1,
        # The names belong to the target's head, not to the one-class copy.
        class_names=None,
        representation_size=1 if pre_logits else None,
        hidden_size=model.num_heads,
        mlp_dim=1,
        image_size=cell,
        input_shape=cell + (model.num_channels,),
        dtype="float32",
        name=model.name,
    )
    return model.__class__.from_config(config)


def _read_weights_h5(path, model):
    """`{variable path: array}` of a `.weights.h5`, read by Keras' loader."""
    # A distillation head excludes a pre-logits layer: no template has both.
    for pre_logits in (False,) if getattr(model, "distillation_head", False) else (True, False):
        template, raw = _structure_template(model, pre_logits), {}
        for layer in template._flatten_layers(include_self=True):
            layer.load_own_variables = _capture(layer, raw)
        template.load_weights(path)
        # Keras tells layers of one class apart by their order in the model:
        # a file without a pre-logits layer hands its head to the
        # template's pre-logits layer and nothing to its head.
        if "head/kernel" in raw or "pre_logits/kernel" not in raw:
            return raw
    return raw


def _capture(layer, out):
    """A `load_own_variables` for `layer` that records the stored arrays."""

    def load_own_variables(store):
        own = {}
        layer.save_own_variables(own)  # index -> the layer's own variable
        for index in store.keys():
            variable = own.get(index)
            path = getattr(variable, "path", None) or f"{layer.path}/{index}"
            out[path] = np.asarray(store[index])

    return load_own_variables


def read(path, model=None):
    """Reads keras_vit weights (`.weights.h5` or `.keras`) into a `Checkpoint`.

    Keras reads its own files: a `.keras` archive is loaded as the model it
    holds (`safe_mode=True`); a `.weights.h5` file is read by Keras' weight
    loader walking a template with `model`'s layer tree, each layer
    recording the arrays stored for it instead of assigning them (so a file
    saved at another image size or class count is read as it is).

    Args:
        path: the file.
        model: for `.weights.h5`, a keras_vit model of the family the file
            was saved from (the target model).

    Example:

    >>> import keras_vit, os, tempfile
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8,
    ...                       num_layers=1, num_heads=2, mlp_dim=8, classes=3)
    >>> file = os.path.join(tempfile.mkdtemp(), "tiny.weights.h5")
    >>> model.save_weights(file)
    >>> read(file, model).params["Transformer/posembed_input/pos_embedding"].shape
    (1, 5, 8)
    """
    import keras

    path = check_file(path)
    try:
        if path.lower().endswith(".keras"):
            saved = keras.saving.load_model(path, compile=False, safe_mode=True)
            params = {
                checkpoint_key(v.path): keras.ops.convert_to_numpy(v) for v in saved.weights
            }
        else:
            if model is None:
                raise ValueError(f"Reading the Keras weights file {path!r} needs `model`.")
            raw = _read_weights_h5(path, model)
            params = {checkpoint_key(key): value for key, value in raw.items()}
    except (OSError, KeyError, TypeError, zipfile.BadZipFile) as error:
        raise ValueError(
            f"Cannot read checkpoint {path!r} as Keras weights: "
            f"{type(error).__name__}: {error}"
        ) from None
    if not params:
        raise ValueError(f"Checkpoint {path!r} holds no Keras layer weights.")
    return Checkpoint(path, "keras", params, {})
