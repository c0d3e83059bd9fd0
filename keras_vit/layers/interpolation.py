"""Position-embedding interpolation as each checkpoint family does it.

A model runs at another image size than it was trained at by resizing the
patch rows of its position embedding to the new patch grid. Each family
resizes its own way, and a checkpoint reproduces its reference outputs only
with its own resize:

- the official ViT and big_vision code: corner-aligned linear
  (`scipy.ndimage.zoom(order=1)`), mode `"linear_corners"`;
- transformers' ViT, CLIP, SigLIP, ViT-MAE and DINOv2: `torch.nn.functional
  .interpolate(mode="bicubic", align_corners=False)`, mode `"bicubic"`;
  DINOv2 in float32 whatever the model's dtype;
- transformers' DINOv2 with registers and timm's `resample_abs_pos_embed`
  (every timm ViT, family `"timm"`): the same with `antialias=True` in
  float32, mode `"bicubic_antialias"`;
- transformers' SigLIP2: `interpolate(mode="bilinear", antialias=True)`,
  mode `"bilinear_antialias"`;
- transformers' DPT: `interpolate(mode="bilinear")` (half-pixel, no
  antialias), mode `"bilinear"`.

torch's two bicubic kernels differ: the plain one is Keys' cubic
convolution with `a = -0.75` and clamps the taps at the border; the
antialiased one uses `a = -0.5`, widens the kernel by the scale when
shrinking, drops the taps outside the grid and renormalises.
`keras.ops.image.resize(interpolation="bicubic")` is neither on every
backend (jax and tensorflow use `a = -0.5`, torch `a = -0.75`), so the
resize here is written as two `(new, old)` weight matrices, one per axis,
computed with `keras.ops`: the same numbers on every backend, inside the
graph, for grid sizes known only when the model runs.

The original DINOv2 code (and transformers before 4.44) passed a scale
factor of `(new + 0.1) / old` instead of the output size, which moves the
sampling positions slightly; `offset=0.1` reproduces it.
"""

import keras
from keras import ops

from keras_vit.validation import check_choice, check_int

MODES = ("linear_corners", "bicubic", "bicubic_antialias", "bilinear_antialias", "bilinear")

# Each family's resize, by its `position_interpolation` name: the mode,
# whether it runs in float32 whatever the model's dtype, and the offset of
# the original DINOv2 code.
POSITION_INTERPOLATIONS = {
    "official": ("linear_corners", False, 0.0),
    "vit": ("bicubic", False, 0.0),
    "clip": ("bicubic", False, 0.0),
    "siglip": ("bicubic", False, 0.0),
    "mae": ("bicubic", False, 0.0),
    "dinov2": ("bicubic", True, 0.0),
    "dinov2_original": ("bicubic", True, 0.1),
    "dinov2_registers": ("bicubic_antialias", True, 0.0),
    "timm": ("bicubic_antialias", True, 0.0),
    "siglip2": ("bilinear_antialias", True, 0.0),
    "dpt": ("bilinear", False, 0.0),
}

# Keys' cubic convolution coefficient of torch's plain and antialiased kernels.
_PLAIN_CUBIC_A = -0.75
_ANTIALIAS_CUBIC_A = -0.5


def _cubic(x, a):
    """Keys' cubic convolution kernel at `|x|` (zero beyond 2)."""
    x = ops.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return ops.where(x < 1.0, near, ops.where(x < 2.0, far, ops.zeros_like(x)))


def _triangle(x):
    return ops.maximum(1.0 - ops.abs(x), 0.0)


def _linear_corners(new, old):
    new_f = ops.cast(new, "float32")
    step = (float(old) - 1.0) / ops.maximum(new_f - 1.0, 1.0)
    src = ops.cast(ops.arange(new), "float32") * step
    low = ops.minimum(ops.floor(src), float(max(old - 2, 0)))
    frac = (src - low)[:, None]
    low = ops.cast(low, "int32")
    high = ops.minimum(low + 1, old - 1)
    return ops.one_hot(low, old) * (1.0 - frac) + ops.one_hot(high, old) * frac


def _bicubic(new, old, scale):
    # torch's upsample_bicubic2d: source index `scale * (i + 0.5) - 0.5`, four
    # taps around it, each clamped to the grid (a clamped tap adds its weight
    # to the border row).
    real = (ops.cast(ops.arange(new), "float32") + 0.5) * scale - 0.5
    index = ops.minimum(ops.floor(real), float(old - 1))
    t = ops.clip(real - index, 0.0, 1.0)
    index = ops.cast(index, "int32")
    weights = 0
    for tap in range(4):
        distance = t + 1.0 - tap
        column = ops.clip(index - 1 + tap, 0, old - 1)
        weights = weights + ops.one_hot(column, old) * _cubic(distance, _PLAIN_CUBIC_A)[:, None]
    return weights


