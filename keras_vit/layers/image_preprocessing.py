"""`ImagePreprocessing`: raw images of any size to a model's inputs, in the graph.

The resize, centre crop and scaling that `keras_vit.classify` applies to an
image before the model (a checkpoint's `Preprocessing` record: Pillow's
antialiased resampling, then `(x / 255 - mean) / std`), as one Keras layer in
`keras.ops`, so an exported artifact takes uint8 images of any size
(`model.export(..., raw_images=True)`).

Pillow resamples an 8-bit image in two separable passes, each a weighted
sum over the source pixels within the filter's support (widened by the
downscaling factor, which antialiases), with weights normalised, rounded to
22 fractional bits, and the result rounded to 8 bits after each pass.
The layer computes each pass as products with dense `(output, input)`
weight matrices built from the input's own size, so no shape depends on
the data: Pillow's integer weights split into high and low bits, each
product and partial sum exact in float32, rounded as Pillow rounds its
integer sums. Pillow 13 runs the vertical pass first when the height
shrinks by more than twice as many pixels as the width; earlier versions
always run the horizontal pass first (`vertical_first`). The weights
themselves are computed in float32 where Pillow uses float64: a weight can
differ by one in its last bit, and a pixel next to a half-level then by
one level (tests/test_image_preprocessing.py bounds how often).

Reference: Pillow, `src/libImaging/Resample.c` (the filters, their
supports and the 8-bit passes); python-pillow/Pillow#9549 (the order of
the passes since Pillow 13).
"""

import math

import keras
from keras import ops

from keras_vit.validation import check_choice, pair

# Fractional bits of Pillow's 8-bit resampling weights (`PRECISION_BITS`),
# and the split of each weight into 11 high and 11 low bits.
_WEIGHT_SCALE = float(1 << 22)
_SPLIT = float(1 << 11)


def _bicubic(x):
    a = -0.5
    x = ops.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return ops.where(x < 1.0, near, ops.where(x < 2.0, far, 0.0))


def _bilinear(x):
    x = ops.abs(x)
    return ops.where(x < 1.0, 1.0 - x, 0.0)


def _sinc(x):
    safe = ops.where(x == 0.0, 1.0, x * math.pi)
    return ops.where(x == 0.0, 1.0, ops.sin(safe) / safe)


def _hamming(x):
    x = ops.abs(x)
    value = _sinc(x) * (0.54 + 0.46 * ops.cos(x * math.pi))
    return ops.where(x >= 1.0, 0.0, value)


def _lanczos(x):
    return ops.where((x >= -3.0) & (x < 3.0), _sinc(x) * _sinc(x / 3.0), 0.0)


# The continuous filters Pillow resamples with: (support, filter), by the
# names a `Preprocessing` record gives them. Pillow's box filter is left
# out: whether a source pixel on the box's edge counts is decided by
# float64 rounding that float32 does not reproduce; "nearest" is no
# convolution.
FILTERS = {
    "bilinear": (1.0, _bilinear),
    "bicubic": (2.0, _bicubic),
    "lanczos": (3.0, _lanczos),
    "hamming": (1.0, _hamming),
}


class PythonMath:
    """`maximum`, `minimum` and `floor` of Python numbers (`tf.math` and `keras.ops` have the same names)."""

    maximum = staticmethod(max)
    minimum = staticmethod(min)
    floor = staticmethod(math.floor)


def shorter_side_geometry(height, width, shorter, size, ops=PythonMath):
    """Where an image goes when its shorter side is resized to `shorter`.

    The geometry of a `Preprocessing` record with an int `resize` (and of
    transformers' "shortest_edge" and torchvision's `Resize(int)`): the
    shorter side becomes `shorter`, the longer one keeps the aspect ratio,
    truncated; neither falls below the crop `size`; the centre `size` is
    then cut out.

    Args:
        height, width: the image size; Python numbers, or float scalar
            tensors with `ops=tf.math` or `ops=keras.ops`.
        shorter: int, the shorter side after resizing.
        size: `(height, width)` of the crop.
        ops: `maximum`, `minimum` and `floor` of the numbers' library.

    Returns:
        `(resized_height, resized_width, top, left)`.

    Example:

    >>> shorter_side_geometry(300, 451, 36, (32, 32))
    (36, 54, 2, 11)
    """
    short = ops.minimum(height, width)
    # Products first: `shorter * short / short` is exact in floating point.
    resized_h = ops.maximum(ops.floor(shorter * height / short), size[0])
    resized_w = ops.maximum(ops.floor(shorter * width / short), size[1])
    return resized_h, resized_w, (resized_h - size[0]) // 2, (resized_w - size[1]) // 2


