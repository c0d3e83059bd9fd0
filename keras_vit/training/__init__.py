"""Training ViT classifiers with `model.fit`, at any scale.

- `recipes`: the paper's optimizers, schedules and losses
  (`finetune_optimizer`, `pretrain_optimizer`, `compile_for_finetuning`,
  `masked_patch_optimizer` for self-supervised pre-training).
- `data`: tf.data training/evaluation pipelines (imported lazily).
- `datasets`: tfds datasets, image folders, scikit-learn digits.
- `distribute`: `get_distribution(name)` for tf.distribute strategies,
  TPUs and the jax data/model-parallel distributions.
- `callbacks`: a resumable run directory (`run_callbacks`), an exact
  number of updates (`StopAfterUpdates`), presets written during `fit`
  (`SavePreset`).
- `presets`: a trained classifier as a preset that predicts probabilities
  (`save_trained_preset`).
- `multiprocess`: joining several processes (hosts), NumPy inputs sharded
  per process; `tf_multi_worker`: Keras 3's `MultiWorkerMirroredStrategy`
  fault worked around.

TensorFlow is needed only by `data` and `datasets` (and by the tensorflow
strategies); the recipes and callbacks are backend-neutral.
"""

from keras_vit.training.callbacks import (
    SaveFinalWeights,
    SavePreset,
    StopAfterUpdates,
    run_callbacks,
)
from keras_vit.training.distribute import (
    TrainingDistribution,
    connect_tpu,
    get_distribution,
)
from keras_vit.training import multiprocess
from keras_vit.training.recipes import (
    SparseCategoricalCrossentropyWithSmoothing,
    WarmupDecay,
    accumulation_steps,
    classification_loss,
    compile_for_finetuning,
    compile_for_masked_patch_prediction,
    compile_for_pretraining,
    default_warmup_steps,
    finetune_optimizer,
    masked_patch_optimizer,
    pretrain_optimizer,
    scaled_learning_rate,
)
from keras_vit.training.presets import save_trained_preset
