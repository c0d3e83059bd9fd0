"""Tasks: one module each, holding its task model, its one-call function and its post-processing.

- `keras_vit.tasks.images`: reading and preparing images, shared by every
  task (one contract: grey, RGBA, channels-first, 16-bit, [0, 1] floats);
  `keras_vit.tasks.progress`: their progress over many images (Keras' bar
  on a terminal, plain lines in a log);
- `keras_vit.tasks.base`: what the task models share: `DenseTask` (the
  depth and segmentation models' base), `ExportableTask` (`model.export`
  of a functional task model) and `task_from_preset`;
- `keras_vit.tasks.classification`: `classify` (image files to named
  probabilities) and `decode_predictions`;
- `keras_vit.tasks.video`: `classify_video` (video clips, as arrays of
  frames or folders of frame images, to named probabilities: VideoMAE,
  ViViT), its frame sampling;
- `keras_vit.tasks.zero_shot`: `ImageTextModel` (two towers in one
  embedding space), zero-shot classifiers and retrieval;
- `keras_vit.tasks.depth`: `DepthEstimator` (DPT heads: Depth Anything,
  DPT, CHMv2) and `estimate_depth`;
- `keras_vit.tasks.segmentation`: `Segmenter` (EoMT, and a linear head)
  and `segment`;
- `keras_vit.tasks.dense_data`, `keras_vit.tasks.dense_training`: folders
  of images with masks or depth maps, the losses and metrics,
  sliding-window inference; `keras_vit.tasks.instance_data`: folders of
  images with instance or panoptic segments (keras_vit's, COCO's);
  `keras_vit.tasks.mask_classification`: EoMT's published loss (queries
  matched to segments);
- `keras_vit.tasks.segmentation_outputs`, `keras_vit.tasks.pictures`: the
  segmentation post-processing (and the label maps and per-segment masks
  `keras-vit segment` writes); the pictures of depth maps, segments,
  detections and masks with their prompts; `keras_vit.tasks.rle`: COCO's
  run-length encoding of masks, in the commands' JSON files;
- `keras_vit.tasks.detection`: open-vocabulary detection (OWL-ViT, OWLv2):
  `OpenVocabularyDetector`, `keras_vit.detect`; its post-processing in
  `keras_vit.tasks.detection_outputs`;
- `keras_vit.tasks.prompt_masks`: promptable segmentation (SAM):
  `PromptableSegmenter` (its `ImageEmbedder` and `PromptDecoder`),
  `keras_vit.segment_prompts`; the masks' post-processing in
  `keras_vit.tasks.mask_outputs`;
- `keras_vit.tasks.mask_generation`: every object of an image (SAM's
  automatic masks): `keras_vit.generate_masks`.

The dense tasks' images are prepared by `keras_vit.preprocessing.dense`.
Every task checkpoint is read by `keras_vit.from_preset`, through the one
table of task presets (`keras_vit.presets.tasks.TASK_PRESETS`).

The encoders stay in `keras_vit.models`; a task model wraps one.
"""
