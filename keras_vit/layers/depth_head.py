"""Depth heads on a DPT neck: `DepthHead` (convolutions to depth) and
`DepthBins` (CHMv2's depth from bin logits).

`DepthHead` is DPT's head: a 3x3 convolution halving the width, a bilinear
(corner-aligned) resize, a 3x3 convolution to `hidden_size` with ReLU, a
1x1 convolution to `outputs`, then the output activation scaled by
`max_depth`. The resize doubles the map (DPT, CHMv2) or goes to the image
size (Depth Anything); DPT's large models add a 3x3 projection with ReLU
first. The maps are NHWC.
"""

import math

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.layers.dpt import NHWC, _conv
from keras_vit.layers.resize import scaled_size, spatial_size
from keras_vit.validation import check_bool, check_choice, check_positive_float, check_positive_int

HEAD_UPSAMPLES = ("double", "image")
HEAD_ACTIVATIONS = (None, "relu", "sigmoid")
BIN_STRATEGIES = ("linear", "log", "chmv2_mixlog")
BIN_NORMALIZATIONS = ("linear", "softmax", "sigmoid", "chmv2_mixlog")


@keras.saving.register_keras_serializable(package="keras_vit")
class DepthHead(keras.layers.Layer):
    """Convolutions from the last fused DPT map to depth.

    Args:
        fusion_size: int, the width of its input.
        hidden_size: int, default 32: the width after the resize.
        outputs: int, default 1: output channels (1 for a depth map, the
            number of bins for CHMv2).
        upsample: "double" (default: 2x, DPT and CHMv2) or "image" (to the
            size of the images given at call: Depth Anything's patch grid
            times the patch size).
        projection: bool, default False: a 3x3 convolution and ReLU first
            (DPT's `add_projection`; sublayer `projection`).
        activation: "relu" (default), "sigmoid" or None: the output's.
        max_depth: float, default 1: the activation's output is scaled by
            it (Depth Anything's metric models: sigmoid times the largest
            depth).

    Call arguments:
        x: `(batch, h, w, fusion_size)`.
        images: for `upsample="image"`, the images `(batch, height, width,
            channels)` (only their size is read).

    Returns:
        `(batch, H, W, outputs)`.

    Example:

    >>> import numpy as np
    >>> head = DepthHead(8, hidden_size=4)
    >>> tuple(head(np.zeros((1, 6, 5, 8), "float32")).shape)
    (1, 12, 10, 1)
    """

    def __init__(self, fusion_size, hidden_size=32, outputs=1, upsample="double", projection=False,
                 activation="relu", max_depth=1.0, **kwargs):
        super().__init__(**kwargs)
        self.fusion_size = check_positive_int(fusion_size, "fusion_size")
        self.hidden_size = check_positive_int(hidden_size, "hidden_size")
        self.outputs = check_positive_int(outputs, "outputs")
        self.upsample = check_choice(upsample, HEAD_UPSAMPLES, "upsample")
        self.projection = check_bool(projection, "projection")
        self.activation = check_choice(activation, HEAD_ACTIVATIONS, "activation")
        self.max_depth = check_positive_float(max_depth, "max_depth")
        if self.fusion_size < 2:
            raise ValueError(f"`fusion_size` must be at least 2 (halved by the head). Received: {fusion_size}")

    def build(self, input_shape):
        shape = (None, None, None, self.fusion_size)
        self.projection_conv = None
        if self.projection:
            self.projection_conv = _conv(self.fusion_size, 3, "projection", self.dtype_policy)
            self.projection_conv.build(shape)
        self.conv_1 = _conv(self.fusion_size // 2, 3, "conv_1", self.dtype_policy)
        self.conv_1.build(shape)
        self.conv_2 = _conv(self.hidden_size, 3, "conv_2", self.dtype_policy)
        self.conv_2.build((None, None, None, self.fusion_size // 2))
        self.conv_3 = _conv(self.outputs, 1, "conv_3", self.dtype_policy)
        self.conv_3.build((None, None, None, self.hidden_size))
        self.built = True

    def call(self, x, images=None):
        if self.projection_conv is not None:
            x = ops.relu(kernels.call_sublayer(self.projection_conv, x))
        x = kernels.call_sublayer(self.conv_1, x)
        if self.upsample == "image":
            if images is None:
                raise ValueError(f"DepthHead {self.name!r} (upsample='image') needs the `images` at call.")
            size = spatial_size(images)
        else:
            size = scaled_size(x, 2)
        x = kernels.conv_relu_conv(x, self.conv_2, self.conv_3, size=size)
        if self.activation == "relu":
            x = ops.relu(x)
        elif self.activation == "sigmoid":
            x = ops.sigmoid(x)
        return x if self.max_depth == 1.0 else x * ops.cast(self.max_depth, x.dtype)

    def compute_output_shape(self, input_shape, images=None):
        if self.upsample == "image":
            size = (None, None) if images is None else tuple(images[1:3])
        else:
            size = tuple(None if s is None else 2 * s for s in input_shape[1:3])
        return (input_shape[0], *size, self.outputs)

    def compute_output_spec(self, x, images=None):
        shape = self.compute_output_shape(x.shape, None if images is None else images.shape)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            fusion_size=self.fusion_size, hidden_size=self.hidden_size, outputs=self.outputs,
            upsample=self.upsample, projection=self.projection, activation=self.activation,
            max_depth=self.max_depth,
        )
        return config


def depth_bins(count, min_depth, max_depth, strategy):
    """The `count` bin centres of CHMv2's head, float32 `(count,)`.

    "linear" and "log" space them evenly in depth or log-depth; "chmv2_mixlog"
    blends a log and a linear spacing up to `max_depth / 8` (the log one
    weighs 1 at the first bin and 0 at the last), the output being scaled
    by 8 afterwards.

    Example:

    >>> import numpy as np
    >>> np.round(np.asarray(depth_bins(3, 1.0, 4.0, "linear")), 3).tolist()
    [1.0, 2.5, 4.0]
    """
    check_choice(strategy, BIN_STRATEGIES, "bins_strategy")
    step = ops.arange(0, count, dtype="float32") / float(max(count - 1, 1))
    if strategy == "linear":
        return min_depth + (max_depth - min_depth) * step
    if strategy == "log":
        return ops.exp(math.log(min_depth) + (math.log(max_depth) - math.log(min_depth)) * step)
    top = max_depth / 8.0
    linear = min_depth + (top - min_depth) * step
    log = ops.exp(math.log(min_depth) + (math.log(top) - math.log(min_depth)) * step)
    weight = 1.0 - step
    return weight * log + (1.0 - weight) * linear


@keras.saving.register_keras_serializable(package="keras_vit")
class DepthBins(keras.layers.Layer):
    """CHMv2's depth from per-pixel bin logits (`CHMv2FeaturesToDepth`).

    The logits `(batch, H, W, bins)` become weights over the bins
    (`normalization`: "chmv2_mixlog", the default, a ReLU then a small
    shift and a division by the sum; "linear" ReLU + 0.1; "softmax";
    "sigmoid"), and the depth is the weighted sum of the bin centres
    (`depth_bins`; times 8 for "chmv2_mixlog"). With one bin the depth is
    `relu(logit) + min_depth`.

    Args:
        min_depth: float, default 0.001.
        max_depth: float, default 96.
        strategy: the bins' spacing, one of `BIN_STRATEGIES`, default
            "chmv2_mixlog".
        normalization: one of `BIN_NORMALIZATIONS`, default "chmv2_mixlog".

    Returns:
        `(batch, H, W)` depths, float32.

    Example:

    >>> import numpy as np
    >>> y = DepthBins(1.0, 4.0, "linear", "softmax")(np.zeros((1, 2, 2, 3), "float32"))
    >>> np.round(np.asarray(y), 3).tolist()
    [[[2.5, 2.5], [2.5, 2.5]]]
    """

    def __init__(self, min_depth=0.001, max_depth=96.0, strategy="chmv2_mixlog",
                 normalization="chmv2_mixlog", **kwargs):
        super().__init__(**kwargs)
        self.min_depth = check_positive_float(min_depth, "min_depth")
        self.max_depth = check_positive_float(max_depth, "max_depth")
        self.strategy = check_choice(strategy, BIN_STRATEGIES, "bins_strategy")
        self.normalization = check_choice(normalization, BIN_NORMALIZATIONS, "norm_strategy")

    def call(self, logits):
        logits = ops.cast(logits, "float32")
        count = logits.shape[-1]
        if count == 1:
            return ops.relu(logits[..., 0]) + self.min_depth
        bins = depth_bins(count, self.min_depth, self.max_depth, self.strategy)
        if self.normalization == "chmv2_mixlog":
            return self._mixlog(logits, bins)
        if self.normalization == "linear":
            weights = ops.relu(logits) + 0.1
            weights = weights / ops.sum(weights, axis=-1, keepdims=True)
        elif self.normalization == "softmax":
            weights = ops.softmax(logits, axis=-1)
        else:
            weights = ops.sigmoid(logits)
            weights = weights / ops.sum(weights, axis=-1, keepdims=True)
        return ops.sum(weights * bins, axis=-1)

    @staticmethod
    def _mixlog(logits, bins):
        positive = ops.relu(logits)
        # `amin`: Keras' torch `min` reads a `values` attribute torch.compile cannot trace.
        low = ops.amin(positive, axis=-1, keepdims=True)
        shift = ops.clip(-low, 0.0, 1e-4) + 1e-8
        positive = positive + shift
        total = ops.maximum(ops.sum(positive, axis=-1, keepdims=True), 1e-12)
        depth = ops.sum((positive / total) * ops.maximum(bins, 1e-12), axis=-1)
        return ops.maximum(depth, 1e-12) * 8.0

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1])

    def compute_output_spec(self, logits):
        return keras.KerasTensor(tuple(logits.shape[:-1]), dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            min_depth=self.min_depth, max_depth=self.max_depth, strategy=self.strategy,
            normalization=self.normalization,
        )
        return config


__all__ = ["BIN_NORMALIZATIONS", "BIN_STRATEGIES", "DepthBins", "DepthHead", "depth_bins", "NHWC"]
