"""Preparing images as a checkpoint expects: scaling, resizing and cropping, NaFlex batches.

- `keras_vit.preprocessing.scaling`: `preprocess_input` and the scaling
  modes (`MODES`: Inception's [-1, 1], ImageNet mean/std, ...);
- `keras_vit.preprocessing.crops`: `center_crop` and `resize_and_crop`
  (a `Preprocessing` record's own resize, filter and crop);
- `keras_vit.preprocessing.naflex`: images of any size as one padded batch
  of patches (`naflex_inputs`, `naflex_grid`);
- `keras_vit.preprocessing.dense`: `DenseProcessing`, the depth and
  segmentation checkpoints' processors (keep-aspect sizes, padding, EoMT's
  overlapping squares).

A model loaded from a preset carries its checkpoint's `Preprocessing` record
(`model.preprocessing`), which each of them reads.
"""

from keras_vit.preprocessing.crops import (
    INTERPOLATIONS,
    PIL_FILTERS,
    center_crop,
    crop_geometry,
    resize_and_crop,
    shorter_side_geometry,
)
from keras_vit.preprocessing.naflex import naflex_grid, naflex_inputs
from keras_vit.preprocessing.scaling import IMAGENET_MEAN, IMAGENET_STD, MODES, Preprocessing, preprocess_input
