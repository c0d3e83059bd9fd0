"""`Patches`: splits images (or video clips) into a grid of flattened, non-overlapping patches."""

import math

import keras
from keras import ops

from keras_vit.validation import check_bool, check_positive_int, pair


@keras.saving.register_keras_serializable(package="keras_vit")
class Patches(keras.layers.Layer):
    """Splits images into non-overlapping patches (paper §3.1).

    The patches keep their place on the grid, so later layers know the grid's
    height and width (needed for non-square images and position-embedding
    resizing). Each patch is flattened in (row, column, channel) order, which
    matches an official `(ph, pw, C, D)` embedding kernel reshaped to
    `(ph * pw * C, D)`.

    Args:
        patch_size: int or `(height, width)`: the patch size in pixels.
        crop: bool, default False: drop the last rows and columns of images
            whose sides are not multiples of the patch size (as a strided
            patch convolution does) rather than refuse them (and the last
            frames of clips whose length is not a multiple of
            `tubelet_size`).
        tubelet_size: None (default: images) or an int `t`: the inputs are
            video clips, cut into tubelets of `t` frames by `ph x pw`
            pixels (VideoMAE's and ViViT's 3D patches), each flattened in
            (frame, row, column, channel) order, which matches a PyTorch
            `Conv3d` kernel `(D, C, t, ph, pw)` transposed to
            `(t, ph, pw, C, D)`.

    Input shape:
        `(batch, height, width, channels)`, channels last; height and width
        must be multiples of the patch size unless `crop`. With
        `tubelet_size`: clips `(batch, frames, height, width, channels)`,
        frames a multiple of `t`.

    Returns:
        `(batch, height // ph, width // pw, ph * pw * channels)`; with
        `tubelet_size`, `(batch, frames // t, height // ph, width // pw,
        t * ph * pw * channels)`.

    Example:

    >>> import numpy as np
    >>> patches = Patches(4)(np.zeros((2, 8, 12, 3), "float32"))
    >>> tuple(patches.shape)
    (2, 2, 3, 48)
    >>> tuple(Patches(4, crop=True)(np.zeros((2, 10, 12, 3), "float32")).shape)
    (2, 2, 3, 48)
    >>> tuple(Patches(4, tubelet_size=2)(np.zeros((2, 6, 8, 12, 3), "float32")).shape)
    (2, 3, 2, 3, 96)
    """

    def __init__(self, patch_size, crop=False, tubelet_size=None, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = pair(patch_size, "patch_size")
        self.crop = check_bool(crop, "crop")
        self.tubelet_size = check_positive_int(tubelet_size, "tubelet_size", allow_none=True)
        self.input_spec = keras.layers.InputSpec(ndim=4 if tubelet_size is None else 5)

    @property
    def cell(self):
        """The input extent of one patch: `(ph, pw)`, or `(t, ph, pw)` for clips."""
        return self.patch_size if self.tubelet_size is None else (self.tubelet_size,) + self.patch_size

    def _check_size(self, sizes):
        if self.crop:
            return
        axes = ("height", "width") if self.tubelet_size is None else ("frames", "height", "width")
        for size, p, axis in zip(sizes, self.cell, axes):
            if size is not None and size % p:
                what = "tubelet size" if axis == "frames" else "patch size"
                kind = "image" if self.tubelet_size is None else "clip"
                tubelet = "" if self.tubelet_size is None else f", tubelet_size={self.tubelet_size}"
                raise ValueError(
                    f"The {kind} {axis} must be divisible by the {what}. "
                    f"Received: {kind} size={tuple(sizes)}, patch_size={self.patch_size}{tubelet}"
                )

    def build(self, input_shape):
        self._check_size(input_shape[1:-1])
        self.built = True

    def call(self, images):
        static = images.shape
        self._check_size(static[1:-1])
        dynamic = ops.shape(images)
        sizes = [static[i] if static[i] is not None else dynamic[i] for i in range(1, len(static))]
        *sizes, channels = sizes
        cell = self.cell
        grid = [size // p for size, p in zip(sizes, cell)]
        if self.crop:
            images = images[(slice(None),) + tuple(slice(0, g * p) for g, p in zip(grid, cell))]
        # (batch, g0, p0, g1, p1, ..., C) -> (batch, g0, g1, ..., p0, p1, ..., C)
        split = [d for g, p in zip(grid, cell) for d in (g, p)]
        x = ops.reshape(images, [-1] + split + [channels])
        n = len(cell)
        x = ops.transpose(x, [0] + [1 + 2 * i for i in range(n)] + [2 + 2 * i for i in range(n)] + [1 + 2 * n])
        depth = channels
        for p in cell:
            depth = depth * p
        return ops.reshape(x, [-1] + grid + [depth])

    def compute_output_shape(self, input_shape):
        batch, *sizes, channels = input_shape
        self._check_size(sizes)
        grid = tuple(None if size is None else size // p for size, p in zip(sizes, self.cell))
        depth = None if channels is None else channels * math.prod(self.cell)
        return (batch,) + grid + (depth,)

    def get_config(self):
        config = super().get_config()
        config["patch_size"] = self.patch_size
        config["crop"] = self.crop
        config["tubelet_size"] = self.tubelet_size
        return config
