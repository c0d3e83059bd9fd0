"""Rotary position embeddings (RoPE) of the patch tokens of a 2D grid.

A rotary embedding turns the query and the key of each patch token, pair of
channels by pair of channels, by angles that grow with the patch's row and
column, so that the attention logits depend on relative positions. Prefix
tokens (class, registers) are left as they are. The tables (sines and
cosines, one row per patch) depend only on the grid and the settings: a
model computes them once per input grid and hands them to every block.

The families differ in six settings, the fields of `RotarySpec`; one row of
`VARIANTS` per family holds its values:

- `coordinates`: `"centered"` (DINOv3: the patch centres `(i + 0.5) / n`
  mapped to [-1, 1]; angle `2 pi * coordinate / period`); `"index"` (EVA02,
  Perception Encoder, RoPE-ViT axial and timm's SBB ViTs, all timm's
  `RotaryEmbeddingCat`: the row or column index plus `grid_offset`, rescaled
  by `reference / grid` when `reference_grid` is set; angle `coordinate /
  period`); `"mixed"` (RoPE-ViT mixed: learned frequencies per block and
  head, `mixed_rope_tables`).
- `base`: the periods are `base ** (4 j / head_dim)`, `j < head_dim / 4`
  (transformers' `rope_theta`, timm's `temperature`); DINOv3 may give
  `min_period` and `max_period` instead (geometric from one to the other).
- `order`: `"yx"` (rows take the first quarter of the channels: DINOv3,
  EVA02, timm's `grid_indexing="ij"`) or `"xy"` (columns first: timm's
  `"xy"`, Perception Encoder and RoPE-ViT).
- `layout`: `"half"` (channel `i` pairs with `i + head_dim / 2`:
  transformers' `rotate_half`, timm's `rotate_half=True`, DINOv3) or
  `"interleaved"` (channel `2i` pairs with `2i + 1`: timm's default,
  EVA02, Perception Encoder, RoPE-ViT). A checkpoint run with the other
  layout loses most of its position information without any error.
- `grid_offset`: added to the indices (Perception Encoder with a class
  token: 1, its class token sitting at position 0).
- `normalize_coords` (`"centered"` only): divide rows and columns by their
  own count (`"separate"`) or both by the larger (`"max"`) or smaller
  (`"min"`) one. DINOv3's training-time coordinate augmentations (shift,
  jitter, rescale) are not applied: inference uses the plain coordinates,
  as transformers and timm in eval mode.

The tables are computed in float32 as the references do (transformers then
casts them to the model's dtype, timm rotates in float32);
`apply_rotary(compute_dtype=...)` chooses.

AIMv2 (native-resolution checkpoints) has no rotary embedding: its fixed
2D sin-cos embedding is `sincos_position_embedding(grid, dim, "mae",
num_prefix_rows=0)`.

Reference:
    Su et al., "RoFormer", arXiv:2104.09864; Heo et al., "Rotary Position
    Embedding for Vision Transformer", arXiv:2403.13298; Fang et al.,
    "EVA-02", arXiv:2303.11331; Bolya et al., "Perception Encoder",
    arXiv:2504.13181; Siméoni et al., "DINOv3", arXiv:2508.10104.
"""

import dataclasses
import math

import keras
from keras import ops

from keras_vit.validation import (
    check_choice,
    check_float,
    check_int,
    check_keywords,
    check_positive_float,
    pair,
)

COORDINATES = ("centered", "index", "mixed")
LAYOUTS = ("half", "interleaved")
ORDERS = ("yx", "xy")
NORMALIZATIONS = ("separate", "max", "min")


