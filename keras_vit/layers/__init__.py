"""Backend-agnostic Keras layers of the Vision Transformer."""

from keras_vit.layers.attention import MultiHeadSelfAttention
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
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.pyramid import SimpleFeaturePyramid
from keras_vit.layers.transformer import MlpBlock, TransformerBlock

__all__ = [
    "BottleneckUnit",
    "GroupNorm",
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
    "TokenPooling",
    "TransformerBlock",
    "kept_patches",
    "resize_position_grid",
]
