"""`PromptEncoder`: SAM's prompt encoder (points, boxes and a mask in,
sparse and dense prompt embeddings out).

Kirillov et al., "Segment Anything", ICCV 2023, arXiv:2304.02643.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_vit import kernels

from keras_vit.validation import check_positive_float, check_positive_int, pair

# Point labels: 1 a point on the object, 0 a point off it, 2 and 3 a box's
# top-left and bottom-right corners, -1 the padding point SAM adds when no
# box follows (its own embedding), -10 a point that is ignored (a zero
# embedding: transformers' `SamProcessor` pads prompts of fewer points with it).
POINT_LABELS = {"positive": 1, "negative": 0, "box_start": 2, "box_end": 3, "padding": -1, "ignored": -10}


def fourier_positions(coordinates, frequencies):
    """SAM's random Fourier features of `[0, 1]` coordinates `(..., 2)`:
    `[sin(2 pi (2c - 1) G), cos(...)]` for a `(2, F)` matrix `G`, `(..., 2F)`."""
    angles = 2.0 * math.pi * ops.matmul(2.0 * coordinates - 1.0, frequencies)
    return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)


@keras.saving.register_keras_serializable(package="keras_vit")
class PromptEncoder(keras.layers.Layer):
    """SAM's prompt encoder.

    Points (and box corners, as two points labelled 2 and 3: see
    `POINT_LABELS`) become sparse embeddings: the random Fourier features of
    their position (weight `positional_embedding` `(2, hidden_size / 2)`,
    the positions shifted to pixel centres and divided by `image_size`)
    plus a learned embedding per label (`point_embedding_{0,1,2,3}`;
    `not_a_point` for label -1, zero for -10). A low-resolution
    mask becomes a dense embedding on the image embedding's grid: two 2 x 2
    stride-2 convolutions, each followed by a LayerNorm over channels and a
    GELU, and a 1 x 1 convolution (`mask_conv_{0,1,2}`, `mask_norm_{0,1}`);
    without a mask, the learned `no_mask` embedding everywhere.

    Args:
        hidden_size: int, the embeddings' width (SAM's 256; even).
        image_size: int or `(h, w)`: the model input's size, which point
            coordinates are given in.
        grid_size: int or `(h, w)`: the image embedding's grid; masks are
            `4 *` it.
        mask_channels: int, default 16: the mask convolutions' width
            (`mask_channels // 4` after the first).
        layer_norm_epsilon: float, default 1e-6.

    Call arguments:
        points: `(batch, n, 2)` float `(x, y)` in the input's pixels.
        labels: `(batch, n)` ints (`POINT_LABELS`).
        mask_input: `(batch, 4 gh, 4 gw, 1)` mask logits.
        has_mask_input: `(batch, 1)` floats, 1 where `mask_input` is given.

    Returns:
        `(sparse (batch, n, hidden_size), dense (batch, gh, gw, hidden_size),
        image positions (1, gh, gw, hidden_size))`: the prompt embeddings,
        and the positional embedding of the image embedding's grid (from the
        same Fourier matrix; `image_positions`).

    Example:

    >>> encoder = PromptEncoder(hidden_size=8, image_size=64, grid_size=8, mask_channels=8)
    >>> sparse, dense, grid = encoder(np.zeros((2, 3, 2)), np.ones((2, 3), "int32"), np.zeros((2, 32, 32, 1)),
    ...                               np.zeros((2, 1)))
    >>> tuple(sparse.shape), tuple(dense.shape), tuple(grid.shape)
    ((2, 3, 8), (2, 8, 8, 8), (1, 8, 8, 8))
    """

    def __init__(self, hidden_size, image_size, grid_size, mask_channels=16, layer_norm_epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = check_positive_int(hidden_size, "hidden_size")
        if self.hidden_size % 2:
            raise ValueError(f"`hidden_size` must be even (sines and cosines). Received: hidden_size={hidden_size}")
        self.image_size = pair(image_size, "image_size")
        self.grid_size = pair(grid_size, "grid_size")
        self.mask_channels = check_positive_int(mask_channels, "mask_channels")
        self.layer_norm_epsilon = check_positive_float(layer_norm_epsilon, "layer_norm_epsilon")

    def _conv(self, filters, size, name, channels):
        layer = keras.layers.Conv2D(filters, size, strides=size, data_format="channels_last", name=name,
                                    dtype=self.dtype_policy)
        layer.build((None, None, None, channels))
        return layer

    def _norm(self, name, channels):
        layer = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name=name, dtype=self.dtype_policy)
        layer.build((None, None, None, channels))
        return layer

    def build(self, points_shape=None, labels_shape=None, mask_input_shape=None, has_mask_input_shape=None):
        hidden, small = self.hidden_size, self.mask_channels // 4
        self.positional_embedding = self.add_weight(
            name="positional_embedding", shape=(2, hidden // 2), initializer=keras.initializers.RandomNormal()
        )
        self.point_embeddings = [
            self.add_weight(name=f"point_embedding_{i}", shape=(hidden,), initializer="zeros") for i in range(4)
        ]
        self.not_a_point = self.add_weight(name="not_a_point", shape=(hidden,), initializer="zeros")
        self.no_mask = self.add_weight(name="no_mask", shape=(hidden,), initializer="zeros")
        self.mask_conv_0 = self._conv(small, 2, "mask_conv_0", 1)
        self.mask_norm_0 = self._norm("mask_norm_0", small)
        self.mask_conv_1 = self._conv(self.mask_channels, 2, "mask_conv_1", small)
        self.mask_norm_1 = self._norm("mask_norm_1", self.mask_channels)
        self.mask_conv_2 = self._conv(hidden, 1, "mask_conv_2", self.mask_channels)
        self.built = True

    def image_positions(self):
        """The dense positional embedding of the image embedding's grid,
        `(1, gh, gw, hidden_size)` (every cell at its centre)."""
        height, width = self.grid_size
        # In keras.ops, float32 as the reference computes them: no host array in a traced call.
        x = (ops.arange(0, width, dtype="float32") + 0.5) / width
        y = (ops.arange(0, height, dtype="float32") + 0.5) / height
        cells = ops.stack([ops.tile(x[None, :], (height, 1)), ops.tile(y[:, None], (1, width))], axis=-1)
        cells = ops.cast(cells, self.compute_dtype)
        frequencies = ops.cast(self.positional_embedding, self.compute_dtype)
        return fourier_positions(cells, frequencies)[None]

    def embed_points(self, points, labels):
        """The sparse embeddings `(batch, n, hidden_size)` of labelled points."""
        shifted = ops.cast(points, self.compute_dtype) + 0.5
        coordinates = ops.stack([shifted[..., 0] / float(self.image_size[1]),
                                 shifted[..., 1] / float(self.image_size[0])], axis=-1)
        embedded = fourier_positions(coordinates, ops.cast(self.positional_embedding, self.compute_dtype))
        labels = ops.cast(labels, "int32")[..., None]
        embedded = ops.where(labels == -1, ops.cast(self.not_a_point, embedded.dtype), embedded)
        embedded = ops.where(labels == -10, ops.zeros_like(embedded), embedded)
        for label, embedding in enumerate(self.point_embeddings):
            embedded = embedded + ops.cast(labels == label, embedded.dtype) * ops.cast(embedding, embedded.dtype)
        return embedded

    def embed_mask(self, mask_input, has_mask_input):
        """The dense embeddings `(batch, gh, gw, hidden_size)` of mask logits
        (the `no_mask` embedding where `has_mask_input` is 0)."""
        x = ops.cast(mask_input, self.compute_dtype)
        x = kernels.activation(self.mask_norm_0(self.mask_conv_0(x)), "gelu")
        x = kernels.activation(self.mask_norm_1(self.mask_conv_1(x)), "gelu")
        x = self.mask_conv_2(x)
        has = ops.cast(ops.reshape(has_mask_input, (-1, 1, 1, 1)), x.dtype)
        return has * x + (1.0 - has) * ops.cast(self.no_mask, x.dtype)

    def call(self, points, labels, mask_input, has_mask_input):
        return self.embed_points(points, labels), self.embed_mask(mask_input, has_mask_input), self.image_positions()

    def compute_output_spec(self, points, labels, mask_input, has_mask_input):
        sparse = keras.KerasTensor(tuple(points.shape[:2]) + (self.hidden_size,), dtype=self.compute_dtype)
        dense = keras.KerasTensor((points.shape[0],) + self.grid_size + (self.hidden_size,), dtype=self.compute_dtype)
        grid = keras.KerasTensor((1,) + self.grid_size + (self.hidden_size,), dtype=self.compute_dtype)
        return sparse, dense, grid

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_size": self.hidden_size, "image_size": self.image_size, "grid_size": self.grid_size,
                       "mask_channels": self.mask_channels, "layer_norm_epsilon": self.layer_norm_epsilon})
        return config
