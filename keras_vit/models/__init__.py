"""Vision Transformer models and their named variants."""

from keras_vit.models.variants import (
    ARCHITECTURE_CONFIGS,
    CONSTRUCTORS,
    R26ViTB32,
    R26ViTS32,
    R50ViTB16,
    R50ViTL32,
    RViTTi16,
    ViTB8,
    ViTB16,
    ViTB32,
    ViTH14,
    ViTGiant14,
    ViTGigantic14,
    ViTL16,
    ViTL32,
    ViTS16,
    ViTS32,
    ViTTi16,
    architecture_name,
)
from keras_vit.models.vit import ViT
from keras_vit.models.features import feature_model
from keras_vit.models.hybrid import ViTHybrid
from keras_vit.models.conv_stem import ViTConvStem
