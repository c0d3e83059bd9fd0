"""Images of any size as one padded batch of patches (NaFlex).

SigLIP 2's NaFlex checkpoints and timm's `NaFlexVit` see each image at its
own aspect ratio: the image is resized to the largest grid of patches that
keeps its aspect ratio within a budget of `max_num_patches`, cut into
patches, and padded to a fixed number of tokens. `naflex_inputs` makes the
padded batch in timm's form,

- `"patches"`: float32 `(batch, n, patch * patch * channels)`, each patch
  flattened row-major as `(patch, patch, channels)`, padding zeros;
- `"patch_coords"`: int32 `(batch, n, 2)`, each patch's (row, column),
  padding (0, 0);
- `"patch_valid"`: bool `(batch, n)`, False for padding

(`PATCH_INPUTS`, `PATCH_INPUT_DTYPES`; a `keras_vit.ViT` whose position
embedding SigLIP 2 resizes takes this dict, `keras_vit.models.patch_inputs`),

with transformers' `Siglip2ImageProcessor` rule for the grid
(`naflex_grid`), its resize (Pillow, bilinear) and its scaling
(`(x / 255 - mean) / std`): for uint8 images the patches equal its
`pixel_values`, `patch_valid` its `pixel_attention_mask`, and the grids
(`naflex_grid`, or the largest valid `patch_coords` plus one) its
`spatial_shapes`.
"""

import math

import numpy as np

from keras_vit.validation import check_choice, check_int

INTERPOLATIONS = ("bilinear", "bicubic")
# The keys of the dict, in the order exporters list them as inputs.
PATCH_INPUTS = ("patches", "patch_coords", "patch_valid")
# Their dtypes in compiled and exported graphs.
PATCH_INPUT_DTYPES = {"patches": "float32", "patch_coords": "int32", "patch_valid": "bool"}
# SigLIP 2's scaling: [0, 1] inputs to [-1, 1].
SIGLIP2_MEAN = SIGLIP2_STD = (0.5, 0.5, 0.5)


def _scaled_size(size, scale, patch_size):
    """A side scaled by `scale`, rounded up to whole patches (at least one)."""
    scaled = math.ceil(size * scale / patch_size) * patch_size
    return max(patch_size, int(scaled))


