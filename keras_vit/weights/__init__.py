"""Pretrained weights: registry, downloads and checkpoint loaders."""

from keras_vit.weights.registry import WEIGHTS, weights_names
