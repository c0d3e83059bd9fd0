"""Prediction targets of masked patch prediction (paper §4.6, App. B.1.2).

The paper compares three targets for a corrupted patch: its mean colour
binned to 3 bits per channel (one of 512 classes; the best of the three),
the colours of its 4x4 downsized version (16 predictions of 512 classes) and
L2 regression on its full pixels. The functions here compute them from
images in their original [0, 255] range, for NumPy arrays, tensors of the
current Keras backend, and `tf.Tensor`s inside a `tf.data` map (that path
uses TensorFlow ops only, whatever the backend).

Exactness: pixel sums of integer-valued images are exact in float32 (up to
65,793 pixels per patch), and the bin of a sum is corrected after the
division, so integer images get exactly `floor(mean * 2**bits / 256)`
whatever the backend's rounding of the division.
"""

import sys
from typing import Callable, NamedTuple

import keras
import numpy as np
from keras import ops

from keras_vit.preprocessing import preprocess_input
from keras_vit.validation import check_int, pair

__all__ = [
    "downsized_patch_targets",
    "mean_color_targets",
    "num_color_classes",
    "pixel_targets",
]


class _ArrayOps(NamedTuple):
    """The handful of array operations the targets need, for one kind of array.

    `sum` and `clip` take their arguments positionally (`x, axis` and
    `x, low, high`), as NumPy, `keras.ops` and TensorFlow all do.
    """

    cast: Callable  # (x, dtype name)
    reshape: Callable
    transpose: Callable
    floor: Callable
    where: Callable
    sum: Callable
    clip: Callable
    dynamic_shape: Callable

    def float32(self, x):
        return self.cast(x, "float32")

    def int32(self, x):
        return self.cast(x, "int32")

    def shape(self, x):
        """The static shape, with the dynamic size where an axis has none."""
        dynamic = self.dynamic_shape(x)
        return tuple(s if s is not None else dynamic[i] for i, s in enumerate(x.shape))


_NUMPY = _ArrayOps(
    lambda x, dtype: np.asarray(x).astype(dtype), np.reshape, np.transpose, np.floor, np.where,
    np.sum, np.clip, np.shape,
)
_KERAS = _ArrayOps(
    ops.cast, ops.reshape, ops.transpose, ops.floor, ops.where, ops.sum, ops.clip, ops.shape,
)


def _tensorflow(tf):
    return _ArrayOps(
        tf.cast, tf.reshape, tf.transpose, tf.floor, tf.where, tf.reduce_sum, tf.clip_by_value, tf.shape,
    )


def _ops_for(images):
    # tf can only have produced `images` if it is imported already; checking
    # sys.modules keeps TensorFlow out of the other backends' processes.
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(images, tf.Tensor):
        return _tensorflow(tf)
    if ops.is_tensor(images) or isinstance(images, keras.KerasTensor):
        return _KERAS
    return _NUMPY


def _check_bits(bits):
    return check_int(bits, "bits", minimum=1, maximum=8)


def num_color_classes(bits=3):
    """Number of colour classes for `bits` bits per channel: `2 ** (3 * bits)`.

    Example:

    >>> num_color_classes(3)
    512
    """
    return 2 ** (3 * _check_bits(bits))


def _check_images(images, patch_size):
    """Checks rank, channels and divisibility where the shape is known."""
    shape = tuple(images.shape)
    if len(shape) not in (3, 4):
        raise ValueError(
            "`images` must be `(batch, height, width, 3)` or one `(height, width, 3)` "
            f"image. Received: images.shape={shape}"
        )
    if shape[-1] is not None and shape[-1] != 3:
        raise ValueError(
            f"`images` must be RGB (3 channels, last axis). Received: images.shape={shape}"
        )
    height, width = shape[-3], shape[-2]
    for size, p in ((height, patch_size[0]), (width, patch_size[1])):
        if size is not None and size % p:
            raise ValueError(
                "The image height and width must be divisible by the patch size. "
                f"Received: images.shape={shape}, patch_size={patch_size}"
            )
    return len(shape) == 3


