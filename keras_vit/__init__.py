"""keras_vit: the Vision Transformer model zoo for Keras 3.

Works unchanged on the jax, tensorflow and torch backends (`KERAS_BACKEND`).

Each name below lives in the subpackage of its concern: models in
`keras_vit.models`, tasks (classification, zero-shot, depth, segmentation,
detection, promptable masks, video classification) in `keras_vit.tasks`, presets (task presets
included) and the resolver in `keras_vit.presets`, input scaling in
`keras_vit.preprocessing`, export in `keras_vit.export`.
"""

from keras_vit import architectures, inspection, layers, pretraining, tasks, text
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
    ViTGiant14,
    ViTGigantic14,
    ViTConvStem,
    ViTHybrid,
    ViTL16,
    ViTL32,
    ViTS16,
    ViTS32,
    ViTTi16,
    feature_model,
)
from keras_vit.version import __version__
from keras_vit.preprocessing import preprocess_input
from keras_vit.presets import from_preset, list_presets, load_model
from keras_vit.families.timm_zoo import list_models
from keras_vit.tasks.classification import Prediction, classify, decode_predictions
from keras_vit.tasks.video import classify_video
from keras_vit.preprocessing.dense import DenseProcessing
from keras_vit.tasks.depth import DepthEstimator, estimate_depth
from keras_vit.tasks.images import load_images
from keras_vit.tasks.segmentation import Segmenter, segment
from keras_vit.tasks.zero_shot import ImageTextModel
from keras_vit.tasks.detection import FixedQueryDetector, OpenVocabularyDetector, detect
from keras_vit.tasks.mask_generation import generate_masks
from keras_vit.tasks.prompt_masks import PromptableSegmenter, segment_prompts
from keras_vit.weights.patch_resample import resample_patch_embedding
from keras_vit.memory import MemoryPlan, plan_memory


def __getattr__(name):
    # `keras_vit.export` without `from keras_vit import export`: loaded on
    # first use (it imports no exporter until one runs); `export_int8` is its
    # int8 module.
    import importlib

    if name == "export":
        return importlib.import_module("keras_vit.export")
    if name == "export_int8":
        return importlib.import_module("keras_vit.export.int8")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
