"""Input scaling and centre crops for the pretrained weights; label decoding.

One home for each: the scaling modes (`preprocess_input`), the resize and
centre crop of evaluation images (`center_crop`, used by the tf.data
pipelines and the tests; `resize_and_crop`, a `Preprocessing` record's own
resize, filter and crop, used by `keras_vit.classify` and the `keras-vit`
commands) and `decode_predictions`. Images of any sizes become one padded
NaFlex batch of patches with `naflex_inputs` (and `naflex_grid`, the grid
each is resized to), from `keras_vit.naflex`.
Models loaded from a preset carry their checkpoint's `Preprocessing` record
(`model.preprocessing`: mean/std, resize, crop, interpolation) and class names
(`model.class_names`); `preprocess_input(x, model=model)` and
`decode_predictions(preds, model=model)` use them.
"""

import math
import sys
import warnings

import keras
import numpy as np

from keras_vit import labels
from keras_vit.naflex import naflex_grid, naflex_inputs  # noqa: F401 (public here)
from keras_vit.validation import check_choice, check_fraction, pair
from keras_vit.weights.record import MODE_ALIASES as _ALIASES
from keras_vit.weights.record import MODE_STATISTICS
from keras_vit.weights.record import PREPROCESSING_MODES as MODES
from keras_vit.weights.record import Preprocessing  # noqa: F401 (public here too)
from keras_vit.weights.registry import list_records

# Per-channel statistics of ImageNet, on [0, 1] inputs (DeiT, timm).
IMAGENET_MEAN, IMAGENET_STD = MODE_STATISTICS["imagenet"]
INTERPOLATIONS = ("bilinear", "bicubic")
# Pillow's filter for each resampling name a `Preprocessing` record may hold.
PIL_FILTERS = {
    "nearest": "NEAREST",
    "bilinear": "BILINEAR",
    "bicubic": "BICUBIC",
    "lanczos": "LANCZOS",
    "box": "BOX",
    "hamming": "HAMMING",
    "area": "BOX",
}


def _resolve_mode(mode, weights):
    if mode is not None:
        resolved = _ALIASES.get(mode, mode)
        if resolved not in MODES:
            raise ValueError(
                f"`mode` must be one of {MODES + tuple(_ALIASES)}. "
                f"Received: mode={mode!r}"
            )
    if weights is None:
        return resolved if mode is not None else "inception"
    from_weights = getattr(weights, "preprocessing_mode", None)
    if isinstance(weights, str):
        found = {r.preprocessing_mode for r in list_records() if r.name == weights}
        if len(found) != 1:
            known = sorted({r.name for r in list_records()})
            raise ValueError(
                "`weights` must be a registered weights name ("
                + ", ".join(repr(n) for n in known)
                + f") or a WeightsRecord. Received: weights={weights!r}"
            )
        from_weights = found.pop()
    if from_weights not in MODES:
        raise ValueError(
            "`weights` must be a registered weights name or an object with a "
            f"`preprocessing_mode` attribute in {MODES} (a WeightsRecord). Received: weights={weights!r}"
        )
    if mode is not None and resolved != from_weights:
        raise ValueError(
            f"`mode` and `weights` disagree: the weights expect "
            f"mode={from_weights!r}. Received: mode={mode!r}, weights={weights!r}"
        )
    return from_weights


def _per_channel(stats):
    mean, std, _ = stats
    return len(set(mean)) > 1 or len(set(std)) > 1


def _check_channels(shape, stats):
    channels = len(stats[0])
    if len(shape) < 1 or (_per_channel(stats) and shape[-1] not in (None, channels)):
        raise ValueError(
            f"`images` must be channels-last with {channels} channels for "
            f"{stats[2]}. Received: images.shape={tuple(shape)}"
        )


def _check_finite(images):
    bad = ~np.isfinite(images)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            "`images` must hold finite pixel values in [0, 255]. Received: "
            f"{int(bad.sum())} NaN or infinite value(s) in images of shape "
            f"{images.shape}, the first at index {first}"
        )


def _check_range(images):
    """Warns when float pixels do not look like [0, 255] (already scaled?)."""
    if not images.size or not np.issubdtype(images.dtype, np.floating):
        return
    low, high = float(images.min()), float(images.max())
    if low < 0:
        seen = f"negative values (min {low:.3g}, max {high:.3g})"
    elif 0 < high <= 1:
        seen = f"values in [0, 1] (max {high:.3g})"
    else:
        return
    warnings.warn(
        f"`images` holds {seen}: `preprocess_input` takes pixels in [0, 255] "
        "and scales them itself. Were they scaled already? Multiply [0, 1] "
        "images by 255 first; pass images already preprocessed straight to "
        "the model.",
        UserWarning,
        stacklevel=3,
    )


