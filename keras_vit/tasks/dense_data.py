"""Folders of images with segmentation masks or depth maps, read and checked
before training.

A folder holds `images/` and, beside it, `masks/` (segmentation) or
`depth/` (depth), the files paired by their name without its extension
(`images/street_01.jpg` with `masks/street_01.png`). Masks are PNGs holding
class indices: a palette ("P") image's indices, or grey levels; 255 marks
pixels without a label. Depth maps are 16-bit (or 8-bit) PNGs whose values
times `depth_scale` are the depth (1/1000 for millimetres, KITTI's 1/256),
or `.npy` float arrays in the depth's own unit; 0 marks pixels without
depth. Every file is read and checked before anything is returned: an image
without its target, a target of another size than its image, a class index
at or above the model's classes, a file that cannot be read: each a
`ValueError` naming the file.

The images are resized to the model's input size (its `image_size`) with
the model's filter and scaled as its preprocessing says; the targets are
resized with nearest neighbours (class indices and depths are not blended).
"""

import os

import numpy as np

from keras_vit.preprocessing.dense import DenseProcessing, scale_pixels
from keras_vit.tasks.images import IMAGE_SUFFIXES, rgb_pixels
from keras_vit.validation import check_positive_float, pair

IGNORE_INDEX = 255


def _pil():
    try:
        from PIL import Image, ImageOps
    except ImportError as error:
        raise ImportError("Reading image folders needs Pillow: pip install pillow") from error
    return Image, ImageOps


def _images(folder):
    directory = os.path.join(os.fspath(folder), "images")
    if not os.path.isdir(directory):
        raise ValueError(f"{os.fspath(folder)!r} has no images/ folder (images/, with masks/ or depth/ beside it).")
    names = sorted(n for n in os.listdir(directory) if n.lower().endswith(IMAGE_SUFFIXES))
    if not names:
        raise ValueError(f"{directory!r} holds no image ({', '.join(IMAGE_SUFFIXES)}).")
    return directory, names


def _pair(folder, kind, image_name, suffixes):
    stem = os.path.splitext(image_name)[0]
    for suffix in suffixes:
        path = os.path.join(os.fspath(folder), kind, stem + suffix)
        if os.path.isfile(path):
            return path
    raise ValueError(
        f"The image {os.path.join(os.fspath(folder), 'images', image_name)!r} has no {kind[:-1] if kind == 'masks' else kind} "
        f"file: expected {os.path.join(os.fspath(folder), kind, stem)}{'|'.join(suffixes)}."
    )


def _read_rgb(path):
    Image, ImageOps = _pil()
    try:
        with Image.open(path) as image:
            return rgb_pixels(ImageOps.exif_transpose(image), f"The image {path!r}")
    except OSError as error:
        raise ValueError(f"Cannot read the image {path!r}: {error}") from None


def read_mask(path):
    """A mask PNG's class indices `(H, W)` int32: a palette image's indices, or grey levels."""
    Image, _ = _pil()
    try:
        with Image.open(path) as image:
            if image.mode in ("P", "L", "I", "I;16"):
                return np.asarray(image).astype("int32")
            if image.mode in ("RGB", "RGBA"):
                values = np.asarray(image)[..., :3]
                if not (np.all(values[..., 0] == values[..., 1]) and np.all(values[..., 1] == values[..., 2])):
                    raise ValueError(
                        f"The mask {path!r} is a colour image: masks hold class indices (a palette PNG or grey levels)."
                    )
                return values[..., 0].astype("int32")
            raise ValueError(f"The mask {path!r} is a {image.mode!r} image: masks are palette or grey-level PNGs.")
    except OSError as error:
        raise ValueError(f"Cannot read the mask {path!r}: {error}") from None


def read_depth(path, depth_scale):
    """A depth file's depths `(H, W)` float32: a PNG's values times `depth_scale`, or a `.npy` array."""
    if path.endswith(".npy"):
        depth = np.load(path, allow_pickle=False)
        if depth.ndim != 2:
            raise ValueError(f"The depth file {path!r} must hold one (height, width) array. Received: shape {depth.shape}")
        return depth.astype("float32")
    Image, _ = _pil()
    try:
        with Image.open(path) as image:
            values = np.asarray(image)
    except OSError as error:
        raise ValueError(f"Cannot read the depth file {path!r}: {error}") from None
    if values.ndim != 2:
        raise ValueError(f"The depth file {path!r} must be a single-channel (16-bit) PNG. Received: shape {values.shape}")
    return values.astype("float32") * depth_scale


