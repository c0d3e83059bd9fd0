"""Relative positions on the attention logits, and windowed attention.

Two kinds of relative position term (`RELATIVE_POSITIONS`, a block's
`relative_position`):

- "mlp" and "shared_mlp": a bias from an MLP of log-spaced relative
  coordinates (timm's `RelPosMlp`, the "cr" form of Swin v2's log-spaced
  continuous position bias). For two patch tokens at grid positions
  `(y_i, x_i)` and `(y_j, x_j)` the coordinates are `sign(d) * log(1 + |d|)`
  of `d = (y_i - y_j, x_i - x_j)`; an MLP (2 -> hidden, ReLU -> heads) maps
  them to one bias per head, added to the logits of query `i` and key `j`.
  Prefix tokens (class token) get a zero bias. The coordinates depend on the
  grid alone, so a model computes them once per input grid
  (`RelativePositionTable`, layer `rel_pos`) and hands them to every block;
  the MLP is each block's own ("mlp": sublayer `rel_pos` of its attention)
  or the model's ("shared_mlp": the table then hands every block the bias
  itself).
- "decomposed": MViTv2's query-dependent term (ViTDet, SAM): for a query at
  row `y`, column `x` and a key at `y'`, `x'`, `q . R_h[y - y'] + q . R_w[x
  - x']`, with learned tables `R_h`, `R_w` of `2 * size - 1` rows (the size
  of the window, or of the grid the model was trained on), resized linearly
  when the attended grid is another (`DecomposedRelativePosition`).

ViTDet's blocks (and the Segment Anything image encoder's) attend within
non-overlapping windows of `window_size` x `window_size` patch tokens (the
grid padded with zeros at the bottom and right to a multiple of it), except
a few global blocks that attend over the whole grid (`window_partition`,
`window_merge`).

References:
    Liu et al., "Swin Transformer V2", arXiv:2111.09883 (log-spaced
    continuous position bias); timm's `vision_transformer_relpos.py`.
    Li et al., "Exploring Plain Vision Transformer Backbones for Object
    Detection", arXiv:2203.16527; Li et al., "MViTv2", arXiv:2112.01526;
    Kirillov et al., "Segment Anything", arXiv:2304.02643.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_vit import kernels
from keras_vit.validation import check_bool, check_positive_int, pair

# The relative position terms a block's attention can add: "mlp" and
# "shared_mlp" (timm's `RelPosMlp`, a bias of the patch grid's log-spaced
# relative coordinates, from each block's MLP or the model's) and
# "decomposed" (MViTv2's, per axis, query-dependent).
RELATIVE_POSITIONS = ("mlp", "shared_mlp", "decomposed")
# The kinds whose model computes per-grid tables once for every block
# (`RelativePositionTable`, layer `rel_pos`).
GRID_TABLE_KINDS = ("mlp", "shared_mlp")


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
    `target` (half-pixel centres, torch's `interpolate(mode="linear")`), as
    tensors: a traced call holds no host arrays (torch.compile stops its
    graph at Keras' conversion of one)."""
    position = ops.maximum((ops.arange(0, target, dtype="float32") + 0.5) * (source / target) - 0.5, 0.0)
    first = ops.minimum(ops.cast(ops.floor(position), "int32"), source - 1)
    second = ops.minimum(first + 1, source - 1)
    return first, second, position - ops.cast(first, "float32")


def _relative_index(query_size, key_size):
    """`(query_size, key_size)` rows of the resized table, as a tensor where
    both sizes agree (as in every attention of the library: integer
    arithmetic, so exact), else from NumPy."""
    if query_size == key_size:
        queries, keys = ops.arange(0, query_size, dtype="int32"), ops.arange(0, key_size, dtype="int32")
        return queries[:, None] - keys[None, :] + (key_size - 1)
    query = np.arange(query_size)[:, None] * max(key_size / query_size, 1.0)
    key = np.arange(key_size)[None, :] * max(query_size / key_size, 1.0)
    return (query - key + (key_size - 1) * max(query_size / key_size, 1.0)).astype("int64")


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
    return ops.take(table, _relative_index(query_size, key_size), axis=0)


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

    def terms(self, q, grid):
        """The bias in its two factors: `(rows, columns)`, `(batch, heads,
        h' * w', h')` and `(batch, heads, h' * w', w')`, the term of each
        query and key row, and of each query and key column (what
        `keras_vit.kernels.decomposed_attention` takes)."""
        height, width = static_grid(grid)
        heads = q.shape[2]
        rows = relative_table(ops.cast(self.height, q.dtype), height, height)
        columns = relative_table(ops.cast(self.width, q.dtype), width, width)
        grid_q = ops.reshape(q, (-1, height, width, heads, self.head_dim))
        along_h = ops.einsum("byxnc,ykc->bnyxk", grid_q, rows)
        along_w = ops.einsum("byxnc,xkc->bnyxk", grid_q, columns)
        count = height * width
        return ops.reshape(along_h, (-1, heads, count, height)), ops.reshape(along_w, (-1, heads, count, width))

    def call(self, q, grid):
        height, width = static_grid(grid)
        rows, columns = self.terms(q, grid)
        count = height * width
        return ops.reshape(rows[..., :, None] + columns[..., None, :], (-1, q.shape[2], count, count))

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
        x = kernels.pad(x, ((0, 0), (0, padded[0] - height), (0, padded[1] - width), (0, 0)))
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


# --- MLP of log-spaced relative coordinates (timm's `RelPosMlp`) ---

