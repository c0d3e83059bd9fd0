"""What an exported artifact takes: images, a NaFlex patch batch, or what the model declares.

`keras.Model.export`'s `input_signature` read as `keras_vit.export`'s
options (`signature_options`), and the specs an exporter traces
(`input_signature`): one `(batch, height, width, channels)` image spec, or
with `naflex_length=n` the dict of `keras_vit.preprocessing.naflex.naflex_inputs` with `n`
tokens (`keras_vit.models.patch_inputs`).
"""

import numpy as np

from keras_vit.preprocessing.naflex import PATCH_INPUT_DTYPES, PATCH_INPUTS, patch_input_shapes
from keras_vit.validation import check_positive_int

# The exported graphs' image input.
INPUT_NAME = "images"


def signature_options(model, input_signature):
    """`batch_size` and `image_size` for `export_model` from Keras' `input_signature`.

    Args:
        model: the model being exported.
        input_signature: None, or a `keras.InputSpec` (alone or in a list
            or tuple of one) of shape `(batch, height, width, channels)`,
            each of batch, height and width None (dynamic or the model's)
            or an int.

    Returns:
        A dict with the `batch_size` and `image_size` it fixes.

    Example:

    >>> import keras, keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                       num_layers=1, num_heads=2, mlp_dim=32, classes=10)
    >>> signature_options(model, [keras.InputSpec(shape=(None, 48, 48, 3))])
    {'image_size': (48, 48)}
    """
    if input_signature is None:
        return {}
    spec = input_signature
    if isinstance(spec, (list, tuple)) and len(spec) == 1:
        spec = spec[0]
    if isinstance(spec, dict):
        return _patch_signature_options(model, spec)
    shape = getattr(spec, "shape", None)
    channels = model.input_shape[-1]
    if shape is None or len(shape) != 4 or shape[3] not in (None, channels):
        raise ValueError(
            "`input_signature` must be one keras.InputSpec of shape (batch, height, "
            f"width, {channels}). Received: input_signature={input_signature!r}"
        )
    options = {}
    if shape[0] is not None:
        options["batch_size"] = shape[0]
    if shape[1] is not None or shape[2] is not None:
        own = model.input_shape[1:3]
        options["image_size"] = tuple(s if s is not None else o for s, o in zip(shape[1:3], own))
    return options


def _patch_signature_options(model, specs):
    """`batch_size` and `naflex_length` from a dict of `InputSpec`s."""
    patch = model.patch_size[0] * model.patch_size[1] * model.input_shape[-1]
    shapes = {k: tuple(getattr(v, "shape", None) or ()) for k, v in specs.items()}
    length = shapes.get("patches", (None, None))[1:2]
    want = patch_input_shapes(length[0] if length else None, patch)
    ok = sorted(shapes) == sorted(PATCH_INPUTS) and all(
        len(shapes[k]) == len(want[k]) and shapes[k][1:] == want[k][1:] for k in PATCH_INPUTS)
    batches = {shapes[k][0] for k in shapes if shapes[k]}
    if not ok or not isinstance(want["patches"][1], int) or len(batches) != 1:
        raise ValueError(
            "`input_signature` as a dict takes a NaFlex patch batch of a fixed number of tokens n: "
            f"keras.InputSpecs of shapes {patch_input_shapes('n', patch, 'batch')} (batch None or an int). "
            f"Received: {shapes}"
        )
    options = {"naflex_length": want["patches"][1]}
    if batches != {None}:
        options["batch_size"] = batches.pop()
    return options


def check_naflex_export(model, length, image_size, quantize):
    """Refuses, before any work, a NaFlex export of a model that takes no
    patch dict, or with options it cannot have (an image size, int8)."""
    check_positive_int(length, "naflex_length")
    if image_size is not None or quantize is not None:
        raise ValueError(
            "An artifact for NaFlex patch batches takes patches on their own grids: it has no "
            f"image size and is exported in float32. Received: naflex_length={length}, "
            f"image_size={image_size!r}, quantize={quantize!r}"
        )
    check = getattr(model, "_check_input_dict", None)
    if check is None:
        raise ValueError(f"Model {model.name!r} takes no NaFlex patch batch. Received: naflex_length={length}")
    patch = model.patch_size[0] * model.patch_size[1] * model.input_shape[-1]
    shapes = patch_input_shapes(length, patch, 2)
    check({k: np.zeros(shapes[k], PATCH_INPUT_DTYPES[k]) for k in PATCH_INPUTS}, "naflex_length")


def input_signature(model, batch_size=None, naflex_length=None):
    """The traced input of an export: what the model declares
    (`model.export_signature(batch_size)`), else one image `InputSpec`, or
    the NaFlex dict's (`naflex_length` tokens).

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                       num_layers=1, num_heads=2, mlp_dim=32, classes=10)
    >>> input_signature(model).shape
    (None, 32, 32, 3)
    >>> {k: s.shape for k, s in input_signature(model, naflex_length=16).items()}["patches"]
    (None, 16, 192)
    """
    import keras

    declared = getattr(model, "export_signature", None)
    if declared is not None and naflex_length is None:
        return declared(batch_size)
    if naflex_length is None:
        height, width, channels = model.input_shape[1:]
        return keras.InputSpec(shape=(batch_size, height, width, channels), dtype="float32", name=INPUT_NAME)
    patch = model.patch_size[0] * model.patch_size[1] * model.input_shape[-1]
    shapes = patch_input_shapes(naflex_length, patch, batch_size)
    return {k: keras.InputSpec(shape=shapes[k], dtype=PATCH_INPUT_DTYPES[k], name=k) for k in PATCH_INPUTS}


def input_names(spec):
    """The traced inputs' names: a dict's keys, a list's specs' names, or `INPUT_NAME`."""
    if isinstance(spec, dict):
        return list(spec)
    return [s.name for s in spec] if isinstance(spec, list) else [INPUT_NAME]


def port_names(current, wanted, current_dtypes=None, wanted_dtypes=None):
    """The name each traced input gets: the wanted name of the one input of
    its dtype, else the wanted name that its current name contains
    (exporters keep a dict's keys in the names they make, but order the
    inputs their own way), else the wanted name at its position.

    Example:

    >>> port_names(["args_0_patch_coords", "args_0_patch_valid", "args_0_patches"],
    ...             ["patches", "patch_coords", "patch_valid"])
    ['patch_coords', 'patch_valid', 'patches']
    >>> port_names(["a", "b", "c"], ["patches", "patch_coords", "patch_valid"],
    ...             ["bool", "float32", "int32"], ["float32", "int32", "bool"])
    ['patch_valid', 'patches', 'patch_coords']
    >>> port_names(["input_layer"], ["images"])
    ['images']
    """
    named = []
    for position, name in enumerate(current):
        of_dtype = [
            w for w, dtype in zip(wanted, wanted_dtypes or ())
            if current_dtypes is not None and dtype == current_dtypes[position]
        ]
        contained = [w for w in wanted if w in name]
        if len(of_dtype) == 1:
            named.append(of_dtype[0])
        else:
            named.append(max(contained, key=len) if contained else wanted[position])
    return named


def input_dtypes(spec):
    """The traced inputs' dtypes, in `input_names` order."""
    specs = spec.values() if isinstance(spec, dict) else spec if isinstance(spec, list) else [spec]
    return [str(s.dtype) for s in specs]
