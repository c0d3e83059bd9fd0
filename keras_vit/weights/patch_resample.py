"""FlexiViT's pseudo-inverse resize of a patch-embedding kernel, in NumPy.

A patch embedding computes `<x, w>` for each flattened patch `x`. Loading it
at another patch size, the patches the model sees are (approximately) the old
patches resized, `resize(x) = B x`, with `B` the matrix of the bilinear
resize from the old patch size to the new one. FlexiViT (Beyer et al. 2023,
arXiv:2212.08013, §3.4) picks the new kernel so that
`<B x, w_new> = <x, w>` for every `x`: `w_new = pinv(B^T) w`, exact when
the patch grows (B^T has full row rank) and the least-squares solution when
it shrinks. big_vision's `resample_patchemb` is the behavioural reference:
`B` is `tf.image.resize(..., method="bilinear")` (half-pixel centres, no
antialiasing); `antialias=True` gives the resize of `jax.image.resize`
(and of timm's default).
"""

import logging

import numpy as np

from keras_vit.validation import pair

logger = logging.getLogger("keras_vit")

KERNEL_KEY = "embedding/kernel"


def resize_matrix(old_size, new_size, antialias=False):
    """`(new_size, old_size)` matrix of a 1D bilinear resize.

    Half-pixel centres (output sample `i` reads input coordinate
    `(i + 0.5) * old / new - 0.5`), a triangle kernel normalised per output
    sample, which clamps at the borders: `tf.image.resize(method="bilinear")`
    and `jax.image.resize(method="bilinear")` compute this along each axis.
    With `antialias` and a shrinking resize the triangle is widened by
    `old / new` (their antialiased resize).

    Args:
        old_size: int, input length.
        new_size: int, output length.
        antialias: bool, default False.

    Returns:
        A float64 NumPy array `(new_size, old_size)` whose rows sum to 1.

    Example:

    >>> resize_matrix(2, 4)
    array([[1.  , 0.  ],
           [0.75, 0.25],
           [0.25, 0.75],
           [0.  , 1.  ]])
    """
    scale = new_size / old_size
    width = max(1.0 / scale, 1.0) if antialias else 1.0
    centres = (np.arange(new_size) + 0.5) / scale - 0.5
    distance = np.abs(centres[:, None] - np.arange(old_size)[None, :]) / width
    weights = np.maximum(0.0, 1.0 - distance)
    return weights / weights.sum(axis=1, keepdims=True)


def _pseudo_inverse_map(old_size, new_size, antialias):
    """`pinv(R^T)` of one axis's resize `R`.

    The 2D resize of a row-major patch is `kron(R_h, R_w)`, and
    `pinv(kron(A, B)) = kron(pinv(A), pinv(B))`: each axis is inverted
    alone, which keeps large patch sizes cheap.
    """
    return np.linalg.pinv(resize_matrix(old_size, new_size, antialias).T)


def resample_patch_embedding(kernel, new_patch_size, antialias=False):
    """Resamples a patch-embedding kernel to another patch size (FlexiViT).

    The new kernel `w_new = pinv(B^T) w`, with `B` the bilinear resize of a
    patch from the old size to the new one, so that a resized patch
    embedded with the new kernel gives the token the old kernel gives the
    original patch: exactly when the patch grows, in the least-squares sense
    when it shrinks.

    Args:
        kernel: NumPy array `(ph, pw, channels, hidden)`, keras_vit's layout
            (the `embedding` layer's `kernel`, the official `.npz` layout).
        new_patch_size: int or `(height, width)`.
        antialias: bool, default False: the resize of big_vision's
            `resample_patchemb` (`tf.image.resize`, bilinear, without
            antialiasing); True: the antialiased resize of
            `jax.image.resize` (differs only when a side shrinks).

    Returns:
        A NumPy array `(new_h, new_w, channels, hidden)` of the dtype of
        `kernel` (computed in float64); `kernel` itself when the size is
        unchanged.

    Raises:
        ValueError: when `kernel` is not 4D or `new_patch_size` is not one
            or two positive ints.

    Example:

    >>> import numpy as np
    >>> kernel = np.random.default_rng(0).normal(size=(8, 8, 3, 4))
    >>> resample_patch_embedding(kernel, 16).shape
    (16, 16, 3, 4)

    Reference:
        Beyer et al., "FlexiViT: One Model for All Patch Sizes", CVPR 2023,
        arXiv:2212.08013.
    """
    kernel = np.asarray(kernel)
    if kernel.ndim != 4:
        raise ValueError(
            "`kernel` must be a patch-embedding kernel of shape (ph, pw, channels, "
            f"hidden). Received: kernel of shape {kernel.shape}"
        )
    new = pair(new_patch_size, "new_patch_size")
    old = kernel.shape[:2]
    if tuple(old) == new:
        return kernel
    rows = _pseudo_inverse_map(old[0], new[0], antialias)
    cols = _pseudo_inverse_map(old[1], new[1], antialias)
    # w_new[i, j] = sum_{a, b} rows[i, a] cols[j, b] w[a, b]: the kron product
    # applied axis by axis.
    resized = np.einsum("ia,jb,abcd->ijcd", rows, cols, kernel.astype("float64"))
    return resized.astype(kernel.dtype)


def adapt_patch_kernel(params, targets, path):
    """Resamples a checkpoint's patch kernel to the model's patch size, in place.

    The loader's hook (`keras_vit.weights.loader`): when the checkpoint's
    `embedding/kernel` differs from the model's only in its patch size, it
    is replaced by `resample_patch_embedding` of it; any other mismatch is
    left for the loader to report.

    Args:
        params: `{key: array}` of the checkpoint, canonical keys.
        targets: `{key: variable}` of the model.
        path: the checkpoint's path, for the log.
    """
    kernel, target = params.get(KERNEL_KEY), targets.get(KERNEL_KEY)
    if kernel is None or target is None or kernel.ndim != 4 or len(target.shape) != 4:
        return
    new_size = tuple(target.shape[:2])
    if kernel.shape[2:] != tuple(target.shape[2:]) or kernel.shape[:2] == new_size:
        return
    params[KERNEL_KEY] = resample_patch_embedding(kernel, new_size)
    logger.info(
        "%s: patch embedding resampled from patch %s to %s (FlexiViT pseudo-inverse resize)",
        path, tuple(kernel.shape[:2]), new_size,
    )