def _affine(stats):
    """`(scale, offset)` with `scale * x + offset == (x / 255 - mean) / std`."""
    mean, std, _ = stats
    if mean == (0.5, 0.5, 0.5) and std == (0.5, 0.5, 0.5):
        return 1.0 / 127.5, -1.0  # the same numbers, computed without rounding
    if not _per_channel(stats):  # one scalar scaling serves any channel count
        mean, std = mean[:1], std[:1]
    mean, std = np.asarray(mean, "float64"), np.asarray(std, "float64")
    scale, offset = 1.0 / (255.0 * std), -mean / std
    return (scale, offset) if len(mean) > 1 else (float(scale[0]), float(offset[0]))


def _scale(x, stats, constant):
    # One multiply and one add, each correctly rounded on every backend (XLA
    # on CPU rounds float32 division differently from NumPy), so NumPy,
    # backend tensors and tf.data give bit-identical results.
    scale, offset = _affine(stats)
    return x * constant(scale) + constant(offset)


def _statistics(mode, weights, model, preprocessing=None):
    """`(mean, std, description)` of the scaling to apply."""
    if preprocessing is not None:
        if mode is not None or weights is not None or model is not None:
            raise ValueError(
                "Give `preprocessing`, or `mode`/`weights`/`model`, not both. Received: "
                f"mode={mode!r}, weights={weights!r}, model={getattr(model, 'name', model)!r}"
            )
        record = Preprocessing.from_config(preprocessing)
        return record.mean, record.std, "the given preprocessing"
    if model is None:
        mode = _resolve_mode(mode, weights)
        mean, std = MODE_STATISTICS[mode]
        return tuple(mean), tuple(std), f"mode={mode!r}"
    if mode is not None or weights is not None:
        raise ValueError(
            "Give `model`, or `mode`/`weights`, not both. Received: "
            f"mode={mode!r}, weights={weights!r}, model={getattr(model, 'name', model)!r}"
        )
    record = getattr(model, "preprocessing", None)
    if record is None:
        raise ValueError(
            f"Model {getattr(model, 'name', model)!r} carries no preprocessing record "
            "(`model.preprocessing` is None: it was not loaded from a preset or a "
            "registered weights name). Pass `mode=` instead."
        )
    record = Preprocessing.from_config(record)
    return record.mean, record.std, f"the preprocessing of model {model.name!r}"


def _tf_module(images):
    """The `tensorflow` module if `images` is a `tf.Tensor`, else None."""
    # tf can only have produced `images` if it is imported already; checking
    # sys.modules keeps TensorFlow out of the other backends' processes.
    tf = sys.modules.get("tensorflow")
    return tf if tf is not None and isinstance(images, tf.Tensor) else None