def _bilinear(new, old, scale):
    # torch's upsample_bilinear2d without antialias: source index
    # `scale * (i + 0.5) - 0.5`, clamped at 0, two taps.
    real = ops.maximum((ops.cast(ops.arange(new), "float32") + 0.5) * scale - 0.5, 0.0)
    low = ops.minimum(ops.floor(real), float(old - 1))
    frac = (real - low)[:, None]
    low = ops.cast(low, "int32")
    high = ops.minimum(low + 1, old - 1)
    return ops.one_hot(low, old) * (1.0 - frac) + ops.one_hot(high, old) * frac


def _antialiased(new, old, scale, kernel, kernel_size):
    # torch's separable antialiased resize: the kernel is widened by the scale
    # when shrinking, taps outside the grid are dropped, each row sums to one.
    stretch = ops.maximum(scale, 1.0)
    support = 0.5 * kernel_size * stretch
    center = (ops.cast(ops.arange(new), "float32") + 0.5) * scale
    source = ops.cast(ops.arange(old), "float32")[None, :]
    weights = kernel((source - center[:, None] + 0.5) / stretch)
    low = ops.maximum(ops.floor(center - support + 0.5), 0.0)[:, None]
    high = ops.minimum(ops.floor(center + support + 0.5), float(old))[:, None]
    weights = ops.where((source >= low) & (source < high), weights, ops.zeros_like(weights))
    total = ops.sum(weights, axis=1, keepdims=True)
    return weights / ops.where(total == 0.0, ops.ones_like(total), total)


def resize_matrix(new, old, mode="bicubic", offset=0.0):
    """The `(new, old)` float32 matrix resizing one axis of a grid.

    Args:
        new: int or scalar int tensor, the new length.
        old: int, the original length.
        mode: one of `MODES` (see the module docstring).
        offset: float, default 0: with `offset`, the source positions follow
            a scale factor of `(new + offset) / old`, as the original DINOv2
            code (`"linear_corners"` ignores it).

    Returns:
        A float32 tensor `(new, old)`; row `i` holds the weights of the
        original rows in the new row `i`.

    Example:

    >>> import numpy as np
    >>> m = keras.ops.convert_to_numpy(resize_matrix(3, 3))
    >>> np.allclose(m, np.eye(3))
    True
    >>> m = keras.ops.convert_to_numpy(resize_matrix(4, 2, "linear_corners"))
    >>> [round(float(v), 3) for v in m[:, 1]]
    [0.0, 0.333, 0.667, 1.0]
    """
    check_choice(mode, MODES, "mode")
    old = check_int(old, "old", minimum=1)
    if mode == "linear_corners":
        return _linear_corners(new, old)
    scale = float(old) / (ops.cast(new, "float32") + float(offset))
    if mode == "bicubic":
        return _bicubic(new, old, scale)
    if mode == "bilinear":
        return _bilinear(new, old, scale)
    if mode == "bicubic_antialias":
        return _antialiased(new, old, scale, lambda x: _cubic(x, _ANTIALIAS_CUBIC_A), 4)
    return _antialiased(new, old, scale, _triangle, 2)


def _family(family):
    check_choice(family, tuple(POSITION_INTERPOLATIONS), "family")
    return POSITION_INTERPOLATIONS[family]


def resize_grid(grid, new_size, family="vit"):
    """Resizes a `(1, gh, gw, D)` position-embedding grid as `family` does.

    Args:
        grid: tensor `(1, gh, gw, D)` with static `gh`, `gw`.
        new_size: `(nh, nw)`, ints or scalar int tensors.
        family: a name of `POSITION_INTERPOLATIONS`: `"official"`, `"vit"`,
            `"clip"`, `"siglip"`, `"mae"`, `"dinov2"`, `"dinov2_original"`,
            `"dinov2_registers"`, `"timm"`, `"siglip2"`, `"dpt"`.

    Returns:
        A tensor `(1, nh, nw, D)` in the dtype of `grid`.

    Example:

    >>> import numpy as np
    >>> grid = np.random.default_rng(0).normal(size=(1, 4, 4, 8)).astype("float32")
    >>> tuple(resize_grid(grid, (6, 3), "dinov2").shape)
    (1, 6, 3, 8)
    >>> out = resize_grid(grid, (4, 4), "dinov2_registers")
    >>> np.allclose(keras.ops.convert_to_numpy(out), grid, atol=1e-6)
    True
    """
    mode, in_float32, offset = _family(family)
    grid = ops.convert_to_tensor(grid)
    dtype = grid.dtype
    compute = "float32" if in_float32 else dtype
    rows = ops.cast(resize_matrix(new_size[0], grid.shape[1], mode, offset), compute)
    cols = ops.cast(resize_matrix(new_size[1], grid.shape[2], mode, offset), compute)
    out = ops.einsum("ij,bjkd,lk->bild", rows, ops.cast(grid, compute), cols)
    return ops.cast(out, dtype)


