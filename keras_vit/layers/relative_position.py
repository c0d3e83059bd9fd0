"""Windowed attention and decomposed relative position (ViTDet, SAM).

ViTDet's blocks (and the Segment Anything image encoder's) attend within
non-overlapping windows of `window_size` x `window_size` patch tokens (the
grid padded with zeros at the bottom and right to a multiple of it), except
a few global blocks that attend over the whole grid; every block adds to its
attention logits a decomposed relative position term, MViTv2's: for a query
at row `y`, column `x` and a key at `y'`, `x'`, `q . R_h[y - y'] + q . R_w[x
- x']`, with learned tables `R_h`, `R_w` of `2 * size - 1` rows (the size
of the window, or of the grid the model was trained on), resized linearly
when the attended grid is another.

Li et al., "Exploring Plain Vision Transformer Backbones for Object
Detection", arXiv:2203.16527; Li et al., "MViTv2", arXiv:2112.01526;
Kirillov et al., "Segment Anything", arXiv:2304.02643.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_vit.validation import check_positive_int, pair

# The relative position terms a block's attention can add ("decomposed":
# MViTv2's, per axis, query-dependent).
RELATIVE_POSITIONS = ("decomposed",)


def static_grid(grid_like):
    """`(h, w)` as Python ints of a `(batch, h, w, ...)` tensor on the token
    grid (the patches), or of an `(h, w)` pair.

    Raises:
        ValueError: when the grid is only known at run time (windows and
            relative positions are laid out for a static grid).

    Example:

    >>> static_grid(np.zeros((1, 3, 4, 5))), static_grid((6, 7))
    ((3, 4), (6, 7))
    """
    if isinstance(grid_like, (tuple, list)):
        return pair(tuple(int(g) for g in grid_like), "grid")
    height, width = grid_like.shape[1], grid_like.shape[2]
    if height is None or width is None:
        raise ValueError(
            "Windowed attention and relative positions need the patch grid's size when the model is traced: "
            f"give images of a static height and width. Received: a grid of shape {tuple(grid_like.shape)}"
        )
    return int(height), int(width)


def _resize_weights(source, target):
    """`(index_0, index_1, weight_1)` of a linear resize of `source` rows to
    `target` (half-pixel centres, torch's `interpolate(mode="linear")`)."""
    position = np.maximum((np.arange(target) + 0.5) * (source / target) - 0.5, 0.0)
    first = np.minimum(np.floor(position).astype("int64"), source - 1)
    second = np.minimum(first + 1, source - 1)
    return first, second, (position - first).astype("float32")


def relative_table(table, query_size, key_size):
    """The relative position embeddings of every (query, key) pair of one
    axis: `(query_size, key_size, C)` rows of `table`, resized linearly to
    `2 * max(query_size, key_size) - 1` rows first when it has another count.

    Args:
        table: `(2 * size - 1, C)`.
        query_size, key_size: ints, the positions on the axis.

    Example:

    >>> table = np.arange(5, dtype="float32")[:, None]
    >>> keras.ops.convert_to_numpy(relative_table(table, 3, 3))[..., 0].tolist()
    [[2.0, 1.0, 0.0], [3.0, 2.0, 1.0], [4.0, 3.0, 2.0]]
    """
    length = 2 * max(query_size, key_size) - 1
    rows = table.shape[0]
    if rows != length:
        first, second, weight = _resize_weights(rows, length)
        weight = ops.cast(weight[:, None], table.dtype)
        table = ops.take(table, first, axis=0) * (1 - weight) + ops.take(table, second, axis=0) * weight
    query = np.arange(query_size)[:, None] * max(key_size / query_size, 1.0)
    key = np.arange(key_size)[None, :] * max(query_size / key_size, 1.0)
    index = (query - key + (key_size - 1) * max(query_size / key_size, 1.0)).astype("int64")
    return ops.take(table, index, axis=0)


def attention_with_bias(q, k, v, scale, bias):
    """Softmax attention with an additive bias on the logits (in float32).

    Args:
        q, k, v: `(batch, tokens, heads, head_dim)`.
        scale: float.
        bias: `(batch, heads, queries, keys)`.

    Returns:
        `(batch, queries, heads, head_dim)` in the dtype of `v`.
    """
    logits = ops.einsum("bqhd,bkhd->bhqk", q, k)
    probs = ops.softmax(ops.cast(logits, "float32") * scale + ops.cast(bias, "float32"), axis=-1)
    return ops.einsum("bhqk,bkhd->bqhd", ops.cast(probs, v.dtype), v)


@keras.saving.register_keras_serializable(package="keras_vit")
class DecomposedRelativePosition(keras.layers.Layer):
    """MViTv2's decomposed relative position term of the attention logits.

    Weights `height` `(2 * h - 1, head_dim)` and `width` `(2 * w - 1,
    head_dim)`, initialised to zeros (SAM's).

    Args:
        size: int or `(h, w)`: the grid the tables are learned for (a
            window's side, or the model's patch grid for a global block).
        head_dim: int, the width of each head.

    Call arguments:
        q: the queries `(batch, h' * w', heads, head_dim)` (unscaled).
        grid: `(h', w')`, the grid they lie on (static ints).

    Returns:
        The logit bias `(batch, heads, h' * w', h' * w')`.

    Example:

    >>> layer = DecomposedRelativePosition(size=2, head_dim=4)
    >>> tuple(layer(np.ones((1, 6, 2, 4), "float32"), grid=(2, 3)).shape)
    (1, 2, 6, 6)
    """

    def __init__(self, size, head_dim, **kwargs):
        super().__init__(**kwargs)
        self.size = pair(size, "size")
        self.head_dim = check_positive_int(head_dim, "head_dim")

    def build(self, q_shape=None, grid_shape=None):
        for name, side in zip(("height", "width"), self.size):
            setattr(self, name, self.add_weight(name=name, shape=(2 * side - 1, self.head_dim), initializer="zeros"))
        self.built = True

    def call(self, q, grid):
        height, width = static_grid(grid)
        heads = q.shape[2]
        rows = relative_table(ops.cast(self.height, q.dtype), height, height)
        columns = relative_table(ops.cast(self.width, q.dtype), width, width)
        grid_q = ops.reshape(q, (-1, height, width, heads, self.head_dim))
        along_h = ops.einsum("byxnc,ykc->bnyxk", grid_q, rows)
        along_w = ops.einsum("byxnc,xkc->bnyxk", grid_q, columns)
        bias = along_h[..., :, None] + along_w[..., None, :]
        return ops.reshape(bias, (-1, heads, height * width, height * width))

    def compute_output_spec(self, q, grid):
        height, width = static_grid(grid)
        count = height * width
        return keras.KerasTensor((q.shape[0], q.shape[2], count, count), dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"size": self.size, "head_dim": self.head_dim})
        return config


