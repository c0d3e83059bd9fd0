"""`ConvNeck`: the convolutional neck of SAM's and ViTDet's image encoders."""

import keras
from keras import ops

from keras_vit.layers.relative_position import static_grid
from keras_vit.validation import check_positive_float, check_positive_int


@keras.saving.register_keras_serializable(package="keras_vit")
class ConvNeck(keras.layers.Layer):
    """Patch tokens to a feature map of `channels`: a 1 x 1 convolution, a
    LayerNorm over the channels, a 3 x 3 convolution (zero padding), a
    LayerNorm; the convolutions have no bias (sublayers `conv_0`, `norm_0`,
    `conv_1`, `norm_1`).

    Args:
        channels: int, the output channels (SAM's 256).
        epsilon: float, default 1e-6: the norms' epsilon.

    Call arguments:
        tokens: `(batch, h * w, D)` patch tokens, row by row.
        grid: a `(batch, h, w, ...)` tensor on their grid (the patches), or
            `(h, w)`.

    Returns:
        `(batch, h * w, channels)`, row by row.

    Example:

    >>> import numpy as np
    >>> neck = ConvNeck(channels=8)
    >>> tuple(neck(np.ones((2, 12, 16), "float32"), grid=(3, 4)).shape)
    (2, 12, 8)
    """

    def __init__(self, channels, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.channels = check_positive_int(channels, "channels")
        self.epsilon = check_positive_float(epsilon, "epsilon")

    def build(self, tokens_shape, grid_shape=None):
        dim = tokens_shape[-1]
        self.conv_0 = keras.layers.Conv2D(self.channels, 1, use_bias=False, data_format="channels_last", name="conv_0",
                                          dtype=self.dtype_policy)
        self.conv_0.build((None, None, None, dim))
        self.conv_1 = keras.layers.Conv2D(self.channels, 3, padding="same", use_bias=False, data_format="channels_last",
                                          name="conv_1",
                                          dtype=self.dtype_policy)
        self.conv_1.build((None, None, None, self.channels))
        self.norm_0, self.norm_1 = (
            keras.layers.LayerNormalization(epsilon=self.epsilon, name=f"norm_{i}", dtype=self.dtype_policy)
            for i in range(2)
        )
        for norm in (self.norm_0, self.norm_1):
            norm.build((None, None, None, self.channels))
        self.built = True

    def call(self, tokens, grid):
        height, width = static_grid(grid)
        x = ops.reshape(tokens, (-1, height, width, tokens.shape[-1]))
        x = self.norm_1(self.conv_1(self.norm_0(self.conv_0(x))))
        return ops.reshape(x, (-1, height * width, self.channels))

    def compute_output_spec(self, tokens, grid):
        return keras.KerasTensor(tuple(tokens.shape[:2]) + (self.channels,), dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"channels": self.channels, "epsilon": self.epsilon})
        return config