def preprocess_input(images, mode=None, weights=None, model=None, preprocessing=None):
    """Scales images with pixel values in [0, 255] the way weights expect.

    - "inception" (every Google ViT checkpoint): `x / 127.5 - 1`, in [-1, 1].
    - "imagenet" (DeiT and timm-trained ViTs): `(x / 255 - mean) / std` with
      the ImageNet `mean` (0.485, 0.456, 0.406) and `std` (0.229, 0.224,
      0.225) per channel.
    - `model=`: `(x / 255 - mean) / std` with the statistics the model's
      checkpoint was trained with (`model.preprocessing`, set by
      `keras_vit.from_preset` and by registered `weights=` names).

    It is computed as `x * scale + offset` with the constants rounded to the
    compute dtype (within 2 ulp of the formulas above), the same on every
    backend. Works on NumPy arrays, on tensors of the current backend (also
    symbolic `keras.Input`s), and on `tf.Tensor`s inside a `tf.data` map
    function under any backend (that path uses TensorFlow ops only).

    Args:
        images: channels-last images, uint8 or float in [0, 255], any
            leading shape (a single image or a batch).
        mode: None (default: from `weights`, else "inception"), "inception"
            or "imagenet" ("tf" and "torch" are accepted as in
            `keras.applications`).
        weights: None, a registered weights name such as "imagenet21k", or
            a `WeightsRecord` (any object with a `preprocessing_mode` attribute).
        model: None, or a keras_vit model with a `preprocessing` record;
            exclusive with `mode` and `weights`.
        preprocessing: None, or a `Preprocessing` record (or its config)
            whose mean and std apply; exclusive with the others.

    Returns:
        Float images of the same shape and kind (NumPy in, NumPy out):
        float32 for integer input, the input's dtype for float input.

    Raises:
        ValueError: for NumPy images holding NaN or infinite values (the
            message counts them and gives the first index). Tensors pass
            through unchecked, NaN in giving NaN out: a check would need
            their values on the host, which a `tf.data` map or a traced
            function does not have.

    Float NumPy images whose values lie in [0, 1] (not all zero), or that
    hold negative values, get a `UserWarning`: they look scaled already,
    and scaling them again gives the model inputs it was not trained on.

    Example:

    >>> import numpy as np
    >>> preprocess_input(np.array([[[0, 127.5, 255]]]))
    array([[[-1.,  0.,  1.]]])
    >>> preprocess_input(np.zeros((1, 1, 3), "uint8"), weights="imagenet21k").dtype
    dtype('float32')
    """
    stats = _statistics(mode, weights, model, preprocessing)
    tf = _tf_module(images)
    if tf is not None:
        _check_channels(images.shape, stats)
        if not images.dtype.is_floating:
            images = tf.cast(images, "float32")
        dtype = images.dtype
        return _scale(images, stats, lambda v: tf.constant(v, dtype))
    if keras.ops.is_tensor(images) or isinstance(images, keras.KerasTensor):
        _check_channels(images.shape, stats)
        if not keras.backend.is_float_dtype(images.dtype):
            images = keras.ops.cast(images, "float32")
        dtype = keras.backend.standardize_dtype(images.dtype)
        return _scale(
            images,
            stats,
            lambda v: keras.ops.convert_to_tensor(np.asarray(v, dtype), dtype),
        )
    images = np.asarray(images)
    _check_channels(images.shape, stats)
    if not np.issubdtype(images.dtype, np.floating):
        images = images.astype("float32")
    _check_finite(images)
    _check_range(images)
    dtype = images.dtype
    return _scale(images, stats, lambda v: np.asarray(v, dtype))


class _PythonMath:
    """`maximum`, `minimum` and `floor` of Python numbers (`tf.math` has the same names)."""

    maximum = staticmethod(max)
    minimum = staticmethod(min)
    floor = staticmethod(math.floor)


def shorter_side_geometry(height, width, shorter, size, ops=_PythonMath):
    """Where an image goes when its shorter side is resized to `shorter`.

    The geometry of a `Preprocessing` record with an int `resize` (and of
    transformers' "shortest_edge" and torchvision's `Resize(int)`): the
    shorter side becomes `shorter`, the longer one keeps the aspect ratio,
    truncated; neither falls below the crop `size`; the centre `size` is
    then cut out.

    Args:
        height, width: the image size; Python numbers, or float scalar
            tensors with `ops=tf.math`.
        shorter: int, the shorter side after resizing.
        size: `(height, width)` of the crop.
        ops: `maximum`, `minimum` and `floor` of the numbers' library.

    Returns:
        `(resized_height, resized_width, top, left)`.

    Example:

    >>> shorter_side_geometry(300, 451, 36, (32, 32))
    (36, 54, 2, 11)
    """
    short = ops.minimum(height, width)
    # Products first: `shorter * short / short` is exact in floating point.
    resized_h = ops.maximum(ops.floor(shorter * height / short), size[0])
    resized_w = ops.maximum(ops.floor(shorter * width / short), size[1])
    return resized_h, resized_w, (resized_h - size[0]) // 2, (resized_w - size[1]) // 2


def crop_geometry(height, width, size, crop_fraction, ops=_PythonMath):
    """Where `center_crop` resizes an image to and where it crops it.

    The shorter side becomes `int(min(size) / crop_fraction)` (224 px at
    0.875: 256), the `resize` of `Preprocessing.from_mode(...,
    crop_fraction=...)`, and the centre `size` is cut out
    (`shorter_side_geometry`).

    Args:
        height, width: the image size; Python numbers, or float scalar
            tensors with `ops=tf.math`.
        size: `(height, width)` of the crop.
        crop_fraction: float in (0, 1].
        ops: `maximum`, `minimum` and `floor` of the numbers' library.

    Returns:
        `(resized_height, resized_width, top, left)`.

    Example:

    >>> crop_geometry(300, 450, (224, 224), 0.875)
    (256, 384, 16, 80)
    """
    return shorter_side_geometry(height, width, int(min(size) / crop_fraction), size, ops)


