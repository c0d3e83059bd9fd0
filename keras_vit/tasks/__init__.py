"""Tasks: one module each, holding its task model, its one-call function and its post-processing.

- `keras_vit.tasks.images`: reading and preparing images, shared by every task;
- `keras_vit.tasks.classification`: `classify` (image files to named
  probabilities) and `decode_predictions`;
- `keras_vit.tasks.zero_shot`: `ImageTextModel` (two towers in one
  embedding space), zero-shot classifiers and retrieval;
- `keras_vit.tasks.depth`: `DepthEstimator` (DPT heads: Depth Anything,
  DPT, CHMv2) and `estimate_depth`;
- `keras_vit.tasks.segmentation`: `Segmenter` (EoMT, and a linear head)
  and `segment`;
- `keras_vit.tasks.dense_data`, `keras_vit.tasks.dense_training`: folders
  of images with masks or depth maps, the losses and metrics,
  sliding-window inference;
- `keras_vit.tasks.segmentation_outputs`, `keras_vit.tasks.pictures`: the
  segmentation post-processing; the pictures of depth maps and segments.

The dense tasks' images are prepared by `keras_vit.preprocessing.dense`
and their checkpoints read by `keras_vit.presets.tasks`.

The encoders stay in `keras_vit.models`; a task model wraps one.
"""
