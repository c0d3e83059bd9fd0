"""Input scaling for the pretrained weights: `preprocess_input` and its modes.

Models loaded from a preset carry their checkpoint's `Preprocessing` record
(`model.preprocessing`: mean/std, resize, crop, interpolation);
`preprocess_input(x, model=model)` scales as it says.
"""

import sys
import warnings

import keras
import numpy as np

from keras_vit.weights.record import MODE_ALIASES as _ALIASES
from keras_vit.weights.record import MODE_STATISTICS
from keras_vit.weights.record import PREPROCESSING_MODES as MODES
from keras_vit.weights.record import Preprocessing
from keras_vit.weights.registry import list_records

# Per-channel statistics of ImageNet, on [0, 1] inputs (DeiT, timm).
IMAGENET_MEAN, IMAGENET_STD = MODE_STATISTICS["imagenet"]


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


def _warn_default_mode():
    warnings.warn(
        "`preprocess_input` was given no `mode`, `weights`, `model` or `preprocessing`: it "
        "scaled with mode='inception' ([-1, 1], Google's checkpoints). Pass model=model to "
        "scale as the model's checkpoint records (DeiT and timm weights take mode='imagenet'), "
        "or mode='inception' to keep this scaling without the warning.",
        UserWarning,
        stacklevel=4,
    )


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
        if mode is None and weights is None:
            _warn_default_mode()
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


def tf_module(images):
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
        mode: None (default: from `weights`, else "inception", with a
            warning that says so when neither `weights`, `model` nor
            `preprocessing` is given), "inception" or "imagenet" ("tf" and
            "torch" are accepted as in `keras.applications`).
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
    >>> preprocess_input(np.array([[[0, 127.5, 255]]]), mode="inception")
    array([[[-1.,  0.,  1.]]])
    >>> preprocess_input(np.zeros((1, 1, 3), "uint8"), weights="imagenet21k").dtype
    dtype('float32')
    """
    stats = _statistics(mode, weights, model, preprocessing)
    tf = tf_module(images)
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
