"""Vision Transformer models and their named variants."""

from keras_vit.models.variants import (
    ARCHITECTURES,
    CONSTRUCTORS,
    ViTB8,
    ViTB16,
    ViTB32,
    ViTH14,
    ViTL16,
    ViTL32,
    ViTS16,
    ViTS32,
    ViTTi16,
    architecture_name,
)
from keras_vit.models.vit import ViT
