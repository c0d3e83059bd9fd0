"""`PatchDropout`: training on a random subset of the patch tokens (FLIP)."""

import keras
from keras import ops

from keras_vit.layers.seeds import check_seed
from keras_vit.validation import check_int, check_rate


def kept_patches(num_patches, rate):
    """How many of `num_patches` patch tokens `PatchDropout(rate)` keeps.

    `max(1, int(num_patches * (1 - rate)))`, timm's count.

    Example:

    >>> kept_patches(196, 0.5), kept_patches(49, 0.75), kept_patches(4, 0.99)
    (98, 12, 1)
    """
    return max(1, int(num_patches * (1.0 - rate)))


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchDropout(keras.layers.Layer):
    """Keeps a random subset of the patch tokens while training.

    In training, each sample keeps `kept_patches(N, rate)` of its `N` patch
    tokens, drawn uniformly without replacement (an independent draw per
    sample); the `num_prefix_tokens` leading tokens (class, distillation,
    register tokens) are always kept, in front. The kept patches stay in
    their original order. At inference the layer is the identity. Position
    embeddings must already be added (the layer sits after the embedding),
    so each kept token still knows where it came from. This is the patch
    dropout of FLIP (Li et al. 2023) and timm's `patch_drop_rate`: training
    on half the patches costs about half the compute.

    Args:
        rate: float in [0, 1), the fraction of patch tokens dropped.
        num_prefix_tokens: int >= 0, leading tokens that are never dropped.
        seed: None (default: drawn from Keras' global generator) or an int.

    Input shape:
        `(batch, num_prefix_tokens + N, D)`.

    Returns:
        `(batch, num_prefix_tokens + kept_patches(N, rate), D)` in training,
        the input unchanged otherwise.

    Example:

    >>> import numpy as np
    >>> layer = PatchDropout(0.5, num_prefix_tokens=1, seed=0)
    >>> x = np.arange(9, dtype="float32").reshape(1, 9, 1)
    >>> tuple(layer(x, training=True).shape), tuple(layer(x).shape)
    ((1, 5, 1), (1, 9, 1))
    >>> float(layer(x, training=True)[0, 0, 0])  # the class token stays first
    0.0

    Reference:
        Li, Fan, Hu, Feichtenhofer, He, "Scaling Language-Image Pre-training
        via Masking", CVPR 2023, arXiv:2212.00794.
    """

    def __init__(self, rate, num_prefix_tokens=1, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = check_rate(rate, "rate")
        self.num_prefix_tokens = check_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
        self.seed = check_seed(seed)
        self.seed_generator = keras.random.SeedGenerator(self.seed)

    def call(self, x, training=None):
        if not training or self.rate == 0:
            return x
        prefix, patches = x[:, : self.num_prefix_tokens], x[:, self.num_prefix_tokens :]
        batch, count = ops.shape(patches)[0], ops.shape(patches)[1]
        keep = kept_patches(count, self.rate)
        noise = keras.random.uniform((batch, count), seed=self.seed_generator)
        # The `keep` smallest draws of each row, back in token order.
        chosen = ops.sort(ops.argsort(noise, axis=-1)[:, :keep], axis=-1)
        rows = ops.arange(batch, dtype=chosen.dtype)[:, None] * count
        flat = ops.reshape(patches, (-1, ops.shape(patches)[2]))
        kept = ops.take(flat, ops.reshape(chosen + rows, (-1,)), axis=0)
        kept = ops.reshape(kept, (batch, keep, ops.shape(patches)[2]))
        return ops.concatenate([prefix, kept], axis=1)

    def compute_output_shape(self, input_shape):
        # What a model's graph sees: the inference shape.
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"rate": self.rate, "num_prefix_tokens": self.num_prefix_tokens, "seed": self.seed}
        )
        return config
