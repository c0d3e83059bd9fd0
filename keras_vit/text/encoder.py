"""`TextEncoder`: the text tower of the image-text models (CLIP, MetaCLIP 2,
SigLIP, SigLIP 2) on keras_vit's Transformer blocks."""

import keras

from keras_vit.layers.config import BlockConfig, expose_records
from keras_vit.layers.norms import norm_layer
from keras_vit.layers.transformer import TransformerBlock
from keras_vit.models.precision import with_policy
from keras_vit.text.layers import TEXT_POOLINGS, AttentionMask, TextEmbedding, TextPooling
from keras_vit.validation import (
    argument_names,
    check_bool,
    check_choice,
    check_int,
    check_keywords,
    check_positive_float,
    check_positive_int,
)


@keras.saving.register_keras_serializable(package="keras_vit")
@expose_records("block_config")
class TextEncoder(keras.Model):
    """A Transformer text encoder that embeds a text as one vector.

    Token ids are embedded with learned token and position embeddings
    (`embedding`), pass through `num_layers` pre-LayerNorm Transformer blocks
    (`encoderblock_{i}`, keras_vit's `TransformerBlock`, the layout of the
    image towers) that attend to no padding and, with `causal`, to no later
    token (`attention_mask`), a final norm (`encoder_norm`), the
    pooling of one token (`pool`, see `keras_vit.text.layers.TEXT_POOLINGS`)
    and a linear projection (`projection`) into the embedding space shared
    with the image tower:

    | family | causal | pooling | projection |
    | --- | --- | --- | --- |
    | CLIP, MetaCLIP 2 | yes | "eos" (or "argmax") | no bias (`text_projection`) |
    | SigLIP, SigLIP 2 | no | "last" | with bias (the text model's `head`) |

    The output is the text's embedding before normalisation (transformers'
    `get_text_features`); `keras_vit.ImageTextModel.encode_texts` scales it
    to unit length. Tokenisation stays in Python
    (`keras_vit.text.tokenizer`), so an exported encoder takes token ids.

    Args:
        vocabulary_size: int, the rows of the token embedding.
        max_length: int, the rows of the position embedding: the longest
            text, in tokens.
        hidden_size: int, token width, default 512.
        num_layers: int, default 12.
        num_heads: int, default 8; must divide `hidden_size`.
        mlp_dim: int, MLP hidden width, default 2048.
        causal: bool, default True: each token attends to itself and the
            tokens before it only (CLIP).
        pooling: "eos" (default), "argmax" or "last".
        eos_token_id: None or int, the end-of-text id ("eos" pooling).
        projection_dim: None (no projection: the pooled token is the
            output) or int, default None.
        projection_bias: bool, default False: a bias on the projection.
        mask_padding: bool, default True: no token attends to padding (the
            padding mask, as transformers applies the tokenizer's attention
            mask); False: every token attends to every other, padding
            included, as keras-hub's CLIP and SigLIP text encoders (which
            take no mask) do.
        final_norm_epsilon: None (default: the blocks' `layer_norm_epsilon`)
            or float > 0: the final norm's epsilon (keras-hub's CLIP text
            encoder: 1e-6 after blocks of 1e-5).
        block_config: None, a `keras_vit.layers.config.BlockConfig` or its
            config dict: the blocks' options (norm epsilon, MLP activation,
            ...), each field also a keyword of its own.
        name: default "text_encoder".
        dtype: dtype or dtype policy of the layers.

    Inputs: `[token_ids, padding_mask]`, both `(batch, length)` integers
    (`keras_vit.text.tokenizer.Tokenizer` gives them), `length <=
    max_length`; the mask is 1 on tokens and 0 on padding.

    Returns:
        `(batch, projection_dim)` (or `(batch, hidden_size)` without
        projection).

    Example:

    >>> import numpy as np
    >>> encoder = TextEncoder(vocabulary_size=50, max_length=8, hidden_size=16,
    ...                       num_layers=1, num_heads=2, mlp_dim=32, eos_token_id=2,
    ...                       projection_dim=6)
    >>> ids = np.array([[1, 7, 9, 2, 0], [1, 5, 2, 0, 0]])
    >>> tuple(encoder.predict([ids, (ids > 0).astype("int32")], verbose=0).shape)
    (2, 6)
    """

    def __init__(self, vocabulary_size, max_length, hidden_size=512, num_layers=12, num_heads=8,
                 mlp_dim=2048, causal=True, pooling="eos", eos_token_id=None, projection_dim=None,
                 projection_bias=False, mask_padding=True, final_norm_epsilon=None, block_config=None,
                 name="text_encoder", dtype=None, **kwargs):
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in BlockConfig.field_names()}
        check_keywords(kwargs, argument_names(TextEncoder.__init__) + BlockConfig.field_names() + ("trainable",),
                       type(self).__name__)
        self.vocabulary_size = check_positive_int(vocabulary_size, "vocabulary_size")
        self.max_length = check_positive_int(max_length, "max_length")
        self.hidden_size = check_positive_int(hidden_size, "hidden_size")
        self.num_layers = check_int(num_layers, "num_layers", minimum=0)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        self.causal = check_bool(causal, "causal")
        self.pooling = check_choice(pooling, TEXT_POOLINGS, "pooling")
        self.eos_token_id = eos_token_id
        self.projection_dim = check_positive_int(projection_dim, "projection_dim", allow_none=True)
        self.projection_bias = check_bool(projection_bias, "projection_bias")
        self.mask_padding = check_bool(mask_padding, "mask_padding")
        self.block_config = BlockConfig.from_arguments(block_config, **options)
        if final_norm_epsilon is not None:
            final_norm_epsilon = check_positive_float(final_norm_epsilon, "final_norm_epsilon")
        self.final_norm_epsilon = final_norm_epsilon
        token_ids = keras.Input((None,), dtype="int32", name="token_ids")
        padding_mask = keras.Input((None,), dtype="int32", name="padding_mask")
        outputs = self._build_graph(token_ids, padding_mask, dtype)
        super().__init__(inputs=[token_ids, padding_mask], outputs=outputs, name=name, dtype=dtype, **kwargs)

    def _build_graph(self, token_ids, padding_mask, dtype):
        x = TextEmbedding(self.vocabulary_size, self.max_length, self.hidden_size, name="embedding",
                          dtype=dtype)(token_ids)
        mask = AttentionMask(self.causal, self.mask_padding, name="attention_mask", dtype=dtype)(padding_mask)
        for i in range(self.num_layers):
            block = TransformerBlock(self.num_heads, self.mlp_dim, block_config=self.block_config,
                                     name=f"encoderblock_{i}", dtype=dtype)
            x = block(x, attention_mask=mask)
        epsilon = self.final_norm_epsilon or self.block_config.layer_norm_epsilon
        x = norm_layer(self.block_config.norm_kind, epsilon, "encoder_norm", dtype)(x)
        x = TextPooling(self.pooling, self.eos_token_id, name="pool", dtype=dtype)([x, token_ids])
        if self.projection_dim is not None:
            x = keras.layers.Dense(self.projection_dim, use_bias=self.projection_bias, name="projection",
                                   dtype=dtype)(x)
        return x

    # What the export pipeline (`keras_vit.export`) reads of a model whose
    # inputs are not images.
    export_formats = ("onnx", "openvino")
    export_output_name = "embeddings"

    def export_signature(self, batch_size=None, sequence_length=None):
        """The exported inputs: `token_ids` and `padding_mask`, `(batch, length)` int32.

        Example:

        >>> encoder = TextEncoder(vocabulary_size=20, max_length=6, hidden_size=8, num_layers=1,
        ...                       num_heads=2, mlp_dim=16, eos_token_id=2)
        >>> [(s.name, s.shape) for s in encoder.export_signature()]
        [('token_ids', (None, 6)), ('padding_mask', (None, 6))]
        """
        length = self.max_length if sequence_length is None else check_positive_int(
            sequence_length, "sequence_length")
        if length > self.max_length:
            raise ValueError(
                f"`sequence_length` must be at most the encoder's max_length ({self.max_length}). "
                f"Received: sequence_length={sequence_length}"
            )
        if batch_size is not None:
            check_positive_int(batch_size, "batch_size")
        return [keras.InputSpec(shape=(batch_size, length), dtype="int32", name=name)
                for name in ("token_ids", "padding_mask")]

    def export(self, filepath, format="onnx", verbose=None, input_signature=None, sequence_length=None,
               batch_size=None):
        """`keras.Model.export` through keras_vit's export pipeline (`keras_vit.export`).

        The artifact takes token ids and the padding mask, `(batch, length)`
        int32 each (inputs `token_ids` and `padding_mask`), and returns the
        text embeddings before normalisation (output `embeddings`);
        tokenisation stays in Python (`keras_vit.text.tokenizer`). Run it
        with `keras_vit.export.run_exported(path, format, {"token_ids": ...,
        "padding_mask": ...})`.

        Args:
            filepath: `.onnx` or `.xml` (with its `.bin`).
            format: "onnx" (default) or "openvino".
            verbose: None or bool: the exporters' own messages.
            input_signature: None, or one `keras.InputSpec` of shape
                `(batch, length)`: a fixed batch and length.
            sequence_length: None (the encoder's `max_length`) or the fixed
                length of the inputs.
            batch_size: None (dynamic) or an int.

        Returns:
            The path.

        Example:

        >>> import os, tempfile, numpy as np
        >>> from keras_vit.export import run_exported
        >>> encoder = TextEncoder(vocabulary_size=20, max_length=6, hidden_size=8, num_layers=1,
        ...                       num_heads=2, mlp_dim=16, eos_token_id=2, projection_dim=4)
        >>> path = encoder.export(os.path.join(tempfile.mkdtemp(), "text.onnx"))
        >>> ids = np.array([[1, 5, 2, 0, 0, 0]], "int32")
        >>> inputs = {"token_ids": ids, "padding_mask": (ids > 0).astype("int32")}
        >>> out = run_exported(path, "onnx", inputs)
        >>> bool(np.allclose(out, encoder.predict([ids, inputs["padding_mask"]], verbose=0), atol=1e-5))
        True
        """
        from keras_vit.export import export_model

        if input_signature is not None:
            spec = input_signature[0] if isinstance(input_signature, (list, tuple)) else input_signature
            spec = spec[0] if isinstance(spec, (list, tuple)) else spec
            shape = tuple(getattr(spec, "shape", ()) or ())
            if len(shape) != 2:
                raise ValueError(
                    "`input_signature` must be a keras.InputSpec of shape (batch, length). "
                    f"Received: input_signature={input_signature!r}"
                )
            batch_size, sequence_length = shape
        signature = self.export_signature(batch_size, sequence_length)
        return export_model(self, filepath, format, batch_size=batch_size, verbose=bool(verbose),
                            input_signature=signature)

    @property
    def embedding_dim(self):
        """The width of the output: `projection_dim`, else `hidden_size`."""
        return self.projection_dim or self.hidden_size

    def get_config(self):
        return {
            "vocabulary_size": self.vocabulary_size,
            "max_length": self.max_length,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "causal": self.causal,
            "pooling": self.pooling,
            "eos_token_id": self.eos_token_id,
            "projection_dim": self.projection_dim,
            "projection_bias": self.projection_bias,
            "mask_padding": self.mask_padding,
            "final_norm_epsilon": self.final_norm_epsilon,
            "block_config": self.block_config.get_config(),
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.get_layer("embedding").dtype_policy),
        }

    @classmethod
    def from_config(cls, config):
        return cls(**with_policy(config))
