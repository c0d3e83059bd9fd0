"""`Patches`: splits images into a grid of flattened, non-overlapping patches."""

import keras
from keras import ops

from keras_vit.validation import check_bool, pair


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
            patch convolution does) rather than refuse them.

    Input shape:
        `(batch, height, width, channels)`, channels last; height and width
        must be multiples of the patch size unless `crop`.

    Returns:
        `(batch, height // ph, width // pw, ph * pw * channels)`.

    Example:

    >>> import numpy as np
    >>> patches = Patches(4)(np.zeros((2, 8, 12, 3), "float32"))
    >>> tuple(patches.shape)
    (2, 2, 3, 48)
    >>> tuple(Patches(4, crop=True)(np.zeros((2, 10, 12, 3), "float32")).shape)
    (2, 2, 3, 48)
    """

    def __init__(self, patch_size, crop=False, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = pair(patch_size, "patch_size")
        self.crop = check_bool(crop, "crop")
        self.input_spec = keras.layers.InputSpec(ndim=4)

    def _check_size(self, height, width):
        if self.crop:
            return
        ph, pw = self.patch_size
        for size, p, axis in ((height, ph, "height"), (width, pw, "width")):
            if size is not None and size % p:
                raise ValueError(
                    f"The image {axis} must be divisible by the patch size. "
                    f"Received: image size={(height, width)}, "
                    f"patch_size={self.patch_size}"
                )

    def build(self, input_shape):
        self._check_size(input_shape[1], input_shape[2])
        self.built = True

    def call(self, images):
        ph, pw = self.patch_size
        static = images.shape
        self._check_size(static[1], static[2])
        dynamic = ops.shape(images)
        height = static[1] if static[1] is not None else dynamic[1]
        width = static[2] if static[2] is not None else dynamic[2]
        channels = static[3] if static[3] is not None else dynamic[3]
        gh, gw = height // ph, width // pw
        if self.crop:
            images = images[:, : gh * ph, : gw * pw]
        x = ops.reshape(images, (-1, gh, ph, gw, pw, channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        return ops.reshape(x, (-1, gh, gw, ph * pw * channels))

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        ph, pw = self.patch_size
        self._check_size(height, width)
        gh = None if height is None else height // ph
        gw = None if width is None else width // pw
        depth = None if channels is None else ph * pw * channels
        return (batch, gh, gw, depth)

    def get_config(self):
        config = super().get_config()
        config["patch_size"] = self.patch_size
        config["crop"] = self.crop
        return config
