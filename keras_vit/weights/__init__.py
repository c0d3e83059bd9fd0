"""Pretrained weights: registry, downloads and checkpoint loaders."""

from keras_vit.weights.registry import WEIGHTS, weights_names
from keras_vit.weights.describe import describe_weights
from keras_vit.weights.loader import load_checkpoint, load_weights
from keras_vit.weights.registry import WeightsRecord, get_record, list_records, markdown_table
from keras_vit.weights.download import WeightsDownloadError, fetch