@dataclasses.dataclass(frozen=True)
class RotarySpec:
    """The settings of a 2D rotary embedding (see the module docstring).

    Example:

    >>> RotarySpec(coordinates="index", base=10000.0, layout="interleaved").order
    'yx'
    >>> RotarySpec(layout="halves")
    Traceback (most recent call last):
    ...
    ValueError: `layout` must be one of ('half', 'interleaved'). Received: layout='halves'
    """

    coordinates: str = "centered"
    base: float = 100.0
    order: str = "yx"
    layout: str = "half"
    grid_offset: float = 0.0
    reference_grid: tuple = None
    normalize_coords: str = "separate"
    min_period: float = None
    max_period: float = None

    def __post_init__(self):
        check_choice(self.coordinates, COORDINATES, "coordinates")
        check_choice(self.order, ORDERS, "order")
        check_choice(self.layout, LAYOUTS, "layout")
        check_choice(self.normalize_coords, NORMALIZATIONS, "normalize_coords")
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("base", check_positive_float(self.base, "base"))
        set_("grid_offset", check_float(self.grid_offset, "grid_offset"))
        if self.reference_grid is not None:
            if self.coordinates != "index":
                raise ValueError(
                    "`reference_grid` applies to index coordinates only. Received: "
                    f"reference_grid={self.reference_grid!r}, coordinates={self.coordinates!r}"
                )
            set_("reference_grid", pair(self.reference_grid, "reference_grid"))
        if (self.min_period is None) != (self.max_period is None) or (
            self.min_period is not None and self.coordinates != "centered"
        ):
            raise ValueError(
                "`min_period` and `max_period` go together, with centered coordinates. "
                f"Received: min_period={self.min_period!r}, max_period={self.max_period!r}, "
                f"coordinates={self.coordinates!r}"
            )
        if self.min_period is not None:
            set_("min_period", check_positive_float(self.min_period, "min_period"))
            set_("max_period", check_positive_float(self.max_period, "max_period"))

    @classmethod
    def field_names(cls):
        return tuple(f.name for f in dataclasses.fields(cls))

    def get_config(self):
        return {name: getattr(self, name) for name in self.field_names()}


# One row per family: the settings its checkpoints share. `reference_grid`
# (EVA02: (16, 16); PE: the pretraining grid) and PE's `grid_offset` (1 with
# a class token, 0 without) vary by checkpoint and come from its config.
VARIANTS = {
    # transformers' `DINOv3ViTRopePositionEmbedding`, timm's `RotaryEmbeddingDinoV3`.
    "dinov3": RotarySpec("centered", 100.0, "yx", "half"),
    # timm's `RotaryEmbeddingCat(in_pixels=False)` in `eva02_*` and `vit_*_rope_reg*_gap_*`.
    "eva02": RotarySpec("index", 10000.0, "yx", "interleaved"),
    # timm's `vit_pe_*` (`rope_grid_indexing="xy"`, `rope_grid_offset=1`).
    "pe": RotarySpec("index", 10000.0, "xy", "interleaved", grid_offset=1.0),
    # timm's `vit_*_patch16_rope_*` (RoPE-ViT axial, temperature 100).
    "axial": RotarySpec("index", 100.0, "xy", "interleaved"),
    # timm's `RotaryEmbeddingMixed` (`vit_*_rope_mixed_*`); `base` is the
    # temperature of the initial frequencies.
    "mixed": RotarySpec("mixed", 10.0, "xy", "interleaved"),
}


def rotary_spec(variant="dinov3", **settings):
    """The `RotarySpec` of a variant, with some settings replaced.

    Args:
        variant: a key of `VARIANTS`.
        **settings: fields of `RotarySpec`; None keeps the variant's value.

    Returns:
        A `RotarySpec`.

    Example:

    >>> rotary_spec("pe", reference_grid=24).reference_grid
    (24, 24)
    """
    check_choice(variant, tuple(VARIANTS), "variant")
    check_keywords(settings, RotarySpec.field_names(), "rotary_spec")
    changes = {k: v for k, v in settings.items() if v is not None}
    return dataclasses.replace(VARIANTS[variant], **changes)


def _check_head_dim(head_dim):
    head_dim = check_int(head_dim, "head_dim", minimum=4)
    if head_dim % 4:
        raise ValueError(
            "`head_dim` must be a multiple of 4 (a quarter of the channels per axis). "
            f"Received: head_dim={head_dim}"
        )
    return head_dim


def _inverse_periods(spec, head_dim):
    """`1 / period_j`, float32, `j < head_dim / 4`."""
    quarter = head_dim // 4
    if spec.min_period is not None:
        # linspace(0, 1, quarter), as arange: the ONNX exporters take it.
        fraction = ops.arange(0, quarter, dtype="float32") / float(max(quarter - 1, 1))
        periods = spec.min_period * ops.power(spec.max_period / spec.min_period, fraction)
        return 1.0 / periods
    exponents = ops.arange(0, quarter, dtype="float32") / float(quarter)
    return 1.0 / ops.power(ops.convert_to_tensor(spec.base, "float32"), exponents)


def _axis_coordinates(index, size, other, reference, spec):
    """The coordinate of one axis for `index` on an axis of `size` patches."""
    if spec.coordinates == "centered":
        if spec.normalize_coords == "max":
            size = ops.maximum(size, other)
        elif spec.normalize_coords == "min":
            size = ops.minimum(size, other)
        return 2.0 * ((index + 0.5) / size) - 1.0
    index = index + spec.grid_offset
    return index if reference is None else index / size * float(reference)


