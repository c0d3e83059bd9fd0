"""`TokenPooling` reduces a token sequence to one vector; `TokenGrid` splits
it into prefix tokens and the patch tokens on their grid."""

import keras
from keras import ops

from keras_vit.validation import check_bool, check_choice, check_int

POOLING_MODES = ("token", "distillation", "avg", "max", "token_avg")
# The official code's name for averaging the tokens of a model without a
# class token; with no prefix tokens that is "avg". Kept so that configs
# saved with it load.
_ALIASES = {"gap": "avg"}


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """Reduces `(batch, tokens, D)` to `(batch, D)`.

    Args:
        mode: "token" takes the class token (the first token);
            "distillation" DeiT's distillation token (the second); "avg" and
            "max" reduce over the patch tokens (those after the
            `num_prefix_tokens` prefix: class, distillation and register
            tokens). "gap", the official classifier's name, is "avg".
            "token_avg" concatenates the class token and the patch tokens'
            average, `(batch, 2 * D)` (the input of DINOv2's linear
            classifiers, transformers' `Dinov2ForImageClassification`).
        num_prefix_tokens: int, number of leading non-patch tokens (1 with a
            class token alone, else 0).

    Call arguments:
        x: `(batch, tokens, D)`.
        token_mask: None (default: every token) or a boolean `(batch,
            tokens)`: "avg", "max" and "token_avg" reduce over the patch
            tokens marked True only (the valid patches of a padded NaFlex
            batch).

    Example:

    >>> import keras, numpy as np
    >>> x = np.arange(6, dtype="float32").reshape(1, 3, 2)
    >>> y = TokenPooling("avg", num_prefix_tokens=1)(x)
    >>> keras.ops.convert_to_numpy(y).tolist()
    [[3.0, 4.0]]
    >>> valid = np.array([[True, True, False]])
    >>> keras.ops.convert_to_numpy(TokenPooling("avg", 1)(x, token_mask=valid)).tolist()
    [[2.0, 3.0]]
    """

    def __init__(self, mode="token", num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        mode = _ALIASES.get(mode, mode)
        check_choice(mode, POOLING_MODES, "mode")
        needed = {"token": 1, "token_avg": 1, "distillation": 2}.get(mode, 0)
        if num_prefix_tokens < needed:
            raise ValueError(
                f"mode={mode!r} needs {needed} prefix token(s) (class token"
                f"{', distillation token' if needed > 1 else ''}). Received: "
                f"num_prefix_tokens={num_prefix_tokens}"
            )
        self.mode = mode
        self.num_prefix_tokens = int(num_prefix_tokens)

    @property
    def leading_tokens(self):
        """How many leading tokens the pooling reads (None: patch tokens too)."""
        return {"token": 1, "distillation": 2}.get(self.mode)

    def call(self, x, token_mask=None):
        if self.mode == "token":
            return x[:, 0]
        if self.mode == "distillation":
            return x[:, 1]
        patches = x[:, self.num_prefix_tokens :]
        if token_mask is None:
            mean = ops.mean(patches, axis=1)
        else:
            keep = ops.cast(ops.convert_to_tensor(token_mask), "bool")[:, self.num_prefix_tokens :, None]
            weights = ops.cast(keep, patches.dtype)
            mean = ops.sum(patches * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1.0)
        if self.mode == "token_avg":
            return ops.concatenate([x[:, 0], mean], axis=-1)
        if self.mode == "avg":
            return mean
        if token_mask is not None:
            patches = ops.where(keep, patches, ops.cast(float("-inf"), patches.dtype))
        return ops.amax(patches, axis=1)

    def compute_output_shape(self, x_shape, token_mask_shape=None):
        width = x_shape[-1]
        if self.mode == "token_avg" and width is not None:
            width *= 2
        return (x_shape[0], width)

    def get_config(self):
        config = super().get_config()
        config.update({"mode": self.mode, "num_prefix_tokens": self.num_prefix_tokens})
        return config


def split_token_grid(tokens, grid_like, num_prefix_tokens, spatial=True):
    """`TokenGrid`'s computation on tensors (see there): `[patch tokens, prefix tokens]`."""
    prefix = tokens[:, :num_prefix_tokens]
    patches = tokens[:, num_prefix_tokens:]
    if spatial:
        static, dynamic = grid_like.shape, ops.shape(grid_like)
        # (h, w), or (t, h, w) for a clip's tubelets.
        grid = [static[i] if static[i] is not None else dynamic[i] for i in range(1, len(static) - 1)]
        patches = ops.reshape(patches, [-1] + grid + [tokens.shape[-1]])
    return [patches, prefix]


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenGrid(keras.layers.Layer):
    """Splits tokens into the patch tokens (on their grid) and the prefix tokens.

    Called on `[tokens, grid_like]`: `tokens` `(batch, prefix + h * w, D)`,
    `grid_like` any `(batch, h, w, ...)` tensor on the token grid (the
    patches), which gives `(h, w)` also when they are only known at run
    time (a symbolic model on images of any size).

    Args:
        num_prefix_tokens: int, the leading non-patch tokens (class,
            distillation, register tokens).
        spatial: bool, default True: the patch tokens as `(batch, h, w, D)`
            (NHWC); False keeps the sequence `(batch, h * w, D)` (NLC).

    Returns:
        `[patch tokens, prefix tokens (batch, prefix, D)]`.

    Example:

    >>> import numpy as np
    >>> tokens = np.arange(2 * 7 * 4, dtype="float32").reshape(2, 7, 4)
    >>> grid, prefix = TokenGrid(1)([tokens, np.zeros((2, 2, 3, 1), "float32")])
    >>> tuple(grid.shape), tuple(prefix.shape)
    ((2, 2, 3, 4), (2, 1, 4))
    """

    def __init__(self, num_prefix_tokens, spatial=True, **kwargs):
        super().__init__(**kwargs)
        self.num_prefix_tokens = check_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
        self.spatial = check_bool(spatial, "spatial")

    def call(self, inputs):
        return split_token_grid(*inputs, self.num_prefix_tokens, self.spatial)

    def compute_output_shape(self, input_shape):
        tokens, grid_like = input_shape
        batch, count, dim = tokens
        prefix = (batch, self.num_prefix_tokens, dim)
        if self.spatial:
            return [(batch, *grid_like[1:-1], dim), prefix]
        patches = None if count is None else count - self.num_prefix_tokens
        return [(batch, patches, dim), prefix]

    def get_config(self):
        config = super().get_config()
        config.update({"num_prefix_tokens": self.num_prefix_tokens, "spatial": self.spatial})
        return config
