"""Tasks: one module each, holding its task model, its one-call function and its post-processing.

- `keras_vit.tasks.images`: reading and preparing images, shared by every task;
- `keras_vit.tasks.classification`: `classify` (image files to named
  probabilities) and `decode_predictions`;
- `keras_vit.tasks.zero_shot`: `ImageTextModel` (two towers in one
  embedding space), zero-shot classifiers and retrieval.

The encoders stay in `keras_vit.models`; a task model wraps one.
"""
