"""DPT's neck: `DptNeck` (reassemble and fusion) and its `ResidualConvUnit`.

Dense Prediction Transformers (Ranftl et al. 2021, arXiv:2103.13413) turn
the tokens of chosen encoder blocks into an image-like pyramid and fuse it
back, coarse to fine:

1. reassemble each level: the class token is read out (dropped, added or
   concatenated and projected), the patch tokens laid on their grid,
   projected by a 1x1 convolution and resized by a factor (transposed
   convolution to go up, a strided 3x3 convolution to go down);
2. a 3x3 convolution without bias to the fusion width;
3. fusion blocks from the coarsest level: the running map plus a residual
   unit of the level's map, a second residual unit, a 2x bilinear resize
   (corner-aligned) and a 1x1 convolution. The convolution runs before the
   resize, on a quarter of the pixels: a per-pixel affine map commutes with
   a resize whose weights sum to one, so the result is the same.

Depth Anything, DPT and CHMv2 use this neck with small differences, each a
setting here (their values, per model, are the table in
`keras_vit.tasks.depth`): where the fusion resize goes (`fusion_upsample`),
whether the first fusion block carries an unused residual unit
(`first_fusion_unit`), batch norm in the residual units, and the leading
levels of a hybrid that are ResNet maps already (`skip_levels`).

The maps are NHWC whatever `keras.config.image_data_format()` says.
"""

import keras
from keras import ops

from keras_vit import kernels

from keras_vit.layers.resize import resize_bilinear, scaled_size, spatial_size
from keras_vit.validation import check_bool, check_choice, check_int, check_positive_int

READOUTS = ("ignore", "add", "project")
FUSION_UPSAMPLES = ("double", "next")
NHWC = "channels_last"


def _conv(filters, size, name, dtype, use_bias=True, strides=1, padding="same"):
    return keras.layers.Conv2D(
        filters, size, strides=strides, padding=padding, use_bias=use_bias,
        data_format=NHWC, name=name, dtype=dtype,
    )


def check_factors(factors, levels):
    """Reassemble factors: one positive number per level, each a power of two.

    Example:

    >>> check_factors((4, 2, 1, 0.5), 4)
    (4.0, 2.0, 1.0, 0.5)
    """
    try:
        values = tuple(float(f) for f in factors)
    except (TypeError, ValueError):
        values = ()
    ok = len(values) == levels and all(
        v > 0 and (v >= 1 and v == int(v) or v < 1 and (1 / v) == int(1 / v)) for v in values
    )
    if not ok:
        raise ValueError(
            f"`reassemble_factors` must hold {levels} numbers, each an int >= 1 (upsampling) or "
            f"1/n for an int n (downsampling). Received: reassemble_factors={factors!r}"
        )
    return values


def check_channels(channels, name="neck_channels"):
    """A non-empty tuple of positive ints."""
    try:
        values = tuple(channels)
    except TypeError:
        values = ()
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        raise ValueError(f"`{name}` must be a non-empty sequence of positive ints. Received: {name}={channels!r}")
    return values