def window_partition(tokens, grid, window):
    """Patch tokens `(batch, h * w, D)` to windows `(batch * windows, window
    * window, D)`, the grid padded with zeros at the bottom and right to a
    multiple of `window`.

    Returns:
        `(windows, padded (h', w'))`.

    Example:

    >>> windows, padded = window_partition(np.ones((2, 15, 4), "float32"), (3, 5), 2)
    >>> tuple(windows.shape), padded
    ((12, 4, 4), (4, 6))
    """
    height, width = grid
    dim = tokens.shape[-1]
    padded = (math.ceil(height / window) * window, math.ceil(width / window) * window)
    x = ops.reshape(tokens, (-1, height, width, dim))
    if padded != (height, width):
        x = ops.pad(x, ((0, 0), (0, padded[0] - height), (0, padded[1] - width), (0, 0)))
    x = ops.reshape(x, (-1, padded[0] // window, window, padded[1] // window, window, dim))
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    return ops.reshape(x, (-1, window * window, dim)), padded


def window_merge(windows, grid, padded, window):
    """The inverse of `window_partition`: windows back to `(batch, h * w, D)`.

    Example:

    >>> x = np.arange(2 * 15 * 4, dtype="float32").reshape(2, 15, 4)
    >>> windows, padded = window_partition(x, (3, 5), 2)
    >>> bool(np.array_equal(keras.ops.convert_to_numpy(window_merge(windows, (3, 5), padded, 2)), x))
    True
    """
    height, width = grid
    dim = windows.shape[-1]
    x = ops.reshape(windows, (-1, padded[0] // window, padded[1] // window, window, window, dim))
    x = ops.reshape(ops.transpose(x, (0, 1, 3, 2, 4, 5)), (-1, padded[0], padded[1], dim))
    if padded != (height, width):
        x = x[:, :height, :width]
    return ops.reshape(x, (-1, height * width, dim))
