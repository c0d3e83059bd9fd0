"""Bilinear resizing of NHWC feature maps as `torch.nn.functional.interpolate` does it.

The dense heads (DPT's fusion and depth head, EoMT's attention masks) resize
feature maps with torch's bilinear filter, without antialiasing, either
corner-aligned (`align_corners=True`) or half-pixel (`align_corners=False`).
`keras.ops.image.resize` has no corner-aligned mode and antialiases when
shrinking on some backends, so the resize is a kernel of its own
(`kernels.resize_bilinear`: two gathers and a lerp per axis in `keras.ops`,
the same on every backend and in every exporter; torch's own kernel on
torch). Sizes may be Python ints or scalar tensors known only when the model
runs.
"""

from keras import ops

from keras_vit import kernels
from keras_vit.validation import check_bool


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
    return kernels.resize_bilinear(images, tuple(size), align_corners, scale)


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
