"""SAM's masks at the image's size: the post-processing of
`keras_vit.segment_prompts` and `keras_vit.generate_masks`.

`postprocess_masks` is transformers' `SamImageProcessor.post_process_masks`
of one image: the decoder's low-resolution logits resized to the model's
input, cut out of its padding and resized to the original image, composed
as two matrices per image (`mask_resizer`). Masks at the image's size are
made a group at a time (`MASK_GROUP_BYTES`), so that many prompts on a
large photo do not hold every float64 mask at once.
"""

import numpy as np


def _resize_matrix(source, target):
    """`(target, source)` matrix of a linear resize (half-pixel centres,
    torch's `interpolate(mode="bilinear", align_corners=False)` per axis)."""
    position = np.maximum((np.arange(target) + 0.5) * (source / target) - 0.5, 0.0)
    first = np.minimum(np.floor(position).astype(int), source - 1)
    second = np.minimum(first + 1, source - 1)
    weight = position - first
    matrix = np.zeros((target, source))
    np.add.at(matrix, (np.arange(target), first), 1 - weight)
    np.add.at(matrix, (np.arange(target), second), weight)
    return matrix


def mask_resizer(low_res, input_size, resized, original):
    """The two matrices `(rows, columns)` that take low-resolution masks to
    the original image: resize to the input size, cut the resized image out
    of the padding, resize to the original size (`post_process_masks`),
    composed per axis: `rows @ mask @ columns.T`."""
    maps = []
    for axis in range(2):
        up = _resize_matrix(low_res[axis], input_size[axis])[: resized[axis]]
        maps.append(_resize_matrix(resized[axis], original[axis]) @ up)
    return maps


def postprocess_masks(low_res_masks, input_size, resized, original, threshold=0.0, binarize=True):
    """transformers' `SamImageProcessor.post_process_masks` of one image.

    Args:
        low_res_masks: `(..., h, w)` mask logits.
        input_size: the model input's `(height, width)`.
        resized: the resized image's `(height, width)` inside it.
        original: the original image's `(height, width)`.
        threshold: float, default 0: the logit above which a pixel is in.
        binarize: bool, default True: booleans, else the logits.

    Returns:
        `(..., height, width)` masks at the original size.
    """
    logits = np.asarray(low_res_masks)
    resizer = mask_resizer(logits.shape[-2:], input_size, resized, original)
    flat = logits.reshape((-1,) + logits.shape[-2:])
    out = full_size_masks(flat, resizer, threshold if binarize else None)
    return out.reshape(logits.shape[:-2] + out.shape[-2:])


# The bytes of float64 masks at an image's size computed at a time: at 12
# megapixels one mask is 96 MB, and SAM makes three a prompt.
MASK_GROUP_BYTES = 2 ** 28


def mask_groups(logits, resizer):
    """`(slice, maps)` pairs: low-resolution mask logits `(n, h, w)` at the
    original size through `resizer` (`mask_resizer`'s two matrices), float64,
    a group of masks at a time (each group within `MASK_GROUP_BYTES`).

    Example:

    >>> resizer = mask_resizer((2, 2), (2, 2), (2, 2), (4, 6))
    >>> [(group.start, maps.shape) for group, maps in mask_groups(np.zeros((3, 2, 2)), resizer)]
    [(0, (3, 4, 6))]
    """
    rows, columns = resizer
    step = max(1, MASK_GROUP_BYTES // (8 * len(rows) * len(columns)))
    for start in range(0, len(logits), step):
        group = slice(start, start + step)
        yield group, rows @ np.asarray(logits[group], "float64") @ columns.T


def full_size_masks(logits, resizer, threshold=0.0):
    """Low-resolution mask logits `(n, h, w)` at the original size
    (`mask_groups`): booleans above `threshold`, or float32 logits where
    `threshold` is None."""
    rows, columns = resizer
    out = np.empty((len(logits), len(rows), len(columns)), "float32" if threshold is None else bool)
    for group, maps in mask_groups(logits, resizer):
        out[group] = maps if threshold is None else maps > threshold
    return out
