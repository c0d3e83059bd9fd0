"""keras_vit: the Vision Transformer model zoo for Keras 3.

Works unchanged on the jax, tensorflow and torch backends (`KERAS_BACKEND`).
"""

from keras_vit import layers
from keras_vit.models import (
    ARCHITECTURES,
    R26ViTB32,
    R26ViTS32,
    R50ViTB16,
    R50ViTL32,
    RViTTi16,
    ViT,
    ViTB8,
    ViTB16,
    ViTB32,
    ViTH14,
    ViTHybrid,
    ViTL16,
    ViTL32,
    ViTS16,
    ViTS32,
    ViTTi16,
)
from keras_vit.version import __version__
from keras_vit.preprocessing import decode_predictions, preprocess_input
