"""keras_vit: the Vision Transformer model zoo for Keras 3.

Works unchanged on the jax, tensorflow and torch backends (`KERAS_BACKEND`).
"""

from keras_vit import architectures, inspection, layers, pretraining, text
from keras_vit.models import (
    ARCHITECTURE_CONFIGS,
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
    feature_model,
)
from keras_vit.version import __version__
from keras_vit.preprocessing import decode_predictions, preprocess_input
from keras_vit.presets import from_preset
from keras_vit.classification import Prediction, classify, load_images
from keras_vit.image_text import ImageTextModel
from keras_vit.resolver import load_model
from keras_vit.weights.patch_resample import resample_patch_embedding


def __getattr__(name):
    # `keras_vit.export` without `from keras_vit import export`: loaded on
    # first use (it imports no exporter until one runs).
    if name in ("export", "export_int8"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
