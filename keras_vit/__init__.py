"""keras_vit: the Vision Transformer model zoo for Keras 3.

Works unchanged on the jax, tensorflow and torch backends (`KERAS_BACKEND`).
"""

from keras_vit import layers
from keras_vit.models import (
    ARCHITECTURES,
    ViT,
    ViTB8,
    ViTB16,
    ViTB32,
    ViTH14,
    ViTL16,
    ViTL32,
    ViTS16,
    ViTS32,
    ViTTi16,
)
from keras_vit.version import __version__
