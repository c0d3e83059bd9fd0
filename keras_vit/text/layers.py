"""The layers of a text tower around keras_vit's `TransformerBlock`:
`TextEmbedding` (token and position embeddings), `AttentionMask` (which
tokens each token attends to) and `TextPooling` (the token the text is
read from)."""

import keras
from keras import ops

from keras_vit.validation import check_bool, check_choice, check_int, check_positive_int

# How a text tower reads its text from the final tokens: "eos", the first
# end-of-text token (transformers' CLIP and MetaCLIP 2: the first position of
# `eos_token_id`); "argmax", the token of the largest id (OpenAI CLIP's rule,
# where the end-of-text token has the largest id; transformers keeps it for
# configs with the earlier `eos_token_id=2`); "last", the last token,
# padding or not (SigLIP, SigLIP 2).
TEXT_POOLINGS = ("eos", "argmax", "last")


@keras.saving.register_keras_serializable(package="keras_vit")
class TextEmbedding(keras.layers.Layer):
    """Token embeddings plus learned position embeddings.

    `x[b, t] = token_embedding[token_ids[b, t]] + position_embedding[t]`:
    the texts start at position 0 (CLIP, SigLIP, transformers' default
    `position_ids`), whichever side they are padded on.

    Args:
        vocabulary_size: int, the rows of `token_embedding`.
        max_length: int, the rows of `position_embedding` (the longest text).
        hidden_size: int, the embedding width.

    Call arguments:
        token_ids: `(batch, length)` integers, `length <= max_length`.

    Returns:
        `(batch, length, hidden_size)`.

    Example:

    >>> import numpy as np
    >>> layer = TextEmbedding(vocabulary_size=10, max_length=6, hidden_size=4)
    >>> tuple(layer(np.array([[1, 2, 3]])).shape)
    (1, 3, 4)
    """

    def __init__(self, vocabulary_size, max_length, hidden_size, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size = check_positive_int(vocabulary_size, "vocabulary_size")
        self.max_length = check_positive_int(max_length, "max_length")
        self.hidden_size = check_positive_int(hidden_size, "hidden_size")

    def build(self, input_shape):
        init = keras.initializers.RandomNormal(stddev=0.02)
        self.token_embedding = self.add_weight(
            name="token_embedding", shape=(self.vocabulary_size, self.hidden_size), initializer=init
        )
        self.position_embedding = self.add_weight(
            name="position_embedding", shape=(self.max_length, self.hidden_size), initializer=init
        )
        self.built = True

    def call(self, token_ids):
        length = token_ids.shape[1] if token_ids.shape[1] is not None else ops.shape(token_ids)[1]
        tokens = ops.take(ops.cast(self.token_embedding, self.compute_dtype), ops.cast(token_ids, "int32"), axis=0)
        positions = ops.cast(self.position_embedding, self.compute_dtype)[:length]
        return tokens + positions[None]

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.hidden_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "max_length": self.max_length,
                "hidden_size": self.hidden_size,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class AttentionMask(keras.layers.Layer):
    """Which keys each query may attend to, from a padding mask.

    `mask[b, q, k] = padding_mask[b, k] and (k <= q if causal)`: no token
    attends to padding, and with `causal` (CLIP) none to later tokens.
    transformers applies the same rule (its `create_causal_mask` and
    `create_bidirectional_mask` with the tokenizer's attention mask).

    Args:
        causal: bool, default False.
        mask_padding: bool, default True; False: the padding mask is not
            applied (every token attends to the padding too), as keras-hub's
            and big_vision's text encoders, which take no mask, attend.

    Call arguments:
        padding_mask: `(batch, length)`, nonzero on tokens, 0 on padding.

    Returns:
        A boolean `(batch, length, length)` mask, True where attention is
        allowed.

    Example:

    >>> import numpy as np
    >>> mask = AttentionMask(causal=True)(np.array([[1, 1, 0]]))
    >>> np.asarray(mask).astype(int).tolist()
    [[[1, 0, 0], [1, 1, 0], [1, 1, 0]]]
    """

    def __init__(self, causal=False, mask_padding=True, **kwargs):
        super().__init__(**kwargs)
        self.causal = check_bool(causal, "causal")
        self.mask_padding = check_bool(mask_padding, "mask_padding")

    def call(self, padding_mask):
        keys = ops.not_equal(padding_mask, 0)
        if not self.mask_padding:
            keys = ops.logical_or(keys, ops.logical_not(keys))
        keys = keys[:, None, :]
        length = padding_mask.shape[1] if padding_mask.shape[1] is not None else ops.shape(padding_mask)[1]
        if not self.causal:
            return ops.logical_and(keys, ops.ones((1, length, 1), "bool"))
        positions = ops.arange(0, length)
        earlier = ops.greater_equal(positions[:, None], positions[None, :])
        return ops.logical_and(keys, earlier[None])

    def compute_output_spec(self, padding_mask):
        shape = tuple(padding_mask.shape)
        return keras.KerasTensor(shape + (shape[1],), dtype="bool")

    def get_config(self):
        config = super().get_config()
        config.update({"causal": self.causal, "mask_padding": self.mask_padding})
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class TextPooling(keras.layers.Layer):
    """The final token a text is read from (see `TEXT_POOLINGS`).

    Args:
        mode: "eos" (the first token equal to `eos_token_id`; the first token
            when there is none, as transformers' `argmax` gives), "argmax"
            (the first token of the largest id) or "last".
        eos_token_id: int, for "eos".

    Call arguments:
        inputs: `[tokens (batch, length, D), token_ids (batch, length)]`.

    Returns:
        `(batch, D)`.

    Example:

    >>> import numpy as np
    >>> tokens = np.arange(12, dtype="float32").reshape(1, 3, 4)
    >>> pooled = TextPooling("eos", eos_token_id=7)([tokens, np.array([[5, 7, 7]])])
    >>> np.asarray(pooled).tolist()
    [[4.0, 5.0, 6.0, 7.0]]
    """

    def __init__(self, mode="eos", eos_token_id=None, **kwargs):
        super().__init__(**kwargs)
        self.mode = check_choice(mode, TEXT_POOLINGS, "mode")
        if mode == "eos" and eos_token_id is None:
            raise ValueError("mode='eos' reads the first `eos_token_id`: give it. Received: eos_token_id=None")
        self.eos_token_id = check_int(eos_token_id, "eos_token_id", minimum=0, allow_none=True)

    def call(self, inputs):
        tokens, token_ids = inputs
        if self.mode == "last":
            return tokens[:, -1]
        token_ids = ops.cast(token_ids, "int32")
        if self.mode == "eos":
            token_ids = ops.cast(ops.equal(token_ids, self.eos_token_id), "int32")
        index = ops.argmax(token_ids, axis=-1)
        # The chosen row as a one-hot product: a gather every exporter converts.
        length = tokens.shape[1] if tokens.shape[1] is not None else ops.shape(tokens)[1]
        pick = ops.cast(ops.equal(ops.arange(0, length)[None, :], ops.cast(index, "int32")[:, None]), tokens.dtype)
        return ops.einsum("bt,btd->bd", pick, tokens)

    def compute_output_shape(self, input_shape):
        shape = input_shape[0]
        return (shape[0], shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update({"mode": self.mode, "eos_token_id": self.eos_token_id})
        return config
