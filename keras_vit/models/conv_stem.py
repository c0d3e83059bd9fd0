"""`ViTConvStem`: a ViT on a stem of strided convolutions (MobileCLIP's image towers)."""

import math

import keras

from keras_vit.models.vit import ViT
from keras_vit.validation import check_positive_float


def _check_stem(channels, strides):
    try:
        channels, strides = tuple(channels), tuple(strides)
    except TypeError:
        channels = strides = ()
    ints = all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in channels + strides)
    if not channels or len(channels) != len(strides) or not ints:
        raise ValueError(
            "`stem_channels` and `stem_strides` must be sequences of positive ints of one length (a "
            f"convolution per entry). Received: stem_channels={channels!r}, stem_strides={strides!r}"
        )
    return channels, strides


@keras.saving.register_keras_serializable(package="keras_vit")
class ViTConvStem(ViT):
    """A Vision Transformer whose patches are cut from a convolutional stem.

    Each stem convolution has a kernel equal to its stride (non-overlapping
    windows: a patchify stem), no bias, then BatchNorm and the exact GELU;
    the ViT's patch embedding follows on the stem's feature map (its
    `patch_size` in stem pixels). MobileCLIP's image towers (timm's
    `vit_base_mci_224`: 4, then 2, then the 2 x 2 patch embedding) are
    this model. Layers `stem_conv_{i}`, `stem_norm_{i}`.

    Args:
        stem_channels: sequence of ints, default (192, 192): the output
            channels of each stem convolution.
        stem_strides: sequence of ints, default (4, 2): each convolution's
            stride and kernel size.
        stem_norm_epsilon: float, default 1e-5: the BatchNorms' epsilon.
        patch_size: int or `(height, width)`, default 2: the patch size on
            the stem's feature map.
        name: model name, default "vit_conv_stem".
        **kwargs: every other argument of `keras_vit.ViT`.

    Returns:
        A `keras.Model`, as `keras_vit.ViT`; images must be multiples of
        `stem_stride * patch_size` pixels.

    Example:

    >>> import numpy as np
    >>> model = ViTConvStem(stem_channels=(8, 8), stem_strides=(2, 2), image_size=32, patch_size=2,
    ...                     hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=3)
    >>> model.stem_stride, model.grid_size, tuple(model(np.zeros((1, 32, 32, 3), "float32")).shape)
    (4, (4, 4), (1, 3))

    Reference:
        Vasu et al., "MobileCLIP: Fast Image-Text Models through Multi-Modal
        Reinforced Training", arXiv:2311.17049.
    """

    def __init__(self, stem_channels=(192, 192), stem_strides=(4, 2), stem_norm_epsilon=1e-5, patch_size=2,
                 name="vit_conv_stem", **kwargs):
        # Read by the hooks below, which ViT.__init__ calls while building.
        self.stem_channels, self.stem_strides = _check_stem(stem_channels, stem_strides)
        self.stem_norm_epsilon = check_positive_float(stem_norm_epsilon, "stem_norm_epsilon")
        super().__init__(patch_size=patch_size, name=name, **kwargs)

    def architecture_config(self):
        config = super().architecture_config()
        config.update(stem_channels=self.stem_channels, stem_strides=self.stem_strides)
        return config

    @property
    def stem_stride(self):
        """Downsampling of the stem before the patches: the product of its strides."""
        return math.prod(self.stem_strides)

    def _stem(self, inputs, dtype):
        x = inputs
        for i, (channels, stride) in enumerate(zip(self.stem_channels, self.stem_strides)):
            x = keras.layers.Conv2D(channels, stride, strides=stride, use_bias=False, data_format="channels_last",
                                    name=f"stem_conv_{i}", dtype=dtype)(x)
            x = keras.layers.BatchNormalization(epsilon=self.stem_norm_epsilon, name=f"stem_norm_{i}",
                                                dtype=dtype)(x)
            # Keras' "gelu" is the exact (erf) GELU, as torch's nn.GELU.
            x = keras.layers.Activation("gelu", name=f"stem_gelu_{i}", dtype=dtype)(x)
        return x

    def get_config(self):
        config = super().get_config()
        config.update(stem_channels=list(self.stem_channels), stem_strides=list(self.stem_strides),
                      stem_norm_epsilon=self.stem_norm_epsilon)
        return config