def _patch_bins(images, patch_size, bits, xp):
    """`(batch, gh, gw, 3)` float bins of the mean colour of every patch."""
    batch, height, width, _ = xp.shape(images)
    ph, pw = patch_size
    x = xp.reshape(xp.float32(images), (batch, height // ph, ph, width // pw, pw, 3))
    sums = xp.sum(x, (2, 4))
    # floor(mean * 2**bits / 256) == floor(sum / width) with this width per
    # bin (exact in float32); the two corrections undo a division rounded
    # across a bin edge.
    width_per_bin = float(ph * pw * 2 ** (8 - bits))
    bins = xp.floor(sums / width_per_bin)
    bins = xp.where(bins * width_per_bin > sums, bins - 1.0, bins)
    bins = xp.where((bins + 1.0) * width_per_bin <= sums, bins + 1.0, bins)
    return xp.clip(bins, 0.0, float(2**bits - 1))


def _color_ids(bins, bits):
    """`(r << 2*bits) | (g << bits) | b` of `(..., 3)` float bins, as floats."""
    return bins[..., 0] * float(4**bits) + bins[..., 1] * float(2**bits) + bins[..., 2]


def _batched(images, patch_size, xp):
    single = _check_images(images, patch_size)
    if single:
        images = xp.reshape(images, (1,) + xp.shape(images))
    return images, single


def mean_color_targets(images, patch_size, bits=3):
    """The paper's masked-patch target: each patch's mean colour as a class.

    Per patch and channel, the mean pixel value is binned to `bits` bits as
    `floor(mean * 2**bits / 256)` (clipped to `[0, 2**bits - 1]`), and the
    three bins form the class id `(r << 2*bits) | (g << bits) | b`: 512
    classes for the paper's 3 bits.

    Args:
        images: `(batch, H, W, 3)` (or one `(H, W, 3)` image) in the original
            [0, 255] range, uint8 or float: NumPy, a backend tensor, or a
            `tf.Tensor` (for instance inside a `tf.data` map).
        patch_size: int or `(ph, pw)`, the patch size in pixels (for a hybrid
            ViT, the effective patch: stem stride times the patch size).
        bits: int in 1..8, default 3, bits per colour channel.

    Returns:
        int32 class ids `(batch, num_patches)` (or `(num_patches,)`), patches
        in row-major grid order (the token order of the model); NumPy in,
        NumPy out.

    Example:

    >>> import numpy as np
    >>> image = np.zeros((1, 4, 8, 3), "uint8")
    >>> image[:, :, 4:] = (255, 0, 40)      # right patch: red, a little blue
    >>> mean_color_targets(image, patch_size=4)
    array([[  0, 449]], dtype=int32)
    """
    patch_size = pair(patch_size, "patch_size")
    _check_bits(bits)
    xp = _ops_for(images)
    images, single = _batched(images, patch_size, xp)
    ids = _color_ids(_patch_bins(images, patch_size, bits, xp), bits)
    batch = xp.shape(ids)[0]
    ids = xp.int32(xp.reshape(ids, (batch, -1)))
    return ids[0] if single else ids


def downsized_patch_targets(images, patch_size, size=4, bits=3):
    """The paper's second target: the colours of each patch downsized to 4x4.

    Every patch is cut into `size x size` cells; each cell's mean colour is
    binned as in `mean_color_targets`. For a 16x16 patch and the defaults:
    16 predictions of 512 classes per patch.

    Args:
        images: as in `mean_color_targets`.
        patch_size: int or `(ph, pw)`, divisible by `size`.
        size: int, default 4: the downsized patch is `size x size`.
        bits: int in 1..8, default 3.

    Returns:
        int32 class ids `(batch, num_patches, size * size)` (or without the
        batch axis), cells in row-major order within each patch.

    Example:

    >>> import numpy as np
    >>> image = np.zeros((1, 8, 8, 3), "uint8")
    >>> image[:, :2, :2] = 255              # top-left cell of the first patch
    >>> downsized_patch_targets(image, patch_size=8)[0, 0, :5]
    array([511,   0,   0,   0,   0], dtype=int32)
    """
    patch_size = pair(patch_size, "patch_size")
    size = pair(size, "size")
    _check_bits(bits)
    if patch_size[0] % size[0] or patch_size[1] % size[1]:
        raise ValueError(
            "`patch_size` must be divisible by the downsized `size`. "
            f"Received: patch_size={patch_size}, size={size}"
        )
    xp = _ops_for(images)
    images, single = _batched(images, patch_size, xp)
    cell = (patch_size[0] // size[0], patch_size[1] // size[1])
    ids = _color_ids(_patch_bins(images, cell, bits, xp), bits)
    batch, rows, cols = xp.shape(ids)
    ids = xp.reshape(ids, (batch, rows // size[0], size[0], cols // size[1], size[1]))
    ids = xp.transpose(ids, (0, 1, 3, 2, 4))
    ids = xp.int32(xp.reshape(ids, (batch, -1, size[0] * size[1])))
    return ids[0] if single else ids


def pixel_targets(images, patch_size, mode=None, model=None):
    """The paper's third target: every patch's pixels, for L2 regression.

    The patches are normalised as the encoder sees them
    (`keras_vit.preprocess_input(images, mode)`: [-1, 1] for "inception";
    with `model`, that model's `preprocessing` record)
    and flattened in (row, column, channel) order, the order of
    `keras_vit.layers.Patches`.

    Args:
        images: as in `mean_color_targets`.
        patch_size: int or `(ph, pw)`.
        mode: None ("inception"), "inception" or "imagenet", see
            `keras_vit.preprocess_input`.
        model: None, or a keras_vit model whose `preprocessing` record
            gives the scaling; exclusive with `mode`.

    Returns:
        float32 `(batch, num_patches, ph * pw * 3)` (or without the batch
        axis).

    Example:

    >>> import numpy as np
    >>> pixel_targets(np.full((1, 4, 8, 3), 255, "uint8"), patch_size=4).shape
    (1, 2, 48)
    """
    patch_size = pair(patch_size, "patch_size")
    xp = _ops_for(images)
    images, single = _batched(images, patch_size, xp)
    x = xp.float32(preprocess_input(xp.float32(images), mode=mode, model=model))
    batch, height, width, _ = xp.shape(x)
    ph, pw = patch_size
    x = xp.reshape(x, (batch, height // ph, ph, width // pw, pw, 3))
    x = xp.transpose(x, (0, 1, 3, 2, 4, 5))
    x = xp.reshape(x, (batch, -1, ph * pw * 3))
    return x[0] if single else x
