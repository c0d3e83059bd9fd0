"""Fixed sin-cos position embeddings: 2D (MAE, MoCo v3, big_vision) and 1D over the tokens (VideoMAE)."""

import numpy as np
from keras import ops

from keras_vit.validation import check_choice, check_int, check_positive_float

# Each style: whether the column (x) frequencies come first, and the
# denominator of the frequency exponent, as a function of `dim // 4`.
STYLES = {
    # MAE's `get_2d_sincos_pos_embed` (and transformers' ViT-MAE, which
    # rotates its halves to match): [sin x | cos x | sin y | cos y],
    # frequencies temperature ** -(i / (D/4)).
    "mae": (True, lambda quarter: quarter),
    # MoCo v3's `build_2d_sincos_position_embedding` (square grids): rows first.
    "mocov3": (False, lambda quarter: quarter),
    # big_vision's `posemb_sincos_2d`: columns first, exponent i / (D/4 - 1).
    "big_vision": (True, lambda quarter: max(quarter - 1, 1)),
}


def _frequencies(dim, style, temperature):
    """The float64 frequencies, split into a 12-bit head and a float32 tail.

    A position below 4096 times the 12-bit head is exact in float32, so the
    angles keep float64 accuracy (`sin(a + b)` expanded) where a plain
    float32 product would lose about `position * 6e-8`.
    """
    quarter = dim // 4
    return _split(1.0 / temperature ** (np.arange(quarter) / STYLES[style][1](quarter)))


def _split(omega):
    """float64 frequencies as a float32 12-bit head and tail (`_frequencies`)."""
    head = (omega.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFF000)).view(np.float32)
    tail = (omega - head.astype(np.float64)).astype(np.float32)
    return head, tail


def _sin_cos(xp, length, head, tail):
    """Sines and cosines `(length, dim / 4)` of positions `0 .. length - 1`."""
    if xp is np:  # a grid known when the graph is built: a float64 constant
        angles = np.arange(length, dtype=np.float64)[:, None] * (head.astype(np.float64) + tail)
        return np.sin(angles), np.cos(angles)
    positions = ops.cast(ops.arange(length), "float32")[:, None]
    a = positions * ops.convert_to_tensor(head)[None, :]
    b = positions * ops.convert_to_tensor(tail)[None, :]
    sin_a, cos_a, sin_b, cos_b = ops.sin(a), ops.cos(a), ops.sin(b), ops.cos(b)
    return sin_a * cos_b + cos_a * sin_b, cos_a * cos_b - sin_a * sin_b