def _resize_nearest(array, size):
    Image, _ = _pil()
    mode = "F" if array.dtype.kind == "f" else "I"
    image = Image.fromarray(array.astype("float32" if mode == "F" else "int32"), mode)
    return np.asarray(image.resize((size[1], size[0]), Image.Resampling.NEAREST)).astype(array.dtype)


def _record(model, image_size):
    record = getattr(model, "preprocessing", None)
    # Without a record: ImageNet's statistics, bicubic (keras_vit's default scaling for these models).
    record = DenseProcessing(resize="none") if record is None else DenseProcessing.from_config(record)
    size = pair(image_size, "image_size") if image_size is not None else tuple(model.image_size)
    cell = model.effective_patch_size
    if size[0] % cell[0] or size[1] % cell[1]:
        raise ValueError(f"`image_size` must be a multiple of the patch size {cell}. Received: image_size={size}")
    return record, size


def _load(folder, model, image_size, kind, suffixes, read, check):
    """`(images, targets)`: every pair read and checked, then resized."""
    from keras_vit.preprocessing.crops import _pil_resize

    record, size = _record(model, image_size)
    directory, names = _images(folder)
    pairs = []
    for name in names:
        image_path, target_path = os.path.join(directory, name), _pair(folder, kind, name, suffixes)
        image, target = _read_rgb(image_path), read(target_path)
        if target.shape != image.shape[:2]:
            turned = (
                " The sides are swapped: the photo is read upright as its EXIF orientation says, as every "
                "task reads it; draw the target on the upright photo." if target.shape == image.shape[1::-1] else ""
            )
            raise ValueError(
                f"The {kind[:-1] if kind == 'masks' else 'depth'} file {target_path!r} is "
                f"{target.shape[0]}x{target.shape[1]}; its image {image_path!r} is "
                f"{image.shape[0]}x{image.shape[1]}: they must be the same size.{turned}"
            )
        check(target, target_path)
        pairs.append((image, target))
    images = np.stack([scale_pixels(_pil_resize(image, size, record.interpolation), record) for image, _ in pairs])
    targets = np.stack([_resize_nearest(target, size) for _, target in pairs])
    return images, targets


def load_segmentation_folder(folder, model, image_size=None):
    """A folder of images and masks, for `Segmenter.fit`.

    Args:
        folder: a folder with `images/` and `masks/` (see the module docstring).
        model: the `Segmenter` (its classes, patch size, preprocessing).
        image_size: None (default: the model's) or an int or `(height, width)`.

    Returns:
        `(images, labels)`: float32 `(n, height, width, 3)` scaled as the
        model expects, int32 `(n, height, width)` class indices (255: no label).

    Raises:
        ValueError: naming the file, for an image without mask, a mask of
            another size, a class index at or above `model.classes` (255
            aside), or an unreadable file.
    """
    classes = model.classes

    def check(mask, path):
        bad = mask[(mask != IGNORE_INDEX) & ((mask < 0) | (mask >= classes))]
        if bad.size:
            raise ValueError(
                f"The mask {path!r} holds class {int(bad.max())}: the model has {classes} classes (0 to "
                f"{classes - 1}; {IGNORE_INDEX} marks unlabelled pixels)."
            )

    images, labels = _load(folder, model, image_size, "masks", (".png",), read_mask, check)
    return images, labels.astype("int32")


def load_depth_folder(folder, model, image_size=None, depth_scale=1.0 / 1000):
    """A folder of images and depth maps, for `DepthEstimator.fit`.

    Args:
        folder: a folder with `images/` and `depth/` (see the module docstring).
        model: the `DepthEstimator` (its patch size, preprocessing).
        image_size: None (default: the model's) or an int or `(height, width)`.
        depth_scale: float, default 1/1000: a PNG value times it is the
            depth (millimetres to metres); `.npy` files are taken as they are.

    Returns:
        `(images, depths)`: float32 `(n, height, width, 3)` and `(n, height, width)` (0: no depth).

    Raises:
        ValueError: naming the file, for an image without depth, a depth map
            of another size, negative or non-finite depths, or an unreadable file.
    """
    scale = check_positive_float(depth_scale, "depth_scale")

    def check(depth, path):
        if not np.all(np.isfinite(depth)) or depth.min() < 0:
            raise ValueError(f"The depth file {path!r} holds negative or non-finite depths (0 marks no depth).")

    return _load(folder, model, image_size, "depth", (".png", ".npy"), lambda p: read_depth(p, scale), check)


__all__ = ["IGNORE_INDEX", "load_depth_folder", "load_segmentation_folder", "read_depth", "read_mask"]