def naflex_grid(height, width, patch_size, max_num_patches):
    """The patch grid an image is resized to: its aspect ratio, at most
    `max_num_patches` patches.

    transformers' `get_image_size_for_max_num_patches`: a bisection (to
    1e-5) of the largest scale whose sides, rounded up to whole patches,
    give at most `max_num_patches` patches.

    Args:
        height, width: ints, the image's size in pixels.
        patch_size: int.
        max_num_patches: int, the budget.

    Returns:
        `(rows, columns)` of patches; the image is resized to
        `(rows * patch_size, columns * patch_size)` pixels.

    Example:

    >>> naflex_grid(480, 640, 16, 256)
    (14, 18)
    >>> naflex_grid(100, 100, 16, 256)
    (16, 16)
    """
    height = check_int(height, "height", minimum=1)
    width = check_int(width, "width", minimum=1)
    patch_size = check_int(patch_size, "patch_size", minimum=1)
    max_num_patches = check_int(max_num_patches, "max_num_patches", minimum=1)
    eps = 1e-5
    low, high = eps / 10, 100.0
    while high - low >= eps:
        scale = (low + high) / 2
        rows = _scaled_size(height, scale, patch_size) / patch_size
        cols = _scaled_size(width, scale, patch_size) / patch_size
        if rows * cols <= max_num_patches:
            low = scale
        else:
            high = scale
    return (_scaled_size(height, low, patch_size) // patch_size,
            _scaled_size(width, low, patch_size) // patch_size)


def _resize(image, height, width, interpolation):
    """Pillow's resize: uint8 RGB(A) images as one image (as transformers),
    other images one float plane at a time."""
    from PIL import Image

    method = Image.BILINEAR if interpolation == "bilinear" else Image.BICUBIC
    if image.dtype == np.uint8 and image.shape[-1] in (3, 4):
        return np.asarray(Image.fromarray(image).resize((width, height), method))
    planes = [Image.fromarray(np.ascontiguousarray(image[..., c], "float32"), "F")
              for c in range(image.shape[-1])]
    return np.stack([np.asarray(p.resize((width, height), method)) for p in planes], axis=-1)


def _check_image(image, index, channels):
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[-1] != channels or min(image.shape[:2]) < 1:
        raise ValueError(
            f"`images` must be (height, width, {channels}) arrays, one per image. "
            f"Received: images[{index}].shape={image.shape}"
        )
    return image


def _patches(image, patch_size, max_num_patches, stats, interpolation):
    """One image as `(rows * cols, patch * patch * channels)` float32 patches."""
    rows, cols = naflex_grid(image.shape[0], image.shape[1], patch_size, max_num_patches)
    image = _resize(image, rows * patch_size, cols * patch_size, interpolation)
    # transformers' order: scale in float64, round to float32, then normalise.
    x = (image.astype(np.float64) * (1 / 255)).astype(np.float32)
    mean, std = (np.asarray(s, np.float32) for s in stats)
    x = (x - mean) / std
    channels = x.shape[-1]
    x = x.reshape(rows, patch_size, cols, patch_size, channels).transpose(0, 2, 1, 3, 4)
    return x.reshape(rows * cols, -1), (rows, cols)


def patch_input_shapes(length, patch_width, batch_size=None):
    """`{key: shape}` of a NaFlex dict of `length` tokens, in `PATCH_INPUTS` order.

    Example:

    >>> patch_input_shapes(16, 48)
    {'patches': (None, 16, 48), 'patch_coords': (None, 16, 2), 'patch_valid': (None, 16)}
    """
    b, n = batch_size, length
    return {"patches": (b, n, patch_width), "patch_coords": (b, n, 2), "patch_valid": (b, n)}


def as_patch_inputs(inputs):
    """A NaFlex dict as NumPy arrays of `PATCH_INPUT_DTYPES` (for runtimes
    that take those dtypes exactly).

    Raises:
        ValueError: naming the keys when they are not `PATCH_INPUTS`.
    """
    if sorted(inputs) != sorted(PATCH_INPUTS):
        raise ValueError(
            f"A NaFlex batch is a dict with the keys {list(PATCH_INPUTS)}. Received: keys {sorted(inputs)}"
        )
    return {k: np.asarray(inputs[k]).astype(PATCH_INPUT_DTYPES[k], copy=False) for k in PATCH_INPUTS}


def naflex_inputs(
    images, patch_size, max_num_patches, length=None, mean=SIGLIP2_MEAN, std=SIGLIP2_STD,
    interpolation="bilinear",
):
    """A padded batch of patches from images of any sizes (timm's NaFlex dict).

    Each image is resized with its aspect ratio kept to the largest grid of
    at most `max_num_patches` patches (`naflex_grid`), scaled as
    `(x / 255 - mean) / std`, cut into patches and padded to `length`.

    Args:
        images: a sequence of `(height, width, channels)` arrays, uint8 in
            [0, 255] (as transformers' processor; float images are resized
            one plane at a time in float32).
        patch_size: int.
        max_num_patches: int, the budget of patches per image.
        length: int, default `max_num_patches`: the padded number of tokens
            `n` (at least `max_num_patches`; a fixed `n` lets compiled and
            exported graphs take every batch).
        mean, std: per-channel statistics on [0, 1] inputs; default
            SigLIP 2's 0.5 and 0.5.
        interpolation: "bilinear" (default, SigLIP 2's) or "bicubic".

    Returns:
        A dict `{"patches": float32 (batch, n, patch * patch * channels),
        "patch_coords": int32 (batch, n, 2), "patch_valid": bool (batch, n)}`.

    Example:

    >>> images = [np.zeros((30, 50, 3), "uint8"), np.zeros((40, 20, 3), "uint8")]
    >>> batch = naflex_inputs(images, patch_size=8, max_num_patches=16)
    >>> batch["patches"].shape, batch["patch_valid"].sum(axis=1).tolist()
    ((2, 16, 192), [15, 15])
    """
    patch_size = check_int(patch_size, "patch_size", minimum=1)
    max_num_patches = check_int(max_num_patches, "max_num_patches", minimum=1)
    length = max_num_patches if length is None else check_int(length, "length", minimum=max_num_patches)
    check_choice(interpolation, INTERPOLATIONS, "interpolation")
    if len(mean) != len(std):
        raise ValueError(
            f"`mean` and `std` must have one value per channel. Received: mean={mean!r}, std={std!r}"
        )
    images = [_check_image(image, i, len(mean)) for i, image in enumerate(images)]
    if not images:
        raise ValueError("`images` must hold at least one image. Received: images=[]")
    width = patch_size * patch_size * len(mean)
    patches = np.zeros((len(images), length, width), np.float32)
    coords = np.zeros((len(images), length, 2), np.int32)
    valid = np.zeros((len(images), length), bool)
    for i, image in enumerate(images):
        flat, (rows, cols) = _patches(image, patch_size, max_num_patches, (mean, std), interpolation)
        count = rows * cols
        patches[i, :count] = flat
        coords[i, :count, 0] = np.repeat(np.arange(rows), cols)
        coords[i, :count, 1] = np.tile(np.arange(cols), rows)
        valid[i, :count] = True
    return {"patches": patches, "patch_coords": coords, "patch_valid": valid}


__all__ = [
    "INTERPOLATIONS",
    "PATCH_INPUTS",
    "PATCH_INPUT_DTYPES",
    "SIGLIP2_MEAN",
    "SIGLIP2_STD",
    "as_patch_inputs",
    "naflex_grid",
    "naflex_inputs",
    "patch_input_shapes",
]
