"""Artifacts that take raw images: the model's own preprocessing in the graph.

`export_model(model, path, format, raw_images=True)` exports, instead of
the model, a model of three steps: `keras_vit.layers.ImagePreprocessing`
(the resize, centre crop and scaling of the model's `Preprocessing`
record, as `keras_vit.classify` applies them with Pillow), the model, and a
softmax where the model returns logits. The artifact takes uint8 images
`(batch, height, width, channels)` of any size and returns the
probabilities `keras_vit.classify` reports.
"""

import numpy as np

from keras_vit.export.inputs import INPUT_NAME
from keras_vit.layers.image_preprocessing import FILTERS, ImagePreprocessing
from keras_vit.preprocessing import Preprocessing, preprocess_input, resize_and_crop
from keras_vit.validation import pair


def raw_record(model, raw_images, image_size=None, naflex_length=None, quantize=None, input_signature=None):
    """The `Preprocessing` record a raw-image artifact bakes in, or None.

    Refuses, before any work, what cannot take raw images: a model without
    a preprocessing record (or one that is no image model), a resize
    filter the graph cannot reproduce, and options that fix other inputs.

    Args:
        model: the model to export.
        raw_images: bool, `export_model`'s argument.
        image_size: None or the export's image size (the record follows it).
        naflex_length, quantize, input_signature: `export_model`'s arguments.

    Returns:
        A `Preprocessing` record with the artifact's crop size, or None
        when `raw_images` is False.
    """
    if not isinstance(raw_images, bool):
        raise ValueError(f"`raw_images` must be True or False. Received: raw_images={raw_images!r}")
    if not raw_images:
        return None
    given = {k: v for k, v in dict(naflex_length=naflex_length, quantize=quantize,
                                   input_signature=input_signature).items() if v is not None}
    if given:
        raise ValueError(
            "raw_images=True fixes the artifact's input (uint8 images of any size) and exports "
            f"in float32; it takes none of {sorted(given)}. Received: {given}"
        )
    if getattr(model, "export_signature", None) is not None or len(getattr(model, "inputs", [None])) != 1:
        raise ValueError(f"raw_images=True exports image models; {type(model).__name__} takes other inputs.")
    record = getattr(model, "preprocessing", None)
    if record is None:
        raise ValueError(
            f"raw_images=True bakes the model's preprocessing into the artifact, and model "
            f"{model.name!r} records none (`model.preprocessing` is None). Set it first, e.g. "
            "model.preprocessing = keras_vit.preprocessing.Preprocessing.from_mode('imagenet', "
            "image_size=224, crop_fraction=0.875)."
        )
    record = Preprocessing.from_config(record)
    if record.interpolation not in FILTERS:
        raise ValueError(
            f"raw_images=True reproduces Pillow's {', '.join(FILTERS)} resizes in the graph; model "
            f"{model.name!r} resizes with interpolation={record.interpolation!r}. Export without "
            "raw_images and prepare the images with keras_vit.load_images."
        )
    size = pair(image_size, "image_size") if image_size is not None else tuple(model.input_shape[1:3])
    return record.for_image_size(size) if record.image_size != size else record


def raw_image_model(model, record):
    """`model` behind `ImagePreprocessing(record)`, with a softmax on logits.

    Args:
        model: the prepared (traced) model.
        record: the `Preprocessing` record (`raw_record`).

    Returns:
        A functional `keras.Model` from uint8 images of any size.
    """
    import keras

    channels = model.input_shape[-1]
    images = keras.Input(shape=(None, None, channels), dtype="uint8", name=INPUT_NAME)
    x = ImagePreprocessing(**record.get_config(), name="image_preprocessing")(images)
    outputs = model(x)
    if getattr(model, "include_top", False) and getattr(model, "classifier_activation", "") is None:
        outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(outputs)
    wrapped = keras.Model(images, outputs, name=f"{model.name}_raw_images")
    wrapped.export_output_name = "probabilities" if getattr(model, "include_top", False) else "features"
    return wrapped


def raw_signature(batch_size, channels):
    """The traced input of a raw-image artifact: uint8, any height and width."""
    import keras

    return keras.InputSpec(shape=(batch_size, None, None, channels), dtype="uint8", name=INPUT_NAME)


def as_raw_images(images):
    """`images` as uint8 arrays: one batch, or a list of images of their own sizes.

    Raises:
        ValueError: for values that are not whole numbers in [0, 255].

    Example:

    >>> [image.dtype.name for image in as_raw_images([np.zeros((2, 3, 3)), np.full((4, 5, 3), 255.0)])]
    ['uint8', 'uint8']
    >>> as_raw_images(np.full((1, 2, 2, 3), 0.5))
    Traceback (most recent call last):
    ...
    ValueError: The artifact takes raw images: uint8 pixels in [0, 255] (it resizes and scales them itself). Received: float64 values in [0.5, 0.5]
    """
    if isinstance(images, (list, tuple)):
        return [as_raw_images(np.asarray(image)[None])[0] for image in images]
    array = np.asarray(images)
    if array.dtype == np.uint8:
        return array
    if not np.issubdtype(array.dtype, np.number) or not (
        np.isfinite(array).all() and (array == np.round(array)).all() and array.min() >= 0 and array.max() <= 255
    ):
        low, high = (float(array.min()), float(array.max())) if array.size else (0.0, 0.0)
        raise ValueError(
            "The artifact takes raw images: uint8 pixels in [0, 255] (it resizes and scales "
            f"them itself). Received: {array.dtype} values in [{low:.4g}, {high:.4g}]"
        )
    return array.astype("uint8")


def expected_probabilities(model, images, record):
    """What a raw-image artifact of `model` should return for `images`:
    `keras_vit.classify`'s preparation (Pillow), the model, a softmax on logits."""
    inputs = np.stack([
        preprocess_input(np.asarray(resize_and_crop(image, record), "float32"), preprocessing=record)
        for image in images
    ])
    outputs = np.asarray(model.predict(inputs, verbose=0), "float64")
    if getattr(model, "include_top", False) and getattr(model, "classifier_activation", "") is None:
        outputs = np.exp(outputs - outputs.max(-1, keepdims=True))
        outputs = outputs / outputs.sum(-1, keepdims=True)
    return outputs
