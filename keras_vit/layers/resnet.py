"""ResNet (BiT) layers of the hybrid ViTs: `StdConv2D`, `BottleneckUnit`,
`ResNetStage` and `resnet_backbone`.

Numerics follow the official `vit_jax/models_resnet.py`: weight-standardised
convolutions (eps 1e-5 added to the population std), GroupNorm with 32 groups
and eps 1e-6, TF-style "SAME" padding for strided convolutions and the stem's
max-pool.
"""

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.validation import (
    check_bool,
    check_int,
    check_positive_float,
    check_positive_int,
    pair,
)

GROUPS = 32
NORM_EPSILON = 1e-6
CONV_EPSILON = 1e-5


def _check_groups(channels, groups, what):
    if channels % groups:
        raise ValueError(
            f"`{what}` must be a multiple of the GroupNorm groups ({groups}). "
            f"Received: {what}={channels}"
        )


@keras.saving.register_keras_serializable(package="keras_vit")
class GroupNorm(keras.layers.GroupNormalization):
    """`keras.layers.GroupNormalization` with a 4D graph for exporters.

    Outside `keras_vit.kernels.export_mode()` it is Keras' layer,
    unchanged. While a model is traced for an exporter, the statistics are
    taken on a `(batch, height * width, groups, channels // groups)` view
    with products instead of powers: Keras' 5D view and `square` become a 5D
    `POW` in LiteRT, which its converter cannot lower (litert-torch fails on
    every hybrid). Same arguments, weights and outputs (tested).

    Example:

    >>> import numpy as np
    >>> from keras_vit import kernels
    >>> x = np.random.default_rng(0).normal(size=(1, 4, 4, 64)).astype("float32")
    >>> norm = GroupNorm(groups=32, epsilon=1e-6)
    >>> plain = keras.ops.convert_to_numpy(norm(x))
    >>> with kernels.export_mode():
    ...     portable = keras.ops.convert_to_numpy(norm(x))
    >>> bool(np.allclose(plain, portable, atol=1e-5))
    True
    """

    def call(self, inputs):
        if not kernels.exporting() or self.axis not in (-1, 3) or len(inputs.shape) != 4:
            return super().call(inputs)
        _, height, width, channels = inputs.shape
        dtype = inputs.dtype
        x = ops.cast(inputs, "float32")
        x = ops.reshape(x, (-1, height * width, self.groups, channels // self.groups))
        mean = ops.mean(x, axis=(1, 3), keepdims=True)
        centred = x - mean
        variance = ops.mean(centred * centred, axis=(1, 3), keepdims=True)
        x = centred * ops.rsqrt(variance + self.epsilon)
        x = ops.reshape(x, (-1, height, width, channels))
        if self.scale:
            x = x * ops.cast(self.gamma, "float32")
        if self.center:
            x = x + ops.cast(self.beta, "float32")
        return ops.cast(x, dtype)


@keras.saving.register_keras_serializable(package="keras_vit")
class MaxPool2D(keras.layers.MaxPooling2D):
    """`keras.layers.MaxPooling2D`, channels last, with a sliced graph for exporters.

    Outside `keras_vit.kernels.export_mode()` it is Keras' layer,
    except that `data_format` defaults to "channels_last" rather than to
    `keras.config.image_data_format()`: keras_vit's models are NHWC. While
    a model is traced for an exporter, the pool is the maximum of
    `pool_size` strided slices of the padded input: jax2onnx turns jax's 4D
    window reduction into an ONNX `MaxPool` over four "spatial" axes, which
    neither ONNX Runtime nor OpenVINO runs. Same arguments and outputs
    (tested).

    Example:

    >>> import numpy as np
    >>> from keras_vit import kernels
    >>> x = np.arange(2 * 5 * 5 * 3, dtype="float32").reshape(2, 5, 5, 3)
    >>> pool = MaxPool2D(3, strides=2, padding="same")
    >>> with kernels.export_mode():
    ...     sliced = keras.ops.convert_to_numpy(pool(x))
    >>> bool((sliced == keras.ops.convert_to_numpy(pool(x))).all()), sliced.shape
    (True, (2, 3, 3, 3))
    """

    def __init__(self, pool_size=2, strides=None, padding="valid", data_format="channels_last", **kwargs):
        super().__init__(pool_size, strides=strides, padding=padding, data_format=data_format, **kwargs)

    def call(self, inputs):
        if not kernels.exporting() or self.data_format != "channels_last":
            return super().call(inputs)
        (ph, pw), (sh, sw) = self.pool_size, self.strides
        _, height, width, _ = inputs.shape
        if self.padding == "same":
            out_h, out_w = -(-height // sh), -(-width // sw)
            pad_h = max((out_h - 1) * sh + ph - height, 0)
            pad_w = max((out_w - 1) * sw + pw - width, 0)
            inputs = kernels.pad(
                inputs,
                ((0, 0), (pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2), (0, 0)),
                constant_values=float("-inf"),
            )
        else:
            out_h, out_w = (height - ph) // sh + 1, (width - pw) // sw + 1
        result = None
        for i in range(ph):
            for j in range(pw):
                window = inputs[:, i : i + (out_h - 1) * sh + 1 : sh, j : j + (out_w - 1) * sw + 1 : sw, :]
                result = window if result is None else ops.maximum(result, window)
        return result


def group_norm(name, groups=GROUPS, epsilon=NORM_EPSILON, zero_init=False, dtype=None):
    """A `GroupNorm` (Keras' `GroupNormalization`) with the official BiT settings.

    Args:
        name: layer name, e.g. "gn_root".
        groups: int, default 32.
        epsilon: float, default 1e-6 (Flax's `nn.GroupNorm` default; Keras'
            own default, 1e-3, would change the outputs).
        zero_init: bool, default False. True starts the scale at 0, as the
            official code does for the last norm of each residual branch.
        dtype: dtype or dtype policy.

    Returns:
        A `GroupNorm` layer with weights `gamma` and `beta` of shape
        `(channels,)` (the checkpoint's `scale` and `bias`).
    """
    return GroupNorm(
        groups=groups,
        epsilon=epsilon,
        gamma_initializer="zeros" if zero_init else "ones",
        name=name,
        dtype=dtype,
    )


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Conv2D):
    """2D convolution with weight standardisation (arXiv:1903.10520, BiT).

    The stored `kernel` is the raw parameter; each call uses
    `(kernel - mean) / (std + epsilon)`, with the mean and the population
    standard deviation taken per output channel over (height, width,
    input channels). Padding defaults to "same", which in Keras is the
    TF/Flax "SAME" rule (the extra pixel goes at the end), as in the official
    checkpoints.

    Args:
        filters: int, output channels.
        kernel_size: int or `(kh, kw)`.
        strides: int or `(sh, sw)`, default 1.
        padding: "same" (default) or "valid".
        epsilon: float, default 1e-5: added to the standard deviation.
        variance_epsilon: bool, default False: add `epsilon` to the variance
            instead, `(kernel - mean) / sqrt(var + epsilon)` (timm's
            `StdConv2dSame`).
        standardize: bool, default True. False makes a plain convolution of
            the stored kernel: for kernels standardised once, ahead of
            inference (`keras_vit.ViT.for_inference`).
        use_bias: bool, default False (the official convolutions have none).
        kernel_initializer: default "lecun_normal" (Flax's default).
        data_format: "channels_last", the only value: unlike Keras' `Conv2D`
            it does not follow `keras.config.image_data_format()`.
        **kwargs: any other `keras.layers.Conv2D` argument.

    Input shape:
        `(batch, height, width, channels)`.

    Returns:
        `(batch, out_height, out_width, filters)`.

    Example:

    >>> import numpy as np
    >>> conv = StdConv2D(8, 3, strides=2)
    >>> tuple(conv(np.ones((1, 7, 7, 4), "float32")).shape)
    (1, 4, 4, 8)
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding="same",
        epsilon=CONV_EPSILON,
        standardize=True,
        use_bias=False,
        kernel_initializer="lecun_normal",
        variance_epsilon=False,
        data_format="channels_last",
        **kwargs,
    ):
        check_positive_int(filters, "filters")
        pair(kernel_size, "kernel_size")
        pair(strides, "strides")
        if padding not in ("same", "valid"):
            raise ValueError(
                "`padding` must be 'same' or 'valid'. "
                f"Received: padding={padding!r}"
            )
        if data_format != "channels_last":
            raise ValueError(
                "`data_format` must be 'channels_last' (whatever "
                "`keras.config.image_data_format()` says). "
                f"Received: data_format={data_format!r}"
            )
        super().__init__(
            filters,
            kernel_size,
            strides=strides,
            padding=padding,
            data_format=data_format,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            **kwargs,
        )
        self.epsilon = check_positive_float(epsilon, "epsilon")
        self.standardize = check_bool(standardize, "standardize")
        self.variance_epsilon = check_bool(variance_epsilon, "variance_epsilon")

    def standardized_kernel(self, kernel):
        """Returns `kernel` standardised per output channel.

        The statistics are taken in float32 whatever the compute dtype.
        """
        dtype = kernel.dtype
        kernel = ops.cast(kernel, "float32")
        mean = ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
        if self.variance_epsilon:
            scale = ops.sqrt(ops.var(kernel, axis=(0, 1, 2), keepdims=True) + self.epsilon)
        else:
            scale = ops.std(kernel, axis=(0, 1, 2), keepdims=True) + self.epsilon
        return ops.cast((kernel - mean) / scale, dtype)

    def convolution_op(self, inputs, kernel):
        if self.standardize:
            kernel = self.standardized_kernel(kernel)
        return super().convolution_op(inputs, kernel)

    def get_config(self):
        config = super().get_config()
        config["epsilon"] = self.epsilon
        config["standardize"] = self.standardize
        config["variance_epsilon"] = self.variance_epsilon
        return config


class _BottleneckLayer(keras.layers.Layer):
    """What a bottleneck unit and a stage of them share: their arguments,
    checks, config and output shape. Subclasses build and call."""

    def __init__(
        self,
        filters,
        strides=1,
        groups=GROUPS,
        norm_epsilon=NORM_EPSILON,
        conv_epsilon=CONV_EPSILON,
        standardize=True,
        variance_epsilon=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.variance_epsilon = check_bool(variance_epsilon, "variance_epsilon")
        self.filters = check_positive_int(filters, "filters")
        self.strides = check_int(strides, "strides", minimum=1, maximum=2)
        self.groups = check_positive_int(groups, "groups")
        _check_groups(self.filters, self.groups, "filters")
        self.norm_epsilon = check_positive_float(norm_epsilon, "norm_epsilon")
        self.conv_epsilon = check_positive_float(conv_epsilon, "conv_epsilon")
        self.standardize = check_bool(standardize, "standardize")
        self.input_spec = keras.layers.InputSpec(ndim=4)

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape
        s = self.strides
        height = None if height is None else -(-height // s)
        width = None if width is None else -(-width // s)
        return (batch, height, width, 4 * self.filters)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "strides": self.strides,
                "groups": self.groups,
                "norm_epsilon": self.norm_epsilon,
                "conv_epsilon": self.conv_epsilon,
                "standardize": self.standardize,
                "variance_epsilon": self.variance_epsilon,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class BottleneckUnit(_BottleneckLayer):
    """Bottleneck ResNet unit with StdConv and GroupNorm (as in BiT).

    `relu(shortcut + gn3(conv3(relu(gn2(conv2(relu(gn1(conv1(x)))))))))`:
    a 1x1 conv to `filters`, a 3x3 conv with the unit's stride, and a 1x1
    conv to `4 * filters`. The shortcut is `gn_proj(conv_proj(x))` (1x1, same
    stride) when the stride is not 1 or the input does not have
    `4 * filters` channels, else the identity. Sublayer names equal the
    official checkpoint keys (`conv1`, `gn1`, ..., `conv_proj`, `gn_proj`).

    Args:
        filters: int, bottleneck width `F`; the output has `4 * F` channels.
            Must be a multiple of `groups`.
        strides: 1 (default) or 2, the stride of `conv2` and `conv_proj`.
        groups: int, GroupNorm groups, default 32.
        norm_epsilon: float, GroupNorm epsilon, default 1e-6.
        conv_epsilon: float, weight-standardisation epsilon, default 1e-5.
        standardize: bool, default True: whether the convolutions standardise
            their kernels (see `StdConv2D`).
        variance_epsilon: bool, default False: `conv_epsilon` is added to
            the kernels' variance (see `StdConv2D`).

    Input shape:
        `(batch, height, width, channels)`.

    Returns:
        `(batch, ceil(height / strides), ceil(width / strides), 4 * filters)`.

    Example:

    >>> import numpy as np
    >>> unit = BottleneckUnit(32, strides=2)
    >>> tuple(unit(np.ones((1, 5, 6, 64), "float32")).shape)
    (1, 3, 3, 128)
    """

    def _conv(self, filters, size, strides, name):
        return StdConv2D(
            filters,
            size,
            strides=strides,
            epsilon=self.conv_epsilon,
            variance_epsilon=self.variance_epsilon,
            standardize=self.standardize,
            name=name,
            dtype=self.dtype_policy,
        )

    def _norm(self, name, zero_init=False):
        return group_norm(
            name, self.groups, self.norm_epsilon, zero_init, dtype=self.dtype_policy
        )

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        out = 4 * self.filters
        self.has_projection = self.strides != 1 or input_shape[-1] != out
        self.conv1 = self._conv(self.filters, 1, 1, "conv1")
        self.gn1 = self._norm("gn1")
        self.conv2 = self._conv(self.filters, 3, self.strides, "conv2")
        self.gn2 = self._norm("gn2")
        self.conv3 = self._conv(out, 1, 1, "conv3")
        # Zero scale: each residual branch starts as the identity (official).
        self.gn3 = self._norm("gn3", zero_init=True)
        shape = input_shape
        for conv, norm in ((self.conv1, self.gn1), (self.conv2, self.gn2), (self.conv3, self.gn3)):
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            norm.build(shape)
        if self.has_projection:
            self.conv_proj = self._conv(out, 1, self.strides, "conv_proj")
            self.gn_proj = self._norm("gn_proj")
            self.conv_proj.build(input_shape)
            self.gn_proj.build(self.conv_proj.compute_output_shape(input_shape))
        self.built = True

    def call(self, x):
        shortcut = x
        if self.has_projection:
            shortcut = self.gn_proj(self.conv_proj(x))
        y = ops.relu(self.gn1(self.conv1(x)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return ops.relu(shortcut + y)


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetStage(_BottleneckLayer):
    """A stage of `num_units` bottleneck units (`unit1`, `unit2`, ...).

    Only the first unit strides (and projects its shortcut); the stage's
    variables are named `<stage name>/unit{u}/conv1/kernel` etc., the
    official `block{s}/unit{u}/...` keys when the stage is named `block{s}`.

    Args:
        filters: int, bottleneck width `F` of every unit (output `4 * F`).
        num_units: int >= 1, number of units.
        strides: 1 (default) or 2, the stride of the first unit.
        **kwargs: `groups`, `norm_epsilon`, `conv_epsilon`, `standardize`
            as in `BottleneckUnit`, and the usual layer arguments.

    Input shape and returns: as a `BottleneckUnit` with these `filters` and
    `strides`.

    Example:

    >>> import numpy as np
    >>> stage = ResNetStage(32, num_units=2, strides=2, name="block2")
    >>> tuple(stage(np.ones((1, 8, 8, 64), "float32")).shape)
    (1, 4, 4, 128)
    """

    def __init__(self, filters, num_units, strides=1, **kwargs):
        super().__init__(filters, strides=strides, **kwargs)
        self.num_units = check_positive_int(num_units, "num_units")

    def build(self, input_shape):
        shape = tuple(input_shape)
        self.units = []
        for u in range(self.num_units):
            unit = BottleneckUnit(
                self.filters,
                strides=self.strides if u == 0 else 1,
                groups=self.groups,
                norm_epsilon=self.norm_epsilon,
                conv_epsilon=self.conv_epsilon,
                variance_epsilon=self.variance_epsilon,
                standardize=self.standardize,
                name=f"unit{u + 1}",
                dtype=self.dtype_policy,
            )
            unit.build(shape)
            shape = unit.compute_output_shape(shape)
            self.units.append(unit)
        self.built = True

    def call(self, x):
        for unit in self.units:
            x = unit(x)
        return x

    def get_config(self):
        config = super().get_config()
        config["num_units"] = self.num_units
        return config


# The numerics of the hybrids' ResNet by convention: the official vit_jax
# code's (GroupNorm epsilon 1e-6, kernels divided by `std + 1e-5`) and timm's
# (`GroupNormAct` 1e-5, `StdConv2dSame(eps=1e-8)`: by `sqrt(var + 1e-8)`).
RESNET_NUMERICS = {
    "official": dict(norm_epsilon=NORM_EPSILON, conv_epsilon=CONV_EPSILON, variance_epsilon=False),
    "timm": dict(norm_epsilon=1e-5, conv_epsilon=1e-8, variance_epsilon=True),
}


def resnet_backbone(x, resnet_layers, resnet_width=1.0, dtype=None, standardize=True, numerics="official"):
    """Applies the hybrid ViT's ResNet to the symbolic tensor `x`.

    The stem (`conv_root` 7x7/2 StdConv, `gn_root`, ReLU, 3x3/2 SAME
    max-pool) is made of top-level layers rather than one wrapper layer, so
    that its variable paths are exactly the checkpoint's `conv_root/kernel`
    and `gn_root/...`. Then one `ResNetStage` per entry of `resnet_layers`,
    named `block1`, `block2`, ..., with bottleneck widths
    `int(64 * resnet_width) * 2**s` and stride 2 from the second stage on.

    Args:
        x: `(batch, height, width, channels)` symbolic tensor.
        resnet_layers: sequence of units per stage; `()` keeps the stem only.
        resnet_width: float, width factor, default 1.0.
        dtype: dtype or dtype policy of the layers.
        standardize: bool, default True: whether the convolutions standardise
            their kernels (see `StdConv2D`).
        numerics: "official" (default) or "timm": the norms' and weight
            standardisation's epsilons of `RESNET_NUMERICS`.

    Returns:
        The feature map, downsampled by
        `keras_vit.architectures.stem_stride(resnet_layers)`.
    """
    width = int(64 * resnet_width)
    eps = RESNET_NUMERICS[numerics]
    x = StdConv2D(
        width, 7, strides=2, epsilon=eps["conv_epsilon"], variance_epsilon=eps["variance_epsilon"],
        standardize=standardize, name="conv_root", dtype=dtype,
    )(x)
    x = group_norm("gn_root", epsilon=eps["norm_epsilon"], dtype=dtype)(x)
    x = keras.layers.ReLU(name="relu_root", dtype=dtype)(x)
    x = MaxPool2D(3, strides=2, padding="same", name="pool_root", dtype=dtype)(x)
    for s, units in enumerate(resnet_layers):
        x = ResNetStage(
            width * 2**s,
            units,
            strides=1 if s == 0 else 2,
            standardize=standardize,
            name=f"block{s + 1}",
            **eps,
            dtype=dtype,
        )(x)
    return x