@keras.saving.register_keras_serializable(package="keras_vit")
class ResidualConvUnit(keras.layers.Layer):
    """DPT's pre-activation residual unit: `x + conv(relu(conv(relu(x))))`.

    Both convolutions are 3x3 with "same" padding (sublayers `conv_1`,
    `conv_2`); with `batch_norm`, each is followed by a batch norm
    (`norm_1`, `norm_2`, epsilon 1e-5, PyTorch's).

    Args:
        channels: int, the width (input and output).
        batch_norm: bool, default False.
        use_bias: None (default: not `batch_norm`, DPT's rule) or bool.

    Example:

    >>> import numpy as np
    >>> tuple(ResidualConvUnit(4)(np.zeros((1, 5, 6, 4), "float32")).shape)
    (1, 5, 6, 4)
    """

    def __init__(self, channels, batch_norm=False, use_bias=None, **kwargs):
        super().__init__(**kwargs)
        self.channels = check_positive_int(channels, "channels")
        self.batch_norm = check_bool(batch_norm, "batch_norm")
        self.use_bias = (not self.batch_norm) if use_bias is None else check_bool(use_bias, "use_bias")

    def build(self, input_shape):
        shape = tuple(input_shape)
        self.conv_1 = _conv(self.channels, 3, "conv_1", self.dtype_policy, self.use_bias)
        self.conv_2 = _conv(self.channels, 3, "conv_2", self.dtype_policy, self.use_bias)
        self.norm_1 = self.norm_2 = None
        if self.batch_norm:
            norm = dict(epsilon=1e-5, momentum=0.9, dtype=self.dtype_policy)
            self.norm_1 = keras.layers.BatchNormalization(name="norm_1", **norm)
            self.norm_2 = keras.layers.BatchNormalization(name="norm_2", **norm)
        for layer in (self.conv_1, self.norm_1, self.conv_2, self.norm_2):
            if layer is not None:
                layer.build(shape[:-1] + (self.channels,))
        self.built = True

    def call(self, x, training=None):
        y = kernels.call_sublayer(self.conv_1, ops.relu(x))
        if self.norm_1 is not None:
            y = self.norm_1(y, training=training)
        y = kernels.call_sublayer(self.conv_2, ops.relu(y))
        if self.norm_2 is not None:
            y = self.norm_2(y, training=training)
        return x + y

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(channels=self.channels, batch_norm=self.batch_norm, use_bias=self.use_bias)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class DptNeck(keras.layers.Layer):
    """DPT's reassemble and fusion stages, from encoder features to fused maps.

    Called on `maps`, one per level: `(batch, h, w, D)` patch tokens on
    their grid (or, for the first `skip_levels`, a ResNet map `(batch, H, W,
    neck_channels[i])` taken as it is), and, unless `readout="ignore"`,
    `class_tokens`: one class token `(batch, D)` per level after the
    skipped ones.

    Args:
        hidden_size: int, the encoder's width `D`.
        neck_channels: ints, the channels of each level after its 1x1
            projection (transformers' `neck_hidden_sizes`,
            `post_process_channels`).
        reassemble_factors: numbers, one per level: the resize after the
            projection (4: transposed 4x4 convolution of stride 4; 1:
            none; 0.5: 3x3 convolution of stride 2).
        fusion_size: int, the width of the fusion blocks.
        readout: "ignore" (default: the class token is dropped), "add"
            (added to every patch token) or "project" (concatenated to
            every patch token, then a Dense back to `D` and the exact
            GELU; sublayers `readout_{i}`).
        fusion_upsample: "double" (default: every fusion block doubles its
            map, DPT and CHMv2) or "next" (to the size of the next finer
            level, and the last one doubles: Depth Anything).
        first_fusion_unit: bool, default True: the first fusion block holds
            a residual unit for the level map it never receives (DPT and
            Depth Anything keep its weights, unused); False: it has none
            (CHMv2).
        fusion_batch_norm: bool, default False: batch norm in the fusion
            blocks' residual units.
        fusion_bias: None (default: not `fusion_batch_norm`) or bool: biases
            of those units' convolutions.
        skip_levels: int, default 0: the leading levels that are ResNet maps
            already (a DPT hybrid's first two): no readout, projection or
            resize.

    Returns:
        A list of maps `(batch, h_i, w_i, fusion_size)`, one per fusion
        block, coarse to fine (the last is what the depth heads read).

    Example:

    >>> import numpy as np
    >>> neck = DptNeck(16, (4, 8), (2, 0.5), 8, readout="project")
    >>> maps = [np.zeros((1, 4, 4, 16), "float32")] * 2
    >>> tokens = [np.zeros((1, 16), "float32")] * 2
    >>> [tuple(m.shape) for m in neck(maps, class_tokens=tokens)]
    [(1, 4, 4, 8), (1, 8, 8, 8)]

    Reference:
        Ranftl et al., "Vision Transformers for Dense Prediction", ICCV
        2021, arXiv:2103.13413.
    """

    def __init__(self, hidden_size, neck_channels, reassemble_factors, fusion_size, readout="ignore",
                 fusion_upsample="double", first_fusion_unit=True, fusion_batch_norm=False,
                 fusion_bias=None, skip_levels=0, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = check_positive_int(hidden_size, "hidden_size")
        self.neck_channels = check_channels(neck_channels)
        self.reassemble_factors = check_factors(reassemble_factors, len(self.neck_channels))
        self.fusion_size = check_positive_int(fusion_size, "fusion_size")
        self.readout = check_choice(readout, READOUTS, "readout")
        self.fusion_upsample = check_choice(fusion_upsample, FUSION_UPSAMPLES, "fusion_upsample")
        self.first_fusion_unit = check_bool(first_fusion_unit, "first_fusion_unit")
        self.fusion_batch_norm = check_bool(fusion_batch_norm, "fusion_batch_norm")
        self.fusion_bias = None if fusion_bias is None else check_bool(fusion_bias, "fusion_bias")
        self.skip_levels = check_int(skip_levels, "skip_levels", minimum=0, maximum=len(self.neck_channels))

    @property
    def levels(self):
        """The number of levels."""
        return len(self.neck_channels)

    def _resize_layer(self, channels, factor, i):
        if factor > 1:
            return keras.layers.Conv2DTranspose(
                channels, int(factor), strides=int(factor), padding="valid", data_format=NHWC,
                name=f"resize_{i}", dtype=self.dtype_policy,
            )
        if factor < 1:
            # PyTorch's padding 1 on both sides, whatever the size ("same"
            # would pad the end only for even sizes).
            return keras.Sequential(
                [keras.layers.ZeroPadding2D(1, data_format=NHWC, dtype=self.dtype_policy),
                 _conv(channels, 3, "conv", self.dtype_policy, strides=int(round(1 / factor)), padding="valid")],
                name=f"resize_{i}",
            )
        return None

    def build(self, maps_shape, class_tokens_shape=None):
        maps = maps_shape
        self.readouts, self.projections, self.resizes, self.convs = [], [], [], []
        for i, (channels, factor) in enumerate(zip(self.neck_channels, self.reassemble_factors)):
            skipped = i < self.skip_levels
            readout = projection = resize = None
            if not skipped:
                if self.readout == "project":
                    readout = keras.layers.Dense(self.hidden_size, name=f"readout_{i}", dtype=self.dtype_policy)
                    readout.build((None, 2 * self.hidden_size))
                projection = _conv(channels, 1, f"projection_{i}", self.dtype_policy)
                grid = tuple(maps[i][:3]) + (self.hidden_size,)
                projection.build(grid)
                resize = self._resize_layer(channels, factor, i)
                if resize is not None:
                    resize.build(grid[:3] + (channels,))
            conv = _conv(self.fusion_size, 3, f"conv_{i}", self.dtype_policy, use_bias=False)
            conv.build((None, None, None, channels))
            self.readouts.append(readout)
            self.projections.append(projection)
            self.resizes.append(resize)
            self.convs.append(conv)
        self.fusion_units_1, self.fusion_units_2, self.fusion_projections = [], [], []
        for i in range(self.levels):
            unit = dict(batch_norm=self.fusion_batch_norm, use_bias=self.fusion_bias, dtype=self.dtype_policy)
            shape = (None, None, None, self.fusion_size)
            first = None
            if i or self.first_fusion_unit:
                first = ResidualConvUnit(self.fusion_size, name=f"fusion_{i}_unit_1", **unit)
                first.build(shape)
            second = ResidualConvUnit(self.fusion_size, name=f"fusion_{i}_unit_2", **unit)
            second.build(shape)
            projection = _conv(self.fusion_size, 1, f"fusion_{i}_projection", self.dtype_policy)
            projection.build(shape)
            self.fusion_units_1.append(first)
            self.fusion_units_2.append(second)
            self.fusion_projections.append(projection)
        self.built = True

    def _readout(self, i, patches, token):
        if self.readout == "ignore":
            return patches
        if token is None:
            raise ValueError(f"DptNeck {self.name!r} (readout={self.readout!r}) needs the class tokens at call.")
        token = ops.cast(token, patches.dtype)[:, None, None, :]
        if self.readout == "add":
            return patches + token
        token = ops.broadcast_to(token, ops.shape(patches))
        joined = ops.concatenate([patches, token], axis=-1)
        return kernels.gelu(self.readouts[i](joined), approximate=False)

    def reassemble(self, maps, class_tokens, training=None):
        """Step 1-2: each level's map at the fusion width, `(batch, h_i, w_i, fusion_size)`."""
        out = []
        for i, x in enumerate(maps):
            if i >= self.skip_levels:
                token = None if class_tokens is None else class_tokens[i - self.skip_levels]
                x = self._readout(i, x, token)
                x = kernels.call_sublayer(self.projections[i], x)
                resize = self.resizes[i]
                if isinstance(resize, keras.Sequential):  # downsampling: padding, then a strided convolution
                    # Its layers in turn, the padding by `kernels.pad`: a
                    # Sequential's call and Keras' `pad` each end torch.compile's graph.
                    padding, conv = resize.layers
                    x = kernels.call_sublayer(conv, kernels.pad(x, ((0, 0), *padding.padding, (0, 0))))
                elif resize is not None:
                    x = kernels.call_sublayer(resize, x)
            out.append(kernels.call_sublayer(self.convs[i], x))
        return out

    def fuse(self, features, training=None):
        """Step 3: the fusion blocks, coarse to fine; their outputs."""
        features = features[::-1]
        fused, outputs = None, []
        blocks = zip(self.fusion_units_1, self.fusion_units_2, self.fusion_projections)
        for i, (level, (first, second, projection)) in enumerate(zip(features, blocks)):
            if fused is None:
                x = level
            else:
                if tuple(fused.shape[1:3]) != tuple(level.shape[1:3]) or None in fused.shape[1:3]:
                    level = resize_bilinear(level, spatial_size(fused), align_corners=False)
                x = fused + first(level, training=training)
            x = second(x, training=training)
            if self.fusion_upsample == "next" and i + 1 < len(features):
                size = spatial_size(features[i + 1])
            else:
                size = scaled_size(x, 2)
            fused = resize_bilinear(kernels.call_sublayer(projection, x), size, align_corners=True)
            outputs.append(fused)
        return outputs

    def call(self, maps, class_tokens=None, training=None):
        if len(maps) != self.levels:
            raise ValueError(
                f"DptNeck {self.name!r} takes {self.levels} maps (one per level). Received: {len(maps)}"
            )
        return self.fuse(self.reassemble(maps, class_tokens, training), training)

    def _level_size(self, i, shape):
        """`(h, w)` of level `i` after its reassembly (None where unknown)."""
        factor = self.reassemble_factors[i]
        size = tuple(shape[1:3])
        if i < self.skip_levels or factor == 1:
            return size
        if factor > 1:
            return tuple(None if s is None else int(s * factor) for s in size)
        stride = int(round(1 / factor))
        return tuple(None if s is None else -(-s // stride) for s in size)

    def compute_output_shape(self, maps_shape, class_tokens_shape=None):
        maps = maps_shape
        levels = [self._level_size(i, shape) for i, shape in enumerate(maps)][::-1]
        batch, out, fused = tuple(maps[0])[0], [], None
        for i, level in enumerate(levels):
            current = level if fused is None else fused
            if self.fusion_upsample == "next" and i + 1 < len(levels):
                fused = levels[i + 1]
            else:
                fused = tuple(None if s is None else 2 * s for s in current)
            out.append((batch, *fused, self.fusion_size))
        return out

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_size=self.hidden_size,
            neck_channels=list(self.neck_channels),
            reassemble_factors=list(self.reassemble_factors),
            fusion_size=self.fusion_size,
            readout=self.readout,
            fusion_upsample=self.fusion_upsample,
            first_fusion_unit=self.first_fusion_unit,
            fusion_batch_norm=self.fusion_batch_norm,
            fusion_bias=self.fusion_bias,
            skip_levels=self.skip_levels,
        )
        return config