def relative_log_coordinates(grid):
    """`(h * w, h * w, 2)` float32: the log-spaced `(dy, dx)` of every pair
    of patches of a `(h, w)` grid (ints or scalar tensors), row-major.

    Example:

    >>> c = keras.ops.convert_to_numpy(relative_log_coordinates((1, 2))).astype("float64")
    >>> c.shape, c[0, 1].round(4).tolist(), c[1, 0].round(4).tolist()
    ((2, 2, 2), [0.0, -0.6931], [0.0, 0.6931])
    """
    height, width = grid
    # `arange(0, n)`: jax2onnx reads no `arange(n)` whose stop is None.
    index = ops.arange(0, height * width, dtype="int32")
    coords = ops.cast(ops.stack([index // width, index % width], axis=-1), "float32")  # (N, 2), row-major
    delta = coords[:, None, :] - coords[None, :, :]
    return ops.sign(delta) * ops.log1p(ops.abs(delta))


def pad_prefix(bias, tokens, queries=None):
    """`(heads, N, N)` patch biases as `(1, heads, queries, tokens)` logits'
    biases, zero for the `tokens - N` prefix tokens (first) and cut to the
    first `queries` query rows (None: all).

    Example:

    >>> b = keras.ops.convert_to_numpy(pad_prefix(np.ones((2, 3, 3), "float32"), 4))
    >>> b.shape, b[0, 0, 0].tolist(), b[0, 0, 1].tolist()
    ((1, 2, 4, 4), [0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0])
    """
    prefix = tokens - ops.shape(bias)[-1]
    bias = kernels.pad(bias, ((0, 0), (prefix, 0), (prefix, 0)))
    if queries is not None:
        bias = bias[:, :queries]
    return bias[None]


@keras.saving.register_keras_serializable(package="keras_vit")
class RelativePositionMlp(keras.layers.Layer):
    """The MLP from relative coordinates to one attention bias per head.

    `Dense_1(relu(Dense_0(coords)))`, both with biases (timm's
    `RelPosMlp.mlp.fc1`, `fc2`).

    Args:
        num_heads: int, the attention heads (the output width).
        hidden_dim: int, default 128: the hidden width.

    Call arguments:
        coords: `(N, N, 2)` from `relative_log_coordinates`.

    Returns:
        `(heads, N, N)` biases, in the compute dtype.

    Example:

    >>> mlp = RelativePositionMlp(num_heads=3, hidden_dim=8)
    >>> tuple(mlp(relative_log_coordinates((2, 2))).shape)
    (3, 4, 4)
    """

    def __init__(self, num_heads, hidden_dim=128, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.hidden_dim = check_positive_int(hidden_dim, "hidden_dim")

    def build(self, input_shape=None):
        self.dense_0 = keras.layers.Dense(self.hidden_dim, activation="relu", name="Dense_0", dtype=self.dtype_policy)
        self.dense_0.build((None, 2))
        self.dense_1 = keras.layers.Dense(self.num_heads, name="Dense_1", dtype=self.dtype_policy)
        self.dense_1.build((None, self.hidden_dim))
        self.built = True

    def call(self, coords):
        bias = self.dense_1(self.dense_0(ops.cast(coords, self.compute_dtype)))
        return ops.transpose(bias, (2, 0, 1))

    def compute_output_shape(self, input_shape):
        return (self.num_heads, input_shape[0], input_shape[1])

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "hidden_dim": self.hidden_dim})
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class RelativePositionTable(keras.layers.Layer):
    """The relative positions of a patch grid, for every block of a model.

    Called on the patch feature map `(batch, gh, gw, channels)` (only its
    grid is read), it returns `relative_log_coordinates` of the grid, or,
    with `shared=True`, the biases its own `RelativePositionMlp` (sublayer
    `mlp`) makes of them: what each block's attention takes (as `rope=`,
    the per-grid tables every block of a model takes).

    Args:
        num_heads: int, the attention heads.
        hidden_dim: int, default 128: the shared MLP's hidden width.
        shared: bool, default False: whether the table holds the MLP (one
            bias for every block) or hands the coordinates to the blocks'
            own MLPs.

    Example:

    >>> table = RelativePositionTable(num_heads=2, hidden_dim=4, shared=True)
    >>> tuple(table(np.zeros((1, 2, 3, 5), "float32")).shape)
    (2, 6, 6)
    >>> tuple(RelativePositionTable(num_heads=2)(np.zeros((1, 2, 3, 5), "float32")).shape)
    (6, 6, 2)
    """

    # What `keras_vit.models.forward` reads as a table's kind.
    variant = "relative"

    def __init__(self, num_heads, hidden_dim=128, shared=False, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.hidden_dim = check_positive_int(hidden_dim, "hidden_dim")
        self.shared = check_bool(shared, "shared")

    def build(self, input_shape=None):
        self.mlp = None
        if self.shared:
            self.mlp = RelativePositionMlp(self.num_heads, self.hidden_dim, name="mlp", dtype=self.dtype_policy)
            self.mlp.build((None, None, 2))
        self.built = True

    def tables(self, grid):
        """What `call` returns for a feature map on a `(gh, gw)` grid."""
        if not self.built:
            self.build()
        coords = relative_log_coordinates(grid)
        return coords if self.mlp is None else self.mlp(coords)

    def call(self, inputs):
        shape = ops.shape(inputs)
        return self.tables((shape[1], shape[2]))

    def compute_output_shape(self, input_shape):
        height, width = input_shape[1], input_shape[2]
        tokens = None if height is None or width is None else height * width
        return (self.num_heads, tokens, tokens) if self.shared else (tokens, tokens, 2)

    def compute_output_spec(self, inputs):
        # The coordinates are float32 whatever the policy; the shared MLP's biases are in its compute dtype.
        dtype = self.compute_dtype if self.shared else "float32"
        return keras.KerasTensor(self.compute_output_shape(inputs.shape), dtype=dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "hidden_dim": self.hidden_dim, "shared": self.shared})
        return config
