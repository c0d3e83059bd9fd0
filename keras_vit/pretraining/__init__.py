"""Self-supervised pre-training by masked patch prediction (paper §4.6).

The paper's last experiment: corrupt half of the patch embeddings of an
image and train the ViT to predict, for every corrupted patch, its mean
colour in 3 bits per channel (512 classes), much as BERT predicts masked
words. ViT-B/16 pre-trained this way on JFT reached 79.9 % on ImageNet after
fine-tuning, 2 % over training from scratch (and 4 % below supervised
pre-training).

- `targets`: `mean_color_targets`, `downsized_patch_targets`,
  `pixel_targets` (the paper's three target settings).
- `corruption`: `corruption_plan`, `other_patch_indices`,
  `apply_corruption`.
- `task`: `MaskedPatchPrediction`, a `keras.Model` that trains a
  `keras_vit.ViT`/`ViTHybrid` encoder in place, and `MaskedPatchLoss`.

The recipe (Adam, lr 2e-4, warm-up, cosine decay) is
`keras_vit.training.compile_for_masked_patch_prediction`; the script is
`examples/pretrain_masked_patches.py`.

Example:

>>> import numpy as np
>>> images = np.zeros((2, 32, 32, 3), "uint8")    # raw [0, 255] images
>>> mean_color_targets(images, patch_size=8).shape  # 4x4 patches, class 0 (black)
(2, 16)
>>> plan = np.asarray(corruption_plan(2, 16, seed=0))
>>> [int((plan[i] > 0).sum()) for i in range(2)]    # half of each image corrupted
[8, 8]

Reference:
    Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR 2021,
    arXiv:2010.11929, §4.6 and App. B.1.2.
"""

from keras_vit.pretraining.corruption import (
    KEPT,
    MASKED,
    REPLACED,
    UNTOUCHED,
    apply_corruption,
    corruption_plan,
    num_corrupted,
    other_patch_indices,
)
from keras_vit.pretraining.targets import (
    downsized_patch_targets,
    mean_color_targets,
    num_color_classes,
    pixel_targets,
)
from keras_vit.pretraining.task import TARGETS, MaskedPatchLoss, MaskedPatchPrediction
