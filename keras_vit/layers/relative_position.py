"""Relative position biases of the attention logits: an MLP of log-spaced
relative coordinates (timm's `RelPosMlp`, the "cr" form of Swin v2's
log-spaced continuous position bias).

For two patch tokens at grid positions `(y_i, x_i)` and `(y_j, x_j)` the
coordinates are `sign(d) * log(1 + |d|)` of `d = (y_i - y_j, x_i - x_j)`;
an MLP (2 -> hidden, ReLU -> heads) maps them to one bias per head, added
to the logits of query `i` and key `j`. Prefix tokens (class token) get a
zero bias. The coordinates depend on the grid alone, so a model computes
them once per input grid (`RelativePositionTable`, layer `rel_pos`) and
hands them to every block; the MLP is each block's own (sublayer
`rel_pos` of its attention) or the model's (`shared=True`: the table then
hands every block the bias itself).

Reference:
    Liu et al., "Swin Transformer V2", arXiv:2111.09883 (log-spaced
    continuous position bias); timm's `vision_transformer_relpos.py`.
"""

import keras
from keras import ops

from keras_vit.validation import check_bool, check_positive_int


def relative_log_coordinates(grid):
    """`(h * w, h * w, 2)` float32: the log-spaced `(dy, dx)` of every pair
    of patches of a `(h, w)` grid (ints or scalar tensors), row-major.

    Example:

    >>> import numpy as np
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

    >>> import numpy as np
    >>> b = keras.ops.convert_to_numpy(pad_prefix(np.ones((2, 3, 3), "float32"), 4))
    >>> b.shape, b[0, 0, 0].tolist(), b[0, 0, 1].tolist()
    ((1, 2, 4, 4), [0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0])
    """
    prefix = tokens - ops.shape(bias)[-1]
    bias = ops.pad(bias, ((0, 0), (prefix, 0), (prefix, 0)))
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

    >>> import numpy as np
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

    >>> import numpy as np
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
