"""Position embeddings for a padded batch of images, each on its own grid.

SigLIP 2's NaFlex checkpoints keep each image's aspect ratio: an image
becomes a grid of `h x w` patches (`h * w <= n`), padded to `n` tokens. The
learned `(gh, gw, D)` position table is resized to each image's grid as
transformers' `Siglip2VisionEmbeddings.resize_positional_embeddings` does
(`interpolate(mode="bilinear", antialias=True, align_corners=False)` in
float32), and padding tokens take the embedding of position (0, 0).

The resize of each axis is written as weights at given output positions
rather than as a `(new, old)` matrix (`interpolation.resize_matrix`), so
that images of different grids share one batch, with `keras.ops` only: the
same numbers on every backend, inside compiled and exported graphs with a
fixed `n`. `antialiased_linear_weights` equals the rows of
`resize_matrix(new, old, "bilinear_antialias")`.
"""

import numpy as np
from keras import ops

from keras_vit.validation import check_int


def antialiased_linear_weights(positions, new_sizes, old):
    """Weights of torch's antialiased bilinear resize of one axis.

    Output index `i` of an axis resized from `old` to `new` cells reads
    source cell `s` with weight `max(0, 1 - |s - c| / support)`, normalised
    to sum to one, where `c = (i + 0.5) * old / new - 0.5` and `support =
    max(old / new, 1)`.

    Args:
        positions: int or float tensor of output indices, any shape.
        new_sizes: the new length of the axis, broadcastable to `positions`.
        old: int, the original length.

    Returns:
        A float32 tensor `positions.shape + (old,)`.

    Example:

    >>> import numpy as np
    >>> w = antialiased_linear_weights(np.arange(2), 2, 4)
    >>> np.round(ops.convert_to_numpy(w).astype(float), 3).tolist()
    [[0.429, 0.429, 0.143, 0.0], [0.0, 0.143, 0.429, 0.429]]
    """
    old = check_int(old, "old", minimum=1)
    positions = ops.cast(positions, "float32")
    new_sizes = ops.cast(new_sizes, "float32")
    scale = float(old) / new_sizes
    support = ops.maximum(scale, 1.0)
    center = (positions + 0.5) * scale - 0.5
    # A constant: `old` is static (jax2onnx cannot trace `arange` of one argument).
    source = ops.convert_to_tensor(np.arange(old, dtype="float32"))
    weights = ops.maximum(1.0 - ops.abs(source - center[..., None]) / support[..., None], 0.0)
    return weights / ops.sum(weights, axis=-1, keepdims=True)


def _table_grid(table):
    table = ops.convert_to_tensor(table)
    if len(table.shape) == 3:
        return table
    side = int(round(table.shape[0] ** 0.5))
    if len(table.shape) != 2 or side * side != table.shape[0]:
        raise ValueError(
            "`table` must be a (gh, gw, D) grid or a square (gh * gw, D) table. "
            f"Received: shape={tuple(table.shape)}"
        )
    return ops.reshape(table, (side, side, table.shape[-1]))


def position_embedding_at(table, positions, grid_sizes):
    """The position table resized to each image's grid, read at patch positions.

    Args:
        table: the learned embedding, `(gh, gw, D)` or square `(gh * gw, D)`.
        positions: int tensor `(batch, n, 2)`, each token's (row, column) in
            its image's grid (timm's `patch_coord`).
        grid_sizes: int tensor `(batch, 2)`, each image's (rows, columns).

    Returns:
        A tensor `(batch, n, D)` in `table`'s dtype, computed in float32.

    Example:

    >>> import numpy as np
    >>> table = np.arange(2 * 2 * 1, dtype="float32").reshape(2, 2, 1)
    >>> out = position_embedding_at(table, np.array([[[0, 0], [0, 1]]]), np.array([[2, 2]]))
    >>> ops.convert_to_numpy(out)[0, :, 0].tolist()
    [0.0, 1.0]
    """
    grid = _table_grid(table)
    dtype = grid.dtype
    positions = ops.convert_to_tensor(positions)
    sizes = ops.convert_to_tensor(grid_sizes)
    # `take`, not two slices of one tensor: ONNX optimizers merge those into
    # a `Split` of a newer opset than tf2onnx's graph.
    axis = lambda x, i: ops.take(x, i, axis=-1)  # noqa: E731
    rows = antialiased_linear_weights(axis(positions, 0), axis(sizes, 0)[:, None], grid.shape[0])
    cols = antialiased_linear_weights(axis(positions, 1), axis(sizes, 1)[:, None], grid.shape[1])
    # One matrix product with the outer product of the two axes' weights:
    # a three-operand einsum makes torch.export fix the batch size.
    cells = grid.shape[0] * grid.shape[1]
    weights = ops.reshape(rows[..., :, None] * cols[..., None, :], tuple(ops.shape(rows)[:-1]) + (cells,))
    out = ops.matmul(weights, ops.reshape(ops.cast(grid, "float32"), (cells, grid.shape[-1])))
    return ops.cast(out, dtype)


def per_image_position_embedding(table, spatial_shapes, length):
    """transformers' SigLIP 2 position embedding for images of `spatial_shapes`.

    Token `p < h * w` of an image of `h x w` patches sits at row `p // w`,
    column `p % w`; the padding tokens after them take position (0, 0).

    Args:
        table: `(gh, gw, D)` or square `(gh * gw, D)`.
        spatial_shapes: int tensor `(batch, 2)`: each image's (rows,
            columns), `rows * columns <= length`.
        length: int, the padded number of tokens `n`.

    Returns:
        A tensor `(batch, length, D)`.

    Example:

    >>> import numpy as np
    >>> table = np.random.default_rng(0).normal(size=(4, 4, 8)).astype("float32")
    >>> tuple(per_image_position_embedding(table, np.array([[2, 3], [4, 4]]), 16).shape)
    (2, 16, 8)
    """
    length = check_int(length, "length", minimum=1)
    sizes = ops.cast(ops.convert_to_tensor(spatial_shapes), "int32")
    index = ops.arange(length, dtype="int32")[None, :]
    width = sizes[:, 1:2]
    rows, cols = index // width, index % width
    valid = index < sizes[:, 0:1] * width
    positions = ops.stack(
        [ops.where(valid, rows, 0), ops.where(valid, cols, 0)], axis=-1
    )
    return position_embedding_at(table, positions, sizes)


def grid_sizes_from_positions(positions, valid):
    """Each image's (rows, columns): one more than its largest valid position.

    Args:
        positions: int tensor `(batch, n, 2)`.
        valid: bool tensor `(batch, n)`.

    Returns:
        An int32 tensor `(batch, 2)`, at least 1 on each axis.

    Example:

    >>> import numpy as np
    >>> pos = np.array([[[0, 0], [0, 1], [1, 0], [1, 1], [0, 0]]])
    >>> valid = np.array([[True, True, True, True, False]])
    >>> ops.convert_to_numpy(grid_sizes_from_positions(pos, valid)).tolist()
    [[2, 2]]
    """
    # In float32 (exact for these indices): OpenVINO's CPU plugin reduces
    # jax2onnx's int32 maximum of this form wrongly.
    positions = ops.cast(ops.convert_to_tensor(positions), "float32")
    keep = ops.cast(ops.convert_to_tensor(valid), "float32")[..., None]
    masked = positions * keep + (keep - 1.0)
    return ops.cast(ops.maximum(ops.amax(masked, axis=1) + 1.0, 1.0), "int32")


__all__ = [
    "antialiased_linear_weights",
    "grid_sizes_from_positions",
    "per_image_position_embedding",
    "position_embedding_at",
]
