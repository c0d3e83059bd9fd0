"""Resizes and centre crops: the geometry of evaluation images.

`center_crop` (the tf.data pipelines and the tests: resize so the crop is
`crop_fraction` of the shorter side, then crop the centre) and
`resize_and_crop` (a `Preprocessing` record's own resize, filter and crop,
which `keras_vit.classify` and the `keras-vit` commands use); the pixel
geometry of both is computed once, in `shorter_side_geometry` and
`crop_geometry`.
"""

import numpy as np

from keras_vit.layers.image_preprocessing import PythonMath, shorter_side_geometry
from keras_vit.preprocessing.scaling import tf_module
from keras_vit.validation import check_choice, check_fraction, pair
from keras_vit.weights.record import Preprocessing

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


def crop_geometry(height, width, size, crop_fraction, ops=PythonMath):
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
    tf = tf_module(images)
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
