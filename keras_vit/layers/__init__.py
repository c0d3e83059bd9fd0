"""The Keras layers of the Vision Transformer.

They say what they compute in `keras.ops` and import no backend library;
their projections, attention and sublayer calls go through `keras_vit.kernels`,
which takes a backend's fast path where one pays on the machine at hand and
the portable `keras.ops` form otherwise (docs/performance.md).
"""

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.attention_pool import AttentionPoolHead
from keras_vit.layers.image_preprocessing import ImagePreprocessing
from keras_vit.layers.interpolation import interpolate_position_embedding
from keras_vit.layers.map_head import MapHead
from keras_vit.layers.norms import NORMS, norm_layer
from keras_vit.layers.sincos import sincos_position_embedding
from keras_vit.layers.swiglu import SwiGluMlp, swiglu_hidden_width
from keras_vit.layers.patch_encoder import PatchEncoder, resize_position_grid
from keras_vit.layers.patch_dropout import PatchDropout, kept_patches
from keras_vit.layers.patches import Patches
from keras_vit.layers.resnet import (
    BottleneckUnit,
    GroupNorm,
    MaxPool2D,
    ResNetStage,
    StdConv2D,
    group_norm,
    resnet_backbone,
)
from keras_vit.layers.pooling import TokenGrid, TokenPooling
from keras_vit.layers.relative_position import RelativePositionMlp, RelativePositionTable
from keras_vit.layers.pyramid import SimpleFeaturePyramid
from keras_vit.layers.transformer import MlpBlock, TransformerBlock

__all__ = [
    "AttentionPoolHead",
    "BottleneckUnit",
    "GroupNorm",
    "ImagePreprocessing",
    "MaxPool2D",
    "ResNetStage",
    "SimpleFeaturePyramid",
    "StdConv2D",
    "group_norm",
    "resnet_backbone",
    "MlpBlock",
    "MultiHeadSelfAttention",
    "PatchDropout",
    "PatchEncoder",
    "Patches",
    "RelativePositionMlp",
    "RelativePositionTable",
    "TokenGrid",
    "TokenPooling",
    "TransformerBlock",
    "kept_patches",
    "resize_position_grid",
    "MapHead",
    "NORMS",
    "norm_layer",
    "SwiGluMlp",
    "interpolate_position_embedding",
    "sincos_position_embedding",
    "swiglu_hidden_width",
]