def _center_crop_tf(tf, image, size, crop_fraction, interpolation):
    shape = tf.cast(tf.shape(image)[-3:-1], tf.float32)
    height, width, top, left = crop_geometry(shape[0], shape[1], size, crop_fraction, tf.math)
    resized = tf.cast(tf.stack([height, width]), tf.int32)
    top, left = tf.cast(top, tf.int32), tf.cast(left, tf.int32)
    image = tf.image.resize(tf.cast(image, tf.float32), resized, method=interpolation, antialias=True)
    image = image[..., top : top + size[0], left : left + size[1], :]
    return tf.ensure_shape(image, image.shape[:-3] + size + image.shape[-1:])


def _center_crop_pil(image, size, crop_fraction, interpolation):
    height, width, top, left = crop_geometry(image.shape[0], image.shape[1], size, crop_fraction)
    resized = _pil_resize(image, (height, width), interpolation)
    return resized[top : top + size[0], left : left + size[1]]


def center_crop(images, size, crop_fraction=0.875, interpolation="bicubic"):
    """Resizes images (aspect ratio kept) and cuts out the centre `size`.

    The evaluation crop of timm and DeiT (shorter side to `size /
    crop_fraction`, then the centre); `crop_fraction=1` keeps as much of the
    image as the aspect ratio allows. NumPy images are resized with Pillow;
    `tf.Tensor`s (e.g. inside a `tf.data` map, under any backend) with
    `tf.image.resize`, antialiased as Pillow's filters are when shrinking,
    where "bicubic" is TensorFlow's, not Pillow's, kernel.

    Args:
        images: one `(H, W, C)` image or a batch `(B, H, W, C)`; NumPy uint8
            or float, or a `tf.Tensor`.
        size: int or `(height, width)` of the crop.
        crop_fraction: float in (0, 1], default 0.875 (256 -> 224).
        interpolation: "bicubic" (default) or "bilinear".

    Returns:
        The crops: NumPy of the input's dtype, or a float32 `tf.Tensor`.

    Example:

    >>> image = np.zeros((300, 450, 3), "uint8")
    >>> center_crop(image, 224).shape
    (224, 224, 3)
    """
    size = pair(size, "size")
    check_fraction(crop_fraction, "crop_fraction")
    check_choice(interpolation, INTERPOLATIONS, "interpolation")
    tf = _tf_module(images)
    if tf is not None:
        return _center_crop_tf(tf, images, size, crop_fraction, interpolation)
    images = np.asarray(images)
    if images.ndim not in (3, 4):
        raise ValueError(
            "`images` must be (height, width, channels) or a batch of them. "
            f"Received: images.shape={images.shape}"
        )
    if images.ndim == 4:
        return np.stack([_center_crop_pil(i, size, crop_fraction, interpolation) for i in images])
    return _center_crop_pil(images, size, crop_fraction, interpolation)


def _pil_resize(image, size, interpolation):
    """`image` resized to `size` `(height, width)` by Pillow with the named filter."""
    from PIL import Image

    method = getattr(Image.Resampling, PIL_FILTERS[interpolation])
    height, width = size
    if image.dtype == np.uint8 and image.shape[-1] in (3, 4):
        return np.asarray(Image.fromarray(image).resize((width, height), method))
    # Float images or other channel counts: one plane at a time.
    planes = [Image.fromarray(np.ascontiguousarray(image[..., c], "float32"), "F")
              for c in range(image.shape[-1])]
    return np.stack([np.asarray(p.resize((width, height), method)) for p in planes], axis=-1)


def resize_and_crop(image, preprocessing, image_size=None):
    """Resizes and crops one image as a `Preprocessing` record says.

    The record's geometry, as transformers' image processors and timm apply
    it: `resize=None` resizes straight to the input size (aspect ratio not
    kept, ViT's processor and the official evaluation); an int resizes the
    shorter side to it (aspect ratio kept), a `(height, width)` exactly,
    then the centre `image_size` is cut out. The filter is the record's
    `interpolation` (Pillow's, antialiased when shrinking, as transformers'
    Pillow path).

    Args:
        image: one `(H, W, C)` image, NumPy uint8 or float in [0, 255].
        preprocessing: a `Preprocessing` record or its config.
        image_size: None (the record's) or int or `(height, width)`: the
            model input size, needed when the record has none.

    Returns:
        The `(height, width, C)` image, of the input's dtype (float32 for
        float input).

    Example:

    >>> record = Preprocessing.from_mode("imagenet", image_size=224, crop_fraction=0.875)
    >>> resize_and_crop(np.zeros((300, 450, 3), "uint8"), record).shape
    (224, 224, 3)
    >>> straight = Preprocessing.from_mode("inception", image_size=(32, 48))
    >>> resize_and_crop(np.zeros((10, 10, 3), "uint8"), straight).shape
    (32, 48, 3)
    """
    record = Preprocessing.from_config(preprocessing)
    size = record.image_size or (pair(image_size, "image_size") if image_size is not None else None)
    if size is None:
        raise ValueError(
            "`image_size` is needed: the preprocessing record gives no input size. "
            f"Received: preprocessing={record!r}"
        )
    image = np.asarray(image)
    if image.ndim != 3:
        raise ValueError(
            f"`image` must be one (height, width, channels) image. Received: image.shape={image.shape}"
        )
    resize = record.resize
    if resize is None:
        return _pil_resize(image, size, record.interpolation)
    if isinstance(resize, int):
        height, width, top, left = shorter_side_geometry(*image.shape[:2], resize, size)
    else:  # an exact size, never below the crop
        height, width = max(resize[0], size[0]), max(resize[1], size[1])
        top, left = (height - size[0]) // 2, (width - size[1]) // 2
    resized = _pil_resize(image, (height, width), record.interpolation)
    return resized[top : top + size[0], left : left + size[1]]


