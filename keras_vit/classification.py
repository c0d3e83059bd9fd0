"""One call from image files to named probabilities: `keras_vit.classify`.

`classify(model, images)` reads the images (file paths, PIL images or
arrays), prepares them as the model's checkpoint expects (its
`Preprocessing` record: the resize, filter and centre crop, then the
scaling; `keras_vit.preprocessing.resize_and_crop`), runs the model and
names the most probable classes. `load_images` is its first half, for
code that runs the model itself.
"""

import collections
import os

import numpy as np

from keras_vit import labels
from keras_vit.preprocessing import Preprocessing, preprocess_input, resize_and_crop
from keras_vit.validation import check_positive_int

Prediction = collections.namedtuple("Prediction", ["index", "name", "probability"])
Prediction.__doc__ = """One class of a `classify` result: `(index, name, probability)`.

`name` is None where neither the model nor an ImageNet-sized head names the class."""


def _pil_image(image):
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image if isinstance(image, Image.Image) else None


def _read(path):
    try:
        from PIL import Image, ImageOps
    except ImportError as error:
        raise ImportError("Reading image files needs Pillow: pip install pillow") from error
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"No image file at {path!r} (resolved to {os.path.abspath(path)!r}).")
    try:
        with Image.open(path) as image:
            # Phone photos store their orientation apart from the pixels.
            return np.asarray(ImageOps.exif_transpose(image).convert("RGB"))
    except OSError as error:
        raise ValueError(f"Cannot read the image {path!r}: {error}") from None


def _as_rgb(array, where):
    array = np.asarray(array)
    if array.ndim == 2:
        array = array[..., None]
    if array.ndim != 3 or array.shape[-1] not in (1, 3, 4):
        raise ValueError(
            f"{where} must be an (height, width), (height, width, 1 | 3 | 4) image. "
            f"Received: shape {array.shape}"
        )
    if array.shape[-1] == 1:
        array = np.repeat(array, 3, axis=-1)
    return array[..., :3]


def _image_list(images):
    """`images` as a list of `(H, W, 3)` NumPy images."""
    import keras

    if isinstance(images, (str, os.PathLike)) or _pil_image(images) is not None:
        images = [images]
    elif keras.ops.is_tensor(images):
        images = keras.ops.convert_to_numpy(images)
    if isinstance(images, np.ndarray) and images.ndim != 4:
        images = [images]
    out = []
    for i, image in enumerate(images):
        if isinstance(image, (str, os.PathLike)):
            out.append(_read(image))
        elif _pil_image(image) is not None:
            out.append(np.asarray(image.convert("RGB")))
        else:
            out.append(_as_rgb(image, f"`images[{i}]`"))
    if not out:
        raise ValueError("`images` is empty: give at least one image.")
    return out


def _record(model, preprocessing):
    if preprocessing is None:
        preprocessing = getattr(model, "preprocessing", None)
        if preprocessing is None:
            raise ValueError(
                f"Model {getattr(model, 'name', model)!r} carries no preprocessing record (it "
                "was built from a file that does not say how its images were scaled). Pass "
                "preprocessing='inception' ([-1, 1], Google's checkpoints) or 'imagenet' "
                "(ImageNet mean/std, DeiT and timm), or a Preprocessing record."
            )
    if isinstance(preprocessing, str):
        preprocessing = Preprocessing.from_mode(preprocessing)
    record = Preprocessing.from_config(preprocessing)
    if record.image_size is None:
        record = record.for_image_size(tuple(model.input_shape[1:3]))
    return record


def load_images(images, model, preprocessing=None):
    """Reads images and prepares them as `model`'s checkpoint expects.

    Args:
        images: a file path, a PIL image, an `(H, W, C)` array in [0, 255],
            a batch `(N, H, W, C)`, or a list of any of these (sizes may
            differ).
        model: the keras_vit model the images are for.
        preprocessing: None (default: `model.preprocessing`), a mode
            ("inception", "imagenet") or a `Preprocessing` record.

    Returns:
        `(display, inputs)`: the resized and cropped images, uint8
        `(N, height, width, 3)`, and the model inputs, float32 of the same
        shape.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1,
    ...                       num_heads=2, mlp_dim=32, classes=3, preprocessing=
    ...                       Preprocessing.from_mode("imagenet", image_size=32))
    >>> display, inputs = load_images(np.zeros((40, 60, 3), "uint8"), model)
    >>> display.shape, inputs.dtype
    ((1, 32, 32, 3), dtype('float32'))
    """
    record = _record(model, preprocessing)
    display, inputs = [], []
    for image in _image_list(images):
        if image.dtype != np.uint8:
            image = np.asarray(image, "float32")
        resized = resize_and_crop(image, record)
        display.append(np.clip(np.round(resized), 0, 255).astype("uint8"))
        inputs.append(preprocess_input(np.asarray(resized, "float32"), preprocessing=record))
    return np.stack(display), np.stack(inputs).astype("float32")


def _probabilities(model, outputs):
    activation = getattr(model, "classifier_activation", "softmax")
    outputs = np.asarray(outputs, "float64")
    if activation is None:
        shifted = np.exp(outputs - outputs.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)
    if activation in ("softmax", "sigmoid"):
        return outputs
    raise ValueError(
        f"Model {model.name!r} ends in classifier_activation={activation!r}; `classify` "
        "reads logits (None), 'softmax' or 'sigmoid' outputs."
    )


def _names(model, classes):
    own = getattr(model, "class_names", None)
    if own is not None and len(own) == classes:
        return tuple(own)
    if classes in labels.NUM_CLASSES:
        return labels.class_names(classes)
    return (None,) * classes


def classify(model, images, top=5, preprocessing=None, batch_size=32):
    """The most probable classes of each image, named.

    Args:
        model: a keras_vit classifier, or anything `keras_vit.load_model`
            takes (a preset folder, an `hf://` handle, a file, a name).
        images: file paths, PIL images or arrays in [0, 255], one or a
            list (see `load_images`).
        top: int, default 5: classes per image (at most the model's).
        preprocessing: None (default: the model's record), a mode
            ("inception", "imagenet") or a `Preprocessing` record, for
            models that carry none.
        batch_size: int, default 32: images per forward pass.

    Returns:
        A list with, per image, a list of `min(top, classes)`
        `Prediction(index, name, probability)` tuples, most probable first:
        probabilities from the model's softmax (applied here to a model
        that returns logits), names from `model.class_names` or, for 1000
        and 21843 classes, ImageNet's.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1,
    ...                       num_heads=2, mlp_dim=32, classes=2, class_names=["no", "yes"],
    ...                       preprocessing=Preprocessing.from_mode("inception", image_size=32))
    >>> [p.name for p in classify(model, np.zeros((40, 60, 3), "uint8"), top=2)[0]]
    ['no', 'yes']
    """
    from keras_vit.resolver import load_model

    model = load_model(model)
    check_positive_int(top, "top")
    check_positive_int(batch_size, "batch_size")
    if not getattr(model, "include_top", True):
        raise ValueError(f"Model {model.name!r} has no classifier head (include_top=False).")
    _, inputs = load_images(images, model, preprocessing)
    outputs = np.concatenate([
        np.asarray(model.predict_on_batch(inputs[i : i + batch_size]))
        for i in range(0, len(inputs), batch_size)
    ])
    probabilities = _probabilities(model, outputs)
    names = _names(model, probabilities.shape[-1])
    results = []
    for row in probabilities:
        best = np.argsort(-row, kind="stable")[: min(top, len(row))]
        results.append([Prediction(int(i), names[i], float(row[i])) for i in best])
    return results
