"""`TokenPooling`: reduces a token sequence to one vector."""

import keras
from keras import ops

POOLING_MODES = ("token", "avg", "max", "gap")


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """Reduces `(batch, tokens, D)` to `(batch, D)`.

    Args:
        mode: "token" takes the class token (the first token); "avg" and "max"
            reduce over the patch tokens (those after the `num_prefix_tokens`
            prefix); "gap" averages over every token (the official "gap"
            classifier, used by models without a class token).
        num_prefix_tokens: int, number of leading non-patch tokens (1 with a
            class token, else 0).

    Example:

    >>> import keras, numpy as np
    >>> x = np.arange(6, dtype="float32").reshape(1, 3, 2)
    >>> y = TokenPooling("avg", num_prefix_tokens=1)(x)
    >>> keras.ops.convert_to_numpy(y).tolist()
    [[3.0, 4.0]]
    """

    def __init__(self, mode="token", num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        if mode not in POOLING_MODES:
            raise ValueError(
                f"`mode` must be one of {POOLING_MODES}. Received: mode={mode!r}"
            )
        if mode == "token" and num_prefix_tokens < 1:
            raise ValueError(
                "mode='token' needs a class token, but the model has none "
                f"(num_prefix_tokens={num_prefix_tokens})."
            )
        self.mode = mode
        self.num_prefix_tokens = int(num_prefix_tokens)

    def call(self, x):
        if self.mode == "token":
            return x[:, 0]
        if self.mode == "gap":
            return ops.mean(x, axis=1)
        patches = x[:, self.num_prefix_tokens :]
        if self.mode == "avg":
            return ops.mean(patches, axis=1)
        return ops.max(patches, axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update({"mode": self.mode, "num_prefix_tokens": self.num_prefix_tokens})
        return config