def _model_labels(model, width):
    names = getattr(model, "class_names", None)
    if names is None:
        raise ValueError(
            f"Model {getattr(model, 'name', model)!r} carries no class names "
            "(`model.class_names` is None). For ImageNet heads call "
            "`decode_predictions(preds)` without `model`."
        )
    if len(names) != width:
        raise ValueError(
            f"`preds` has {width} classes but model {model.name!r} names "
            f"{len(names)}. Received: preds.shape[1]={width}"
        )
    return tuple(range(width)), tuple(names)


def _as_probabilities(preds, model):
    """Softmax of a logits head's rows (`classifier_activation=None`) that
    are not a distribution already."""
    if getattr(model, "classifier_activation", "softmax") is not None:
        return preds
    scores = preds.astype("float64")
    distribution = (scores >= 0).all(axis=1) & np.isclose(scores.sum(axis=1), 1.0, atol=1e-3)
    exp = np.exp(scores - scores.max(axis=1, keepdims=True))
    softmax = (exp / exp.sum(axis=1, keepdims=True)).astype(preds.dtype)
    return np.where(distribution[:, None], preds, softmax)


def decode_predictions(preds, top=5, model=None):
    """Names the top classes of predictions.

    Without `model`: ImageNet-1k or ImageNet-21k heads, named offline from
    the lists shipped in `keras_vit.labels`. With `model`: the class names
    its checkpoint came with (`model.class_names`, set by
    `keras_vit.from_preset` from transformers' `id2label`, timm's label
    lists or a keras_vit preset), and the scores as probabilities: a model
    whose head outputs logits (`classifier_activation=None`, as a model is
    fine-tuned) has its rows turned into probabilities by a softmax, as
    `keras_vit.classify` and `keras-vit inspect` report them (rows that are
    a distribution already are kept).

    Args:
        preds: scores of shape `(batch, classes)`, NumPy or a tensor; without
            `model`, classes must be 1000 or 21843.
        top: int, default 5: how many classes to return per sample.
        model: None, or a keras_vit model with `class_names`.

    Returns:
        A list with, per sample, a list of `top` tuples, highest score
        first: `(synset_id, class_name, score)` as
        `keras.applications.imagenet_utils.decode_predictions`, or
        `(class_index, class_name, probability)` with `model`.

    Example:

    >>> import numpy as np
    >>> preds = np.zeros((1, 1000), "float32")
    >>> preds[0, 281] = 0.5
    >>> decode_predictions(preds, top=1)
    [[('n02123045', 'tabby', 0.5)]]
    """
    if keras.ops.is_tensor(preds):
        preds = keras.ops.convert_to_numpy(preds)
    preds = np.asarray(preds)
    if preds.ndim != 2 or (model is None and preds.shape[1] not in labels.NUM_CLASSES):
        raise ValueError(
            "`decode_predictions` expects a batch of predictions of shape "
            "(batch, classes); without `model`, ImageNet's (batch, 1000) or "
            f"(batch, 21843). Received: preds.shape={preds.shape}"
        )
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"`top` must be a positive int. Received: top={top!r}")
    classes = preds.shape[1]
    if model is not None:
        ids, names = _model_labels(model, classes)
        preds = _as_probabilities(preds, model)
    else:
        ids, names = labels.synsets(classes), labels.class_names(classes)
    results = []
    for row in preds:
        # Stable sort: equal scores keep class order.
        best = np.argsort(-row, kind="stable")[:top]
        results.append([(ids[i], names[i], float(row[i])) for i in best])
    return results
