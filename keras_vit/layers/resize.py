"""Bilinear resizing of NHWC feature maps as `torch.nn.functional.interpolate` does it.

The dense heads (DPT's fusion and depth head, EoMT's attention masks) resize
feature maps with torch's bilinear filter, without antialiasing, either
corner-aligned (`align_corners=True`: source position `i * (old - 1) / (new
- 1)`) or half-pixel (`align_corners=False`: `(i + 0.5) * old / new - 0.5`,
clamped at 0). `keras.ops.image.resize` has no corner-aligned mode and
antialiases when shrinking on some backends, so the resize is written here:
for each axis the two source rows of every output row are gathered and
blended (`ops.take` and a lerp), which costs a few multiply-adds per output
value (a `(new, old)` matrix product would cost `old` of them) and runs the
same on every backend and in every exporter (`kernels.take`). Sizes may be
Python ints or scalar tensors known only when the model runs.
"""

from keras import ops

from keras_vit import kernels
from keras_vit.validation import check_bool


def _taps(new, old, align_corners, scale=None):
    """`(low, high, weight of high)` of each of `new` output rows over `old`.

    Args:
        new: int or scalar int tensor, the output length.
        old: int or scalar int tensor, the input length.
        align_corners: bool, torch's `align_corners`.
        scale: None or a float: torch's `scale_factor` (the source step is
            `1 / scale` instead of `old / new`), as `interpolate(...,
            scale_factor=2)` computes it.
    """
    new_f = ops.cast(new, "float32")
    old_f = ops.cast(old, "float32")
    # `arange(0, n)`: jax2onnx traces only the form with a stop.
    position = ops.cast(ops.arange(0, new), "float32")
    if align_corners:
        step = (old_f - 1.0) / ops.maximum(new_f - 1.0, 1.0)
        source = position * step
    else:
        step = old_f / new_f if scale is None else 1.0 / float(scale)
        source = ops.maximum((position + 0.5) * step - 0.5, 0.0)
    low = ops.minimum(ops.floor(source), old_f - 1.0)
    weight = source - low
    low = ops.cast(low, "int32")
    high = ops.minimum(low + 1, ops.cast(old, "int32") - 1)
    return low, high, weight


def _resize_axis(x, new, axis, align_corners, scale=None):
    old = x.shape[axis] if x.shape[axis] is not None else ops.shape(x)[axis]
    if isinstance(old, int) and isinstance(new, int) and old == new and (scale is None or scale == 1):
        return x
    low, high, weight = _taps(new, old, align_corners, scale)
    shape = [1] * len(x.shape)
    shape[axis] = -1
    weight = ops.cast(ops.reshape(weight, shape), x.dtype)
    first = kernels.take(x, low, axis)
    second = kernels.take(x, high, axis)
    return first + (second - first) * weight


def resize_bilinear(images, size, align_corners=False, scale=None):
    """Bilinear resize of `(batch, height, width, channels)` maps, torch's way.

    Args:
        images: tensor `(batch, height, width, channels)`.
        size: `(new_height, new_width)`, ints or scalar int tensors.
        align_corners: bool, default False: torch's `align_corners`.
        scale: None (default) or a number: the `scale_factor` `size` came
            from (torch then steps the source by `1 / scale`, not by
            `old / new`; the same unless `size` was rounded).

    Returns:
        A tensor `(batch, new_height, new_width, channels)` in the dtype of
        `images`.

    Example:

    >>> import numpy as np
    >>> x = np.arange(4, dtype="float32").reshape(1, 2, 2, 1)
    >>> y = resize_bilinear(x, (3, 3), align_corners=True)
    >>> np.asarray(y)[0, :, :, 0].tolist()
    [[0.0, 0.5, 1.0], [1.0, 1.5, 2.0], [2.0, 2.5, 3.0]]
    >>> np.asarray(resize_bilinear(x, (4, 4)))[0, 0, :, 0].tolist()
    [0.0, 0.25, 0.75, 1.0]
    """
    check_bool(align_corners, "align_corners")
    images = ops.convert_to_tensor(images)
    if len(images.shape) != 4:
        raise ValueError(
            f"`images` must be (batch, height, width, channels) maps. Received: shape {tuple(images.shape)}"
        )
    x = _resize_axis(images, size[0], 1, align_corners, scale)
    return _resize_axis(x, size[1], 2, align_corners, scale)


def scaled_size(images, factor):
    """`(height, width)` of `images` times an int `factor` (static ints where known).

    Example:

    >>> import numpy as np
    >>> scaled_size(np.zeros((1, 3, 5, 2)), 2)
    (6, 10)
    """
    static, dynamic = images.shape, ops.shape(images)
    return tuple(
        static[i] * factor if static[i] is not None else dynamic[i] * factor for i in (1, 2)
    )


def spatial_size(images):
    """`(height, width)` of NHWC `images`: ints where static, else scalar tensors."""
    static, dynamic = images.shape, ops.shape(images)
    return tuple(static[i] if static[i] is not None else dynamic[i] for i in (1, 2))


__all__ = ["resize_bilinear", "scaled_size", "spatial_size"]