def _pillow_vertical_first():
    """Whether the installed Pillow runs the vertical pass first where it
    shrinks the height far more than the width (Pillow 13 and later)."""
    try:
        import PIL
    except ImportError:
        return True
    return int(PIL.__version__.split(".")[0]) >= 13


@keras.saving.register_keras_serializable(package="keras_vit")
class ImagePreprocessing(keras.layers.Layer):
    """Resizes, centre-crops and scales raw images as a checkpoint's record says.

    Takes 8-bit images of any size and returns the model's float inputs,
    computed as `keras_vit.classify` prepares an image
    (`keras_vit.preprocessing.resize_and_crop` with Pillow, then
    `preprocess_input`): the same pixels, up to a level in rare pixels
    (module docstring). The arguments are the fields of a
    `keras_vit.preprocessing.Preprocessing` record
    (`ImagePreprocessing(**record.get_config())`).

    Args:
        image_size: int or `(height, width)`: the output, the model's input.
        mean, std: per-channel statistics of [0, 1] pixels (default the
            [-1, 1] scaling of Google's checkpoints).
        resize: None (resize straight to `image_size`), an int (the shorter
            side, aspect ratio kept, then the centre crop) or an exact
            `(height, width)` before the centre crop.
        interpolation: one of `FILTERS`, default "bicubic" (Pillow's
            continuous filters: not "nearest", "box" or "area").
        vertical_first: None (default: as the installed Pillow, True from
            Pillow 13) or bool: whether the vertical pass runs first where
            the height shrinks by more than twice as many pixels as the
            width.

    Input shape:
        `(batch, height, width, channels)`, any height and width, uint8 (or
        any dtype holding [0, 255] values, rounded as 8-bit images are).

    Returns:
        `(batch, image_size[0], image_size[1], channels)` in the layer's
        compute dtype (computed in float32).

    Example:

    >>> import numpy as np
    >>> layer = ImagePreprocessing(image_size=4, resize=6, mean=(0.5,) * 3, std=(0.5,) * 3)
    >>> out = layer(np.full((1, 9, 12, 3), 255, "uint8"))
    >>> tuple(out.shape), float(keras.ops.max(out))
    ((1, 4, 4, 3), 1.0)
    """

    def __init__(self, image_size, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), resize=None,
                 interpolation="bicubic", vertical_first=None, **kwargs):
        super().__init__(**kwargs)
        self.image_size = pair(image_size, "image_size")
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if len(self.mean) != len(self.std) or min(self.std) <= 0:
            raise ValueError(
                "`mean` and `std` must have one value per channel each, `std` positive. "
                f"Received: mean={mean!r}, std={std!r}"
            )
        if isinstance(resize, (list, tuple)):
            resize = pair(resize, "resize")
        elif resize is not None and (isinstance(resize, bool) or not isinstance(resize, int) or resize < 1):
            raise ValueError(
                f"`resize` must be None, a positive int or a (height, width) pair. Received: resize={resize!r}"
            )
        self.resize = resize
        self.interpolation = check_choice(interpolation, tuple(FILTERS), "interpolation")
        self.vertical_first = _pillow_vertical_first() if vertical_first is None else bool(vertical_first)
        self.input_spec = keras.layers.InputSpec(ndim=4)

    def build(self, input_shape):
        channels = input_shape[-1]
        if channels is not None and len(self.mean) > 1 and channels != len(self.mean):
            raise ValueError(
                f"The images must have {len(self.mean)} channels, one per `mean` value. "
                f"Received: input shape {tuple(input_shape)}"
            )
        self.built = True

    def compute_output_shape(self, input_shape):
        return (input_shape[0],) + self.image_size + (input_shape[-1],)

    def _geometry(self, height, width):
        """`(resized height, resized width, top, left)` of the record's resize and crop."""
        size = self.image_size
        if self.resize is None:
            return float(size[0]), float(size[1]), 0.0, 0.0
        if isinstance(self.resize, int):
            return shorter_side_geometry(height, width, self.resize, size, ops)
        resized = tuple(float(max(r, s)) for r, s in zip(self.resize, size))
        return resized + tuple(float((r - s) // 2) for r, s in zip(resized, size))

    def _weights(self, source, in_size, out_size, start, count):
        """Pillow's 8-bit weights `(count, in)` of output pixels `start ...
        start + count - 1` of a resize from `in_size` to `out_size` pixels,
        as a pair of matrices (high and low bits)."""
        support, kernel = FILTERS[self.interpolation]
        scale = in_size / out_size
        filter_scale = ops.maximum(scale, 1.0)
        support = support * filter_scale
        # The centre of output pixel i, (i + 0.5) * scale, as an integer q
        # plus a fraction r / den: exact where a float product is not.
        outputs = start + ops.arange(0, count, 1, dtype="float32")
        numerator, den = (2.0 * outputs + 1.0) * in_size, 2.0 * out_size
        q = ops.floor(numerator / den)
        q = q - ops.cast(numerator - q * den < 0, "float32") + ops.cast(numerator - q * den >= den, "float32")
        fraction = (numerator - q * den) / den
        first = ops.maximum(ops.floor(q + fraction - support + 0.5), 0.0)
        last = ops.minimum(ops.floor(q + fraction + support + 0.5), in_size)
        offset = (source[None, :] - q[:, None]) - fraction[:, None] + 0.5
        inside = (source[None, :] >= first[:, None]) & (source[None, :] < last[:, None])
        weights = ops.where(inside, kernel(offset * (1.0 / filter_scale)), 0.0)
        total = ops.sum(weights, axis=1, keepdims=True)
        weights = weights / ops.where(total == 0.0, 1.0, total)
        fixed = weights * _WEIGHT_SCALE
        fixed = ops.where(fixed < 0.0, ops.ceil(fixed - 0.5), ops.floor(fixed + 0.5))
        # Pillow's integer weights in two parts, so that every product with a
        # pixel and every partial sum of them is exact in float32.
        high = ops.floor(fixed / _SPLIT)
        return high / _SPLIT, (fixed - high * _SPLIT) / _WEIGHT_SCALE

    @staticmethod
    def _pass(images, weights, axis):
        """One 8-bit pass along `axis` (1: rows, 2: columns), rounded as Pillow's.

        The sum of the high parts is a multiple of 2**-11, of the low parts
        of 2**-22: `floor(high + low + 0.5)` is computed in two exact steps
        (whole part of `high + 0.5`, then the rest), as Pillow's integer sum.
        """
        order = (0, 2, 3, 1) if axis == 1 else (0, 1, 3, 2)
        back = (0, 3, 1, 2) if axis == 1 else (0, 1, 3, 2)
        moved = ops.transpose(images, order)
        high, low = (ops.transpose(ops.matmul(moved, ops.transpose(w)), back) for w in weights)
        whole = ops.floor(high + 0.5)
        rounded = whole + ops.floor((high + 0.5 - whole) + low)
        return ops.clip(rounded, 0.0, 255.0)

    def call(self, images):
        x = ops.cast(images, "float32")
        # The sizes and pixel positions from the data: no shape arithmetic
        # that an exporter would have to carry symbolically.
        row_ones, column_ones = ops.ones_like(x[0, :, 0, 0]), ops.ones_like(x[0, 0, :, 0])
        height, width = ops.sum(row_ones), ops.sum(column_ones)
        rows, columns = ops.cumsum(row_ones) - 1.0, ops.cumsum(column_ones) - 1.0
        resized_h, resized_w, top, left = self._geometry(height, width)
        vertical = self._weights(rows, height, resized_h, top, self.image_size[0])
        horizontal = self._weights(columns, width, resized_w, left, self.image_size[1])
        out = self._pass(self._pass(x, horizontal, 2), vertical, 1)
        if self.vertical_first:
            swapped = self._pass(self._pass(x, vertical, 1), horizontal, 2)
            first = (resized_h < height) & (2.0 * (width - resized_w) < height - resized_h)
            out = ops.where(first, swapped, out)
        # `(x / 255 - mean) / std` as `preprocess_input` computes it: one
        # multiply and one add, with the constants rounded once.
        scale = [1.0 / (255.0 * s) for s in self.std]
        offset = [-m / s for m, s in zip(self.mean, self.std)]
        scaled = out * ops.convert_to_tensor(scale, "float32") + ops.convert_to_tensor(offset, "float32")
        # Resampled in float32 whatever the policy; handed on in its dtype.
        return ops.cast(scaled, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            image_size=self.image_size,
            mean=self.mean,
            std=self.std,
            resize=self.resize,
            interpolation=self.interpolation,
            vertical_first=self.vertical_first,
        )
        return config
