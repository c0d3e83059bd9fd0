"""Position-embedding resampling at load time, as the official fine-tuning."""

import math

import numpy as np


def square_grid(num_patches):
    """The side of a square grid of `num_patches` patches, or None."""
    side = math.isqrt(num_patches)
    return side if side * side == num_patches else None


def resample_posemb(posemb, new_grid, num_prefix_tokens=1, old_grid=None):
    """Resizes a `(1, prefix + gh * gw, D)` position embedding to `new_grid`.

    The prefix rows (the class token's) are kept as they are; the patch rows
    are reshaped to their grid and resized with `scipy.ndimage.zoom(...,
    order=1)` (linear, corner-aligned), the resize of the official ViT and
    big_vision loaders. Unlike the official code, the target grid may be
    non-square: each axis gets its own zoom factor.

    Args:
        posemb: NumPy array `(1, num_prefix_tokens + gh * gw, D)`.
        new_grid: `(nh, nw)`, the target patch grid.
        num_prefix_tokens: int, default 1: leading rows that are not patches.
        old_grid: `(gh, gw)` of `posemb`, default None: inferred, which needs a
            square grid (the published checkpoints all have one).

    Returns:
        A NumPy array `(1, num_prefix_tokens + nh * nw, D)`, dtype of `posemb`.

    Raises:
        ValueError: when the source grid is not square and `old_grid` is not
            given, or does not match the number of rows.

    Example:

    >>> posemb = np.zeros((1, 1 + 14 * 14, 8), "float32")
    >>> resample_posemb(posemb, (24, 24)).shape
    (1, 577, 8)

    Reference:
        Dosovitskiy et al., arXiv:2010.11929, §3.2 (fine-tuning at higher
        resolution: 2D interpolation of the position embeddings).
    """
    from scipy import ndimage

    posemb = np.asarray(posemb)
    prefix = posemb[:, :num_prefix_tokens]
    grid = posemb[0, num_prefix_tokens:]
    num_patches, depth = grid.shape
    if old_grid is None:
        side = square_grid(num_patches)
        if side is None:
            raise ValueError(
                f"Cannot infer the patch grid of a position embedding with "
                f"{num_patches} patch rows: it is not a square. Received: "
                f"posemb shape {posemb.shape}, num_prefix_tokens={num_prefix_tokens}"
            )
        old_grid = (side, side)
    old_grid = tuple(int(g) for g in old_grid)
    if old_grid[0] * old_grid[1] != num_patches:
        raise ValueError(
            f"`old_grid` must hold {num_patches} patches. Received: old_grid={old_grid}"
        )
    new_grid = tuple(int(g) for g in new_grid)
    if new_grid == old_grid:
        return posemb
    grid = grid.reshape(old_grid + (depth,))
    factors = (new_grid[0] / old_grid[0], new_grid[1] / old_grid[1], 1)
    grid = ndimage.zoom(grid, factors, order=1)
    grid = grid.reshape(1, new_grid[0] * new_grid[1], depth)
    return np.concatenate([prefix, grid.astype(posemb.dtype)], axis=1)
