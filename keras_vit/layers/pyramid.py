"""`SimpleFeaturePyramid`: ViTDet's multi-scale maps from one ViT map."""

import math

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.validation import check_bool, check_positive_float, check_positive_int, pair

# The strides of a detection/segmentation FPN (levels P2..P5).
PYRAMID_STRIDES = (4, 8, 16, 32)
# The maps are NHWC whatever `keras.config.image_data_format()` says: every
# Keras layer and op that would follow it is given this.
NHWC = "channels_last"


def _check_strides(value):
    try:
        strides = tuple(value)
    except TypeError:
        strides = None
    ok = (
        strides
        and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in strides)
        and all(a < b for a, b in zip(strides, strides[1:]))
    )
    if not ok:
        raise ValueError(
            "`strides` must be a non-empty increasing sequence of positive ints, e.g. "
            f"(4, 8, 16, 32). Received: strides={value!r}"
        )
    return strides


def _check_input_stride(value):
    stride = pair(value, "input_stride")
    if stride[0] != stride[1]:
        raise ValueError(
            "`input_stride` must be square (the pyramid scales both axes alike). "
            f"Received: input_stride={value!r}"
        )
    return stride[0]


@keras.saving.register_keras_serializable(package="keras_vit")
class SimpleFeaturePyramid(keras.layers.Layer):
    """ViTDet's simple feature pyramid: strides 4/8/16/32 from one map.

    A plain ViT gives a single map at stride `s` (its effective patch size:
    the patch size, times the stem stride for a hybrid). Each output level,
    of target stride `t`, rescales that map by `s / t`, as ViTDet does:

    - up by `2**k`: `k` transposed 2x2 convolutions of stride 2, halving the
      channels each time, with a channel LayerNorm and the exact GELU
      between two of them (ViTDet's factor 4: deconv, LN, GELU, deconv);
    - unchanged (factor 1);
    - down by `2**k`: a `2**k` max-pooling (windows from the top-left
      corner; partial windows at the bottom and right edges);

    then a 1x1 convolution to `out_channels` and a 3x3 convolution, each
    without bias and followed by a channel LayerNorm. `top_block=True` adds
    ViTDet's extra level (`LastLevelMaxPool`: every other pixel of the
    coarsest output), at twice its stride.

    When `s / t` is not a power of two (patch 14: `14 / 4 = 3.5`), the
    rescaling uses the nearest power of two (`2**round(log2(s / t))`: 4, 2,
    1, 0.5 for patch 14, ViTDet's factors) and then, with
    `match_strides=True` (default), a bilinear resize to the exact size of
    stride `t`; with `match_strides=False` no resize is done and the level's
    stride is `s / 2**k` (3.5, 7, 14, 28 for patch 14), as ViTDet's
    `scale_factors` relative to the given map. Sizes follow "same"-padded
    strided convolutions: a level of stride `t` has `ceil(H * s / t)` rows
    for an input of `H` rows (exact for powers of two).

    Args:
        input_stride: int or a square `(h, w)` pair: the stride of the input
            map in image pixels (a model's `effective_patch_size`).
        out_channels: int, channels of every output, default 256.
        strides: increasing ints, the target strides, default
            `(4, 8, 16, 32)`.
        top_block: bool, default False: an extra level at twice the largest
            stride (ViTDet's P6).
        match_strides: bool, default True: resize levels whose ratio is not
            a power of two to the target stride (see above).
        norm_epsilon: float, epsilon of the LayerNorms, default 1e-6.

    Input shape:
        `(batch, rows, cols, channels)`, an NHWC map at stride `input_stride`.

    Returns:
        A list of `(batch, rows_i, cols_i, out_channels)` maps, finest first,
        at the strides `output_strides`.

    Example:

    >>> import numpy as np
    >>> pyramid = SimpleFeaturePyramid(input_stride=16, out_channels=8)
    >>> maps = pyramid(np.zeros((1, 4, 6, 32), "float32"))  # a 64x96 image
    >>> [tuple(m.shape) for m in maps]
    [(1, 16, 24, 8), (1, 8, 12, 8), (1, 4, 6, 8), (1, 2, 3, 8)]
    >>> pyramid.output_strides
    (4, 8, 16, 32)
    >>> patch14 = SimpleFeaturePyramid(input_stride=14, out_channels=8)
    >>> [tuple(m.shape)[1] for m in patch14(np.zeros((1, 16, 16, 32), "float32"))]
    [56, 28, 14, 7]

    Reference:
        Li, Mao, Girshick, He, "Exploring Plain Vision Transformer Backbones
        for Object Detection", ECCV 2022, arXiv:2203.16527.
    """

    def __init__(
        self,
        input_stride,
        out_channels=256,
        strides=PYRAMID_STRIDES,
        top_block=False,
        match_strides=True,
        norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.input_stride = _check_input_stride(input_stride)
        self.out_channels = check_positive_int(out_channels, "out_channels")
        self.strides = _check_strides(strides)
        self.top_block = check_bool(top_block, "top_block")
        self.match_strides = check_bool(match_strides, "match_strides")
        self.norm_epsilon = check_positive_float(norm_epsilon, "norm_epsilon")

    def _exponent(self, stride):
        """`k` of the `2**k` rescaling towards `stride`."""
        return round(math.log2(self.input_stride / stride))

    def _resized(self, stride):
        return self.match_strides and 2.0 ** self._exponent(stride) != self.input_stride / stride

    @property
    def output_strides(self):
        """The stride of each output level, finest first (floats where not whole)."""
        strides = []
        for stride in self.strides:
            if self.match_strides:
                strides.append(stride)
            else:
                value = self.input_stride / 2.0 ** self._exponent(stride)
                strides.append(int(value) if value == int(value) else value)
        if self.top_block:
            strides.append(2 * strides[-1])
        return tuple(strides)

    def _norm(self, name):
        return keras.layers.LayerNormalization(
            epsilon=self.norm_epsilon, name=name, dtype=self.dtype_policy
        )

    def _conv(self, filters, size, name):
        return keras.layers.Conv2D(
            filters, size, padding="same", use_bias=False, data_format=NHWC, name=name,
            dtype=self.dtype_policy,
        )

    def build(self, input_shape):
        channels = input_shape[-1]
        if channels is None:
            raise ValueError(
                f"SimpleFeaturePyramid needs a known channel count. Received: input_shape={input_shape}"
            )
        self.levels = []
        for stride in self.strides:
            shape = tuple(input_shape)
            level = {"rescale": [], "stride": stride}
            k = self._exponent(stride)
            for step in range(k):
                if step:
                    norm = self._norm(f"stride{stride}_up_norm_{step - 1}")
                    norm.build(shape)
                    level["rescale"] += [norm, keras.layers.Activation("gelu", dtype=self.dtype_policy)]
                deconv = keras.layers.Conv2DTranspose(
                    max(channels // 2 ** (step + 1), 1), 2, strides=2, data_format=NHWC,
                    name=f"stride{stride}_up_{step}", dtype=self.dtype_policy,
                )
                deconv.build(shape)
                shape = tuple(deconv.compute_output_shape(shape))
                level["rescale"].append(deconv)
            if k < 0:
                level["pool"] = keras.layers.MaxPooling2D(
                    2**-k, strides=2**-k, data_format=NHWC, name=f"stride{stride}_pool",
                    dtype=self.dtype_policy,
                )
            level["lateral"] = self._conv(self.out_channels, 1, f"stride{stride}_lateral")
            level["lateral"].build(shape[:-1] + (shape[-1],))
            level["lateral_norm"] = self._norm(f"stride{stride}_lateral_norm")
            level["output"] = self._conv(self.out_channels, 3, f"stride{stride}_output")
            level["output_norm"] = self._norm(f"stride{stride}_output_norm")
            out_shape = shape[:-1] + (self.out_channels,)
            for name in ("lateral_norm", "output", "output_norm"):
                level[name].build(out_shape)
            self.levels.append(level)
        if self.top_block:
            self.top_pool = keras.layers.MaxPooling2D(
                1, strides=2, data_format=NHWC, name="top_pool", dtype=self.dtype_policy
            )
        self.built = True

    def _size(self, size, stride):
        """Rows (or columns) of the level of `stride` for an input of `size`."""
        if size is None:
            return None
        return -(-size * self.input_stride // stride)

    def _pad_to_multiple(self, x, size):
        """Pads the bottom and right edges with -inf up to a multiple of `size`.

        Windows then start at the first row and column, as the pixels of the
        coarser level cover the image (Keras' "same" pooling would centre
        the padding and shift the windows of odd sizes).
        """
        rows, cols = ops.shape(x)[1], ops.shape(x)[2]
        pads = [[0, 0], [0, (-rows) % size], [0, (-cols) % size], [0, 0]]
        return kernels.pad(x, pads, constant_values=float("-inf"))

    def call(self, x):
        outputs = []
        for level in self.levels:
            y = x
            for layer in level["rescale"]:
                y = layer(y)
            if "pool" in level:
                y = level["pool"](self._pad_to_multiple(y, level["pool"].pool_size[0]))
            if self._resized(level["stride"]):
                rows, cols = ops.shape(x)[1], ops.shape(x)[2]
                size = (self._size(rows, level["stride"]), self._size(cols, level["stride"]))
                y = ops.image.resize(
                    y, size, interpolation="bilinear", antialias=False, data_format=NHWC
                )
            y = level["lateral_norm"](level["lateral"](y))
            outputs.append(level["output_norm"](level["output"](y)))
        if self.top_block:
            outputs.append(self.top_pool(outputs[-1]))
        return outputs

    def compute_output_shape(self, input_shape):
        batch, rows, cols = input_shape[0], input_shape[1], input_shape[2]
        shapes = []
        for stride in self.strides:
            if self.match_strides:
                size = (self._size(rows, stride), self._size(cols, stride))
            else:
                k = self._exponent(stride)
                size = tuple(
                    None if n is None else (n * 2**k if k >= 0 else -(-n // 2**-k))
                    for n in (rows, cols)
                )
            shapes.append((batch,) + size + (self.out_channels,))
        if self.top_block:
            last = shapes[-1]
            shapes.append(
                (batch,) + tuple(None if n is None else -(-n // 2) for n in last[1:3])
                + (self.out_channels,)
            )
        return shapes

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "input_stride": self.input_stride,
                "out_channels": self.out_channels,
                "strides": list(self.strides),
                "top_block": self.top_block,
                "match_strides": self.match_strides,
                "norm_epsilon": self.norm_epsilon,
            }
        )
        return config
