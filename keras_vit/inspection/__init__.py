"""Looking inside a ViT: the analyses of the paper's §4.5, their plots, few-shot evaluation.

- `keras_vit.inspection.analyses` (its functions are this package's):
  attention maps and rollout, mean attention distance, position-embedding
  similarity, embedding filters;
- `keras_vit.inspection.plots`: PNG figures of those analyses;
- `keras_vit.inspection.evaluation`: few-shot linear evaluation of frozen
  representations (paper §4.1).
"""

from keras_vit.inspection.analyses import (
    HEAD_FUSIONS,
    attention_maps,
    attention_rollout,
    effective_patch_size,
    embedding_filters,
    mean_attention_distance,
    patch_distances,
    position_embedding_similarity,
)