def sincos_position_embedding(grid, dim, style="mae", num_prefix_rows=1, temperature=10000.0):
    """The fixed 2D sin-cos position embedding of a patch grid.

    Each patch at row `y`, column `x` gets `dim / 4` sines and cosines of
    `x` and of `y` at geometrically spaced frequencies; prefix rows (the
    class token's) are zeros, as MAE's. Computed with `keras.ops`, so it can
    be recomputed inside the model for the grid of each input: a model with
    it runs at any image size.

    Args:
        grid: `(gh, gw)`, ints or scalar int tensors.
        dim: int, the token width; a multiple of 4.
        style: `"mae"` (default; MAE and transformers' `ViTMAEModel`:
            `[sin x | cos x | sin y | cos y]`), `"mocov3"` (MoCo v3: rows
            first) or `"big_vision"` (big_vision's `posemb_sincos_2d`, whose
            frequency exponent divides by `dim / 4 - 1`).
        num_prefix_rows: int, default 1: zero rows before the patch rows.
        temperature: float, default 10000: the longest wavelength.

    Returns:
        A float32 tensor `(1, num_prefix_rows + gh * gw, dim)`, patch rows in
        row-major order.

    Example:

    >>> table = sincos_position_embedding((2, 3), 8)
    >>> tuple(table.shape)
    (1, 7, 8)
    >>> import numpy as np
    >>> row = ops.convert_to_numpy(table)[0, 1 + 1 * 3 + 2]  # y=1, x=2
    >>> np.allclose(row[[0, 2, 4, 6]], [np.sin(2), np.cos(2), np.sin(1), np.cos(1)])
    True

    Reference:
        He et al., "Masked Autoencoders Are Scalable Vision Learners",
        arXiv:2111.06377; Chen et al., "An Empirical Study of Training
        Self-Supervised Vision Transformers" (MoCo v3), arXiv:2104.02057.
    """
    dim = check_int(dim, "dim", minimum=4)
    if dim % 4:
        raise ValueError(f"`dim` must be a multiple of 4. Received: dim={dim}")
    check_choice(style, tuple(STYLES), "style")
    num_prefix_rows = check_int(num_prefix_rows, "num_prefix_rows", minimum=0)
    temperature = check_positive_float(temperature, "temperature")
    head, tail = _frequencies(dim, style, temperature)
    gh, gw = grid
    # Python ints: computed in NumPy, a constant of the graph (no range ops
    # for exporters to convert); tensors: computed in the graph.
    xp = np if all(isinstance(g, int) for g in (gh, gw)) else ops
    sin_y, cos_y = _sin_cos(xp, gh, head, tail)
    sin_x, cos_x = _sin_cos(xp, gw, head, tail)
    quarter = dim // 4
    y = xp.broadcast_to(xp.concatenate([sin_y, cos_y], axis=-1)[:, None, :], (gh, gw, 2 * quarter))
    x = xp.broadcast_to(xp.concatenate([sin_x, cos_x], axis=-1)[None, :, :], (gh, gw, 2 * quarter))
    parts = [x, y] if STYLES[style][0] else [y, x]
    table = xp.reshape(xp.concatenate(parts, axis=-1), (1, -1, dim))
    table = ops.cast(table, "float32") if xp is ops else table.astype("float32")
    prefix = xp.zeros((1, num_prefix_rows, dim), "float32")
    return ops.convert_to_tensor(xp.concatenate([prefix, table], axis=1))


def sinusoid_position_embedding(length, dim, num_prefix_rows=0, temperature=10000.0):
    """The fixed 1D sinusoid table of `length` tokens (VideoMAE's).

    Token `n` (its index in the flattened `(time, row, column)` order of a
    clip's tubelets) gets, for `i < dim / 2`, `sin(n * w_i)` at column `2i`
    and `cos(n * w_i)` at column `2i + 1`, with `w_i = temperature **
    (-2i / dim)`: the table of the original Transformer, which VideoMAE adds
    to its tubelet tokens. Computed with `keras.ops` for lengths known only
    at run time, so a model with it takes clips of any length and size.

    Args:
        length: int or scalar int tensor, the number of patch tokens.
        dim: int, the token width; even.
        num_prefix_rows: int, default 0: zero rows before the patch rows.
        temperature: float, default 10000: the longest wavelength.

    Returns:
        A float32 tensor `(1, num_prefix_rows + length, dim)`.

    Example:

    >>> table = ops.convert_to_numpy(sinusoid_position_embedding(5, 6))
    >>> table.shape
    (1, 5, 6)
    >>> np.allclose(table[0, 3, :2], [np.sin(3), np.cos(3)])
    True

    Reference:
        Vaswani et al., "Attention Is All You Need", arXiv:1706.03762;
        Tong et al., "VideoMAE", arXiv:2203.12602.
    """
    dim = check_int(dim, "dim", minimum=2)
    if dim % 2:
        raise ValueError(f"`dim` must be even. Received: dim={dim}")
    num_prefix_rows = check_int(num_prefix_rows, "num_prefix_rows", minimum=0)
    temperature = check_positive_float(temperature, "temperature")
    head, tail = _split(1.0 / temperature ** (2.0 * np.arange(dim // 2) / dim))
    xp = np if isinstance(length, int) else ops
    sin, cos = _sin_cos(xp, length, head, tail)
    # Interleaved: sin at even columns, cos at odd ones.
    table = xp.reshape(xp.stack([sin, cos], axis=-1), (1, -1, dim))
    table = ops.cast(table, "float32") if xp is ops else table.astype("float32")
    prefix = xp.zeros((1, num_prefix_rows, dim), "float32")
    return ops.convert_to_tensor(xp.concatenate([prefix, table], axis=1))