def _angles(positions, grid_sizes, head_dim, spec):
    """Angles `(..., head_dim / 2)` of (row, column) `positions` on grids of
    `grid_sizes`, the row angles first for order "yx"."""
    positions = ops.cast(positions, "float32")
    grid_sizes = ops.cast(grid_sizes, "float32")
    rows, cols = positions[..., 0], positions[..., 1]
    height, width = grid_sizes[..., 0], grid_sizes[..., 1]
    reference = spec.reference_grid or (None, None)
    y = _axis_coordinates(rows, height, width, reference[0], spec)
    x = _axis_coordinates(cols, width, height, reference[1], spec)
    scale = 2.0 * math.pi if spec.coordinates == "centered" else 1.0
    inverse = _inverse_periods(spec, head_dim)
    first, second = (y, x) if spec.order == "yx" else (x, y)
    return ops.concatenate(
        [(scale * first)[..., None] * inverse, (scale * second)[..., None] * inverse], axis=-1
    )


def _expand(angles, layout):
    """`(..., head_dim / 2)` angles to `(..., head_dim)` in the layout's pairing."""
    if layout == "half":
        return ops.concatenate([angles, angles], axis=-1)
    return ops.repeat(angles, 2, axis=-1)


def grid_positions(grid):
    """The `(gh * gw, 2)` int32 (row, column) of each patch, row-major.

    Args:
        grid: `(gh, gw)`, ints or scalar int tensors.

    Example:

    >>> keras.ops.convert_to_numpy(grid_positions((2, 3)))[:4].tolist()
    [[0, 0], [0, 1], [0, 2], [1, 0]]
    """
    height, width = grid
    # `arange(0, n)`: jax2onnx reads no `arange(n)` whose stop is None.
    index = ops.arange(0, height * width, dtype="int32")
    return ops.stack([index // width, index % width], axis=-1)


def rope_tables_at(positions, grid_sizes, head_dim, variant="dinov3", **settings):
    """Rotary tables at given patch positions (a NaFlex batch: each image on
    its own grid).

    Args:
        positions: int tensor `(..., 2)`, each patch's (row, column).
        grid_sizes: `(..., 2)` broadcastable to `positions`: the (rows,
            columns) of the grid each patch belongs to.
        head_dim: int, a multiple of 4.
        variant: a key of `VARIANTS` ("mixed" has learned frequencies: see
            `mixed_rope_tables`).
        **settings: fields of `RotarySpec` replacing the variant's.

    Returns:
        `(sin, cos)`, float32 tensors `positions.shape[:-1] + (head_dim,)`.

    Example:

    >>> import numpy as np
    >>> sin, cos = rope_tables_at(np.array([[0, 0], [1, 2]]), np.array([2, 3]), 8)
    >>> tuple(sin.shape)
    (2, 8)
    """
    head_dim = _check_head_dim(head_dim)
    spec = rotary_spec(variant, **settings)
    if spec.coordinates == "mixed":
        raise ValueError("The 'mixed' variant has learned frequencies: use `mixed_rope_tables`.")
    return _spec_tables(positions, grid_sizes, head_dim, spec)


def _spec_tables(positions, grid_sizes, head_dim, spec):
    """`rope_tables_at` of a checked `RotarySpec` (a layer's, at each call)."""
    angles = _expand(_angles(positions, grid_sizes, head_dim, spec), spec.layout)
    return ops.sin(angles), ops.cos(angles)


def rope_tables(grid, head_dim, variant="dinov3", **settings):
    """The rotary tables of every patch of a grid, row-major.

    Args:
        grid: `(gh, gw)`, ints or scalar int tensors.
        head_dim: int, the width of a head, a multiple of 4.
        variant: a key of `VARIANTS`: "dinov3", "eva02", "pe", "axial".
        **settings: fields of `RotarySpec` (`base`, `order`, `layout`,
            `grid_offset`, `reference_grid`, `normalize_coords`,
            `min_period`, `max_period`) replacing the variant's.

    Returns:
        `(sin, cos)`, float32 tensors `(gh * gw, head_dim)` laid out for the
        variant's `layout`, ready for `apply_rotary`.

    Example:

    >>> sin, cos = rope_tables((2, 3), 8, "eva02", reference_grid=(4, 4))
    >>> tuple(sin.shape), tuple(cos.shape)
    ((6, 8), (6, 8))
    """
    return rope_tables_at(grid_positions(grid), _grid_sizes(grid), head_dim, variant, **settings)


def _grid_sizes(grid):
    return ops.stack([ops.convert_to_tensor(g, "int32") for g in grid])


def mixed_rope_tables(grid, frequencies, order="xy"):
    """The rotary tables of RoPE-ViT's mixed variant (learned frequencies).

    The angle of channel pair `k` in head `h` of block `d` at column `x`,
    row `y` is `x * f[0, d, h, k] + y * f[1, d, h, k]` (for order "xy";
    rows take `f[0]` for "yx"), pairs interleaved, as timm's
    `RotaryEmbeddingMixed` (`rope.freqs`).

    Args:
        grid: `(gh, gw)`, ints or scalar int tensors.
        frequencies: tensor `(2, depth, heads, head_dim / 2)`.
        order: "xy" (default, RoPE-ViT's) or "yx".

    Returns:
        `(sin, cos)`, float32 tensors `(depth, gh * gw, heads, head_dim)`;
        block `d` takes `sin[d]`, `cos[d]`.

    Example:

    >>> import numpy as np
    >>> sin, cos = mixed_rope_tables((2, 2), np.ones((2, 3, 2, 4), "float32"))
    >>> tuple(sin.shape)
    (3, 4, 2, 8)
    """
    check_choice(order, ORDERS, "order")
    positions = ops.cast(grid_positions(grid), "float32")
    rows, cols = positions[:, 0], positions[:, 1]
    first, second = (cols, rows) if order == "xy" else (rows, cols)
    freq = ops.cast(ops.convert_to_tensor(frequencies), "float32")
    angles = (
        first[None, :, None, None] * freq[0][:, None]
        + second[None, :, None, None] * freq[1][:, None]
    )
    angles = ops.repeat(angles, 2, axis=-1)
    return ops.sin(angles), ops.cos(angles)


def _rotate(x, layout):
    """The partner of each channel, signed: `x * cos + _rotate(x) * sin` turns
    each channel pair by its angle."""
    dim = x.shape[-1]
    if layout == "half":
        return ops.concatenate([-x[..., dim // 2 :], x[..., : dim // 2]], axis=-1)
    # Strided slices, not a split of (dim / 2, 2) pairs: tf2onnx turns that
    # split into an ONNX `Split` that onnxruntime rejects.
    turned = ops.stack([-x[..., 1::2], x[..., 0::2]], axis=-1)
    return ops.reshape(turned, ops.shape(x))


def _align(table):
    """A table `(patches, dim)`, `(patches, heads, dim)` or `(batch, patches,
    heads, dim)` as a rank-4 tensor that broadcasts over `(batch, tokens, heads, dim)`."""
    table = ops.convert_to_tensor(table)
    if len(table.shape) == 2:
        return table[None, :, None, :]
    if len(table.shape) == 3:
        return table[None]
    if len(table.shape) == 4:
        return table
    raise ValueError(
        "Rotary tables must be (patches, head_dim), (patches, heads, head_dim) or "
        f"(batch, patches, heads, head_dim). Received: shape={tuple(table.shape)}"
    )


def apply_rotary(x, sin, cos, num_prefix_tokens=0, layout="half", compute_dtype=None):
    """Turns the patch tokens of queries or keys by their rotary angles.

    `x * cos + rotate(x) * sin` on the tokens after the first
    `num_prefix_tokens`, where `rotate` maps each channel pair `(a, b)` to
    `(-b, a)`: pairs `(i, i + D/2)` for layout "half", `(2i, 2i + 1)` for
    "interleaved".

    Args:
        x: tensor `(batch, tokens, heads, head_dim)`.
        sin, cos: tables of `rope_tables` `(patches, head_dim)`, of
            `mixed_rope_tables` for one block `(patches, heads, head_dim)`,
            or per image `(batch, patches, heads or 1, head_dim)`, where
            `patches = tokens - num_prefix_tokens`.
        num_prefix_tokens: int, default 0: leading tokens (class, registers)
            left unrotated.
        layout: "half" (default) or "interleaved": the tables' layout.
        compute_dtype: None (default: `x`'s dtype, the tables cast to it, as
            transformers) or "float32" (timm: rotated in float32, then cast
            back to `x`'s dtype).

    Returns:
        A tensor of `x`'s shape and dtype.

    Example:

    >>> import numpy as np
    >>> sin, cos = rope_tables((2, 2), 8)
    >>> x = np.ones((1, 5, 2, 8), "float32")
    >>> y = keras.ops.convert_to_numpy(apply_rotary(x, sin, cos, num_prefix_tokens=1))
    >>> bool(np.allclose(y[:, 0], 1.0)), bool(np.allclose(np.linalg.norm(y, axis=-1), np.sqrt(8)))
    (True, True)
    """
    check_choice(layout, LAYOUTS, "layout")
    num_prefix_tokens = check_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
    x = ops.convert_to_tensor(x)
    dtype = keras.backend.standardize_dtype(x.dtype)
    work = dtype if compute_dtype is None else check_choice(compute_dtype, ("float32",), "compute_dtype")
    sin, cos = (ops.cast(_align(t), work) for t in (sin, cos))
    patches = ops.cast(x[:, num_prefix_tokens:], work)
    turned = ops.cast(patches * cos + _rotate(patches, layout) * sin, dtype)
    if not num_prefix_tokens:
        return turned
    return ops.concatenate([x[:, :num_prefix_tokens], turned], axis=1)


@keras.saving.register_keras_serializable(package="keras_vit")
class MixedRopeFrequencies(keras.initializers.Initializer):
    """RoPE-ViT's initial mixed frequencies `(2, depth, heads, head_dim / 2)`.

    Each head of each block starts from the axial magnitudes
    `temperature ** (-4 j / head_dim)` turned by a random angle `t`: the
    first axis gets `m cos(t)` then `m cos(t + pi/2)`, the second `m sin(t)`
    then `m sin(t + pi/2)` (timm's `init_random_2d_freqs`).

    Args:
        temperature: float, default 10.
        seed: None or an int.

    Example:

    >>> tuple(MixedRopeFrequencies(seed=1)((2, 3, 2, 4)).shape)
    (2, 3, 2, 4)
    """

    def __init__(self, temperature=10.0, seed=None):
        self.temperature = check_positive_float(temperature, "temperature")
        self.seed = check_int(seed, "seed", minimum=0, allow_none=True)

    def __call__(self, shape, dtype=None):
        _, depth, heads, half = shape
        magnitude = 1.0 / ops.power(
            self.temperature, ops.arange(0, 2 * half, 4, dtype="float32") / float(2 * half)
        )
        turn = keras.random.uniform((depth, heads, 1), 0.0, 2.0 * math.pi, seed=self.seed)
        quarter = 0.5 * math.pi
        first = ops.concatenate([magnitude * ops.cos(turn), magnitude * ops.cos(turn + quarter)], axis=-1)
        second = ops.concatenate([magnitude * ops.sin(turn), magnitude * ops.sin(turn + quarter)], axis=-1)
        return ops.cast(ops.stack([first, second]), dtype or "float32")

    def get_config(self):
        return {"temperature": self.temperature, "seed": self.seed}


@keras.saving.register_keras_serializable(package="keras_vit")
class RotaryEmbedding(keras.layers.Layer):
    """The rotary tables of a patch grid, for every block of a model.

    Called on the patch feature map `(batch, gh, gw, channels)` (only its
    grid is read), it returns the sines and cosines stacked in one tensor,
    so that a model computes them once per input grid and passes the same
    tensor to each block's attention (`apply_rotary(x, table[0], table[1])`,
    or `table[0, d]`, `table[1, d]` in block `d` for "mixed"). The grid may
    change from call to call: any image size and aspect ratio works. With
    `num_prefix_tokens`, the tables start with that many identity rows
    (sine 0, cosine 1): the whole token sequence, class and register tokens
    unrotated, is turned in one product.

    Args:
        head_dim: int, the width of an attention head, a multiple of 4.
        variant: a key of `VARIANTS`: "dinov3" (default), "eva02", "pe",
            "axial" or "mixed".
        depth, num_heads: ints, the blocks and heads of the model; for
            "mixed" only, whose learned frequencies `frequencies` (shape
            `(2, depth, num_heads, head_dim / 2)`, timm's `rope.freqs`) are
            the layer's weight.
        coordinates, base, order, layout, grid_offset, reference_grid,
            normalize_coords, min_period, max_period: the fields of
            `RotarySpec`; None (default) keeps the variant's value.
        seed: None or an int: the initial frequencies of "mixed".
        num_prefix_tokens: int, default 0: identity rows before the patch
            rows.

    Returns:
        A float32 tensor `(2, prefix + gh * gw, head_dim)` (sines, cosines),
        or `(2, depth, prefix + gh * gw, num_heads, head_dim)` for "mixed".

    Example:

    >>> import numpy as np
    >>> rope = RotaryEmbedding(head_dim=8, variant="dinov3")
    >>> tuple(rope(np.zeros((1, 3, 5, 16), "float32")).shape)
    (2, 15, 8)
    >>> tuple(RotaryEmbedding(8, num_prefix_tokens=2).tables((3, 5)).shape)
    (2, 17, 8)
    """

    def __init__(
        self, head_dim, variant="dinov3", depth=None, num_heads=None, coordinates=None, base=None,
        order=None, layout=None, grid_offset=None, reference_grid=None, normalize_coords=None,
        min_period=None, max_period=None, seed=None, num_prefix_tokens=0, **kwargs,
    ):
        super().__init__(**kwargs)
        self.head_dim = _check_head_dim(head_dim)
        self.variant = check_choice(variant, tuple(VARIANTS), "variant")
        self.spec = rotary_spec(
            variant, coordinates=coordinates, base=base, order=order, layout=layout,
            grid_offset=grid_offset, reference_grid=reference_grid,
            normalize_coords=normalize_coords, min_period=min_period, max_period=max_period,
        )
        mixed = self.spec.coordinates == "mixed"
        self.depth = check_int(depth, "depth", minimum=1, allow_none=not mixed)
        self.num_heads = check_int(num_heads, "num_heads", minimum=1, allow_none=not mixed)
        if not mixed and (depth is not None or num_heads is not None):
            raise ValueError(
                "`depth` and `num_heads` size the learned frequencies of the 'mixed' variant only. "
                f"Received: depth={depth!r}, num_heads={num_heads!r}, variant={variant!r}"
            )
        self.seed = check_int(seed, "seed", minimum=0, allow_none=True)
        self.num_prefix_tokens = check_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)

    @staticmethod
    def is_mixed(variant):
        """Whether `variant` has learned per-block, per-head frequencies."""
        return VARIANTS[variant].coordinates == "mixed"

    def build(self, input_shape):
        if self.spec.coordinates == "mixed":
            self.frequencies = self.add_weight(
                name="frequencies",
                shape=(2, self.depth, self.num_heads, self.head_dim // 2),
                initializer=MixedRopeFrequencies(self.spec.base, self.seed),
                dtype="float32",
            )
        self.built = True

    def tables(self, grid):
        """The stacked tables of a `(gh, gw)` grid (ints or scalar tensors):
        what `call` returns for a feature map on that grid."""
        prefix = self.num_prefix_tokens
        if self.spec.coordinates == "mixed":
            sin, cos = mixed_rope_tables(grid, self.frequencies, self.spec.order)
            axis, shape = 1, (self.depth, prefix, self.num_heads, self.head_dim)
        else:
            sin, cos = _spec_tables(grid_positions(grid), _grid_sizes(grid), self.head_dim, self.spec)
            axis, shape = 0, (prefix, self.head_dim)
        if prefix:
            sin = ops.concatenate([ops.zeros(shape, sin.dtype), sin], axis=axis)
            cos = ops.concatenate([ops.ones(shape, cos.dtype), cos], axis=axis)
        return ops.stack([sin, cos])

    def call(self, inputs):
        shape = ops.shape(inputs)
        return self.tables((shape[1], shape[2]))

    def compute_output_shape(self, input_shape):
        height, width = input_shape[1], input_shape[2]
        tokens = None if height is None or width is None else height * width + self.num_prefix_tokens
        if self.spec.coordinates == "mixed":
            return (2, self.depth, tokens, self.num_heads, self.head_dim)
        return (2, tokens, self.head_dim)

    def compute_output_spec(self, inputs):
        # The tables are float32 whatever the compute dtype (`apply_rotary`
        # casts them where they are used).
        return keras.KerasTensor(self.compute_output_shape(inputs.shape), dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {"head_dim": self.head_dim, "variant": self.variant, "depth": self.depth,
             "num_heads": self.num_heads, "seed": self.seed, "num_prefix_tokens": self.num_prefix_tokens,
             **self.spec.get_config()}
        )
        return config


__all__ = [
    "COORDINATES",
    "LAYOUTS",
    "MixedRopeFrequencies",
    "NORMALIZATIONS",
    "ORDERS",
    "RotaryEmbedding",
    "RotarySpec",
    "VARIANTS",
    "apply_rotary",
    "grid_positions",
    "mixed_rope_tables",
    "rope_tables",
    "rope_tables_at",
    "rotary_spec",
]