def interpolate_position_embedding(
    position_embedding, new_grid, old_grid, num_prefix_rows=1, family="vit"
):
    """Resizes the patch rows of a `(1, prefix + gh * gw, D)` embedding.

    The counterpart of transformers' `interpolate_pos_encoding` of each
    family: the prefix rows (the class token's) are kept, the patch rows are
    resized from `old_grid` to `new_grid`. Unlike transformers, the grid is
    resized whenever the sizes differ, non-square grids included.

    Args:
        position_embedding: tensor `(1, num_prefix_rows + gh * gw, D)`.
        new_grid: `(nh, nw)`, ints or scalar int tensors.
        old_grid: `(gh, gw)`, ints: the grid of `position_embedding`.
        num_prefix_rows: int, default 1: leading rows that are not patches
            (0 for SigLIP, which has no class token).
        family: see `resize_grid`.

    Returns:
        A tensor `(1, num_prefix_rows + nh * nw, D)`.

    Example:

    >>> import numpy as np
    >>> table = np.zeros((1, 1 + 4 * 4, 8), "float32")
    >>> out = interpolate_position_embedding(table, (6, 5), (4, 4), family="clip")
    >>> tuple(out.shape)
    (1, 31, 8)
    """
    _family(family)
    num_prefix_rows = check_int(num_prefix_rows, "num_prefix_rows", minimum=0)
    position_embedding = ops.convert_to_tensor(position_embedding)
    gh, gw = (check_int(g, "old_grid", minimum=1) for g in old_grid)
    dim = position_embedding.shape[-1]
    if position_embedding.shape[1] != num_prefix_rows + gh * gw:
        raise ValueError(
            f"`position_embedding` must have num_prefix_rows + gh * gw = "
            f"{num_prefix_rows + gh * gw} rows. Received: shape "
            f"{tuple(position_embedding.shape)}, old_grid={tuple(old_grid)}, "
            f"num_prefix_rows={num_prefix_rows}"
        )
    if all(isinstance(n, int) for n in new_grid) and tuple(new_grid) == (gh, gw):
        return position_embedding
    prefix = position_embedding[:, :num_prefix_rows]
    grid = ops.reshape(position_embedding[:, num_prefix_rows:], (1, gh, gw, dim))
    grid = ops.reshape(resize_grid(grid, new_grid, family), (1, -1, dim))
    return ops.concatenate([prefix, grid], axis=1)


def check_family(family, name="position_interpolation"):
    """Checks that `family` names a resize of `POSITION_INTERPOLATIONS`.

    Example:

    >>> check_family("dinov2")
    'dinov2'
    """
    check_choice(family, tuple(POSITION_INTERPOLATIONS), name)
    return family


__all__ = [
    "POSITION_INTERPOLATIONS",
    "MODES",
    "check_family",
    "interpolate_position_embedding",
    "resize_grid",
    "resize_matrix",
]


def resize_video_grid(grid, new_size, family="vit"):
    """Resizes a `(gt, gh, gw, D)` video position grid as `family` does.

    Each frame's grid is resized as `resize_grid` resizes an image's, then
    the time axis with the same one-axis resize (`resize_matrix`), so a
    table learned for a clip of one length and size serves any other.

    Args:
        grid: tensor `(gt, gh, gw, D)` with static sizes.
        new_size: `(nt, nh, nw)`, ints or scalar int tensors.
        family: a name of `POSITION_INTERPOLATIONS`.

    Returns:
        A tensor `(nt, nh, nw, D)` in the dtype of `grid`.

    Example:

    >>> import numpy as np
    >>> grid = np.random.default_rng(0).normal(size=(2, 3, 3, 4)).astype("float32")
    >>> tuple(resize_video_grid(grid, (4, 6, 3)).shape)
    (4, 6, 3, 4)
    >>> np.allclose(keras.ops.convert_to_numpy(resize_video_grid(grid, (2, 3, 3))), grid, atol=1e-6)
    True
    """
    mode, in_float32, offset = _family(family)
    grid = ops.convert_to_tensor(grid)
    dtype = grid.dtype
    compute = "float32" if in_float32 else dtype
    spatial = resize_grid(grid, new_size[1:], family)
    frames = ops.cast(resize_matrix(new_size[0], grid.shape[0], mode, offset), compute)
    return ops.cast(ops.einsum("ij,jkld->ikld", frames, ops.cast(spatial, compute)), dtype)
