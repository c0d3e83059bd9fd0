"""`ForwardPass`: the forward pass as `keras_vit.ViT`'s methods.

`call` (the last block computing only the tokens the head reads),
`forward_intermediates`, `forward_features` and `forward_head`, each on the
steps of `keras_vit.models.forward` and the model's own layers.
"""

import keras
from keras import ops

from keras_vit.models import patch_inputs
from keras_vit.models.forward import head, intermediates, outputs


class ForwardPass:
    """The forward pass as methods of `keras_vit.ViT` (a mixin).

    The model's `_forward_stages` (its `Stages`) is set by its constructor.
    """

    def call(self, inputs, training=None, mask=None, **kwargs):
        # The graph's steps (it stays the model's structure: every layer's
        # `output` is what it was), called directly: the last block computes
        # only the tokens the head reads (`head_tokens`), and no functional
        # graph is walked (whose signature binding torch.compile cannot trace).
        s = getattr(self, "_forward_stages", None)
        if s is not None and patch_inputs.is_patch_dict(inputs):
            return outputs(s, inputs, training=training)
        if s is None or mask is not None or kwargs:
            return super().call(inputs, training=training, mask=mask, **kwargs)
        (images,) = self._standardize_inputs(inputs)
        return outputs(s, images, training=training)

    def _assert_input_compatibility(self, *args):
        # Keras' input spec describes the images; a NaFlex patch dict is
        # checked by the model's `_check_input_dict` before the call.
        if args and patch_inputs.is_patch_dict(args[0]):
            return None
        return super()._assert_input_compatibility(*args)

    def _images(self, images):
        if patch_inputs.is_patch_dict(images):
            self._check_data(images, "images")
            return images
        images = images if keras.backend.is_keras_tensor(images) else ops.convert_to_tensor(images)
        self._check_input_spec(tuple(images.shape), keras.backend.standardize_dtype(images.dtype), "images")
        return images

    def forward_intermediates(self, images, indices=None, norm=False, output_fmt="NHWC",
                              return_prefix_tokens=False, intermediates_only=False, training=False):
        """The final tokens and the outputs of chosen Transformer blocks.

        One pass through the model's own layers (the functions of
        `keras_vit.models.forward`, which also build the model's graph), as
        timm's `forward_intermediates`: the features are the blocks' outputs
        exactly, the patch tokens reshaped to their grid (stride: the
        effective patch size) and the prefix tokens (class, distillation,
        register) set apart. Works eagerly and on symbolic inputs
        (`keras.Input`), so a feature model is a functional model:
        `keras.Model(inputs, model.forward_intermediates(inputs, ...))`.

        Args:
            images: `(batch, H, W, C)` preprocessed images (H and W multiples
                of the effective patch size), a symbolic input, or a NaFlex
                patch dict (`keras_vit.models.patch_inputs`; features "NLC"
                only, padding tokens included).
            indices: None (default: every block), an int `n` (the last `n`
                blocks) or a sequence of block indices (negative values count
                from the end).
            norm: bool, default False: apply the encoder's final norm
                to the features (none when the model normalises the pooled
                features, `pooled_norm=True`).
            output_fmt: "NHWC" (default, `(batch, h, w, D)`) or "NLC"
                (`(batch, h * w, D)`).
            return_prefix_tokens: bool, default False: each feature becomes
                `(patch tokens, prefix tokens (batch, prefix, D))`.
            intermediates_only: bool, default False: return the features
                alone (and stop after the last requested block).
            training: bool, default False: dropout and stochastic depth.

        Returns:
            `(final tokens, features)`: the tokens after the encoder's norm,
            `(batch, prefix + h * w, D)` (what `forward_head` takes), and a
            list of features in block order; or the list alone when
            `intermediates_only`.

        Example:

        >>> import numpy as np
        >>> from keras_vit import ViT
        >>> model = ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=3,
        ...             num_heads=2, mlp_dim=32, num_register_tokens=2)
        >>> final, features = model.forward_intermediates(
        ...     np.zeros((2, 32, 32, 3), "float32"), indices=[0, -1])
        >>> tuple(final.shape), [tuple(f.shape) for f in features]
        ((2, 19, 16), [(2, 4, 4, 16), (2, 4, 4, 16)])
        >>> features = model.forward_intermediates(
        ...     np.zeros((1, 48, 32, 3), "float32"), indices=1, output_fmt="NLC",
        ...     return_prefix_tokens=True, intermediates_only=True)
        >>> [(tuple(p.shape), tuple(t.shape)) for p, t in features]
        [((1, 24, 16), (1, 3, 16))]
        """
        return intermediates(
            self._forward_stages, self._images(images), indices=indices, norm=norm,
            output_fmt=output_fmt, return_prefix_tokens=return_prefix_tokens,
            intermediates_only=intermediates_only, training=training,
        )

    def forward_features(self, images, training=False):
        """The tokens after the blocks and the encoder's norm, `(batch, prefix + h * w, D)`.

        `model(images)` is `model.forward_head(model.forward_features(images))`.

        Example:

        >>> import numpy as np
        >>> from keras_vit import ViT
        >>> model = ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1,
        ...             num_heads=2, mlp_dim=32, classes=3)
        >>> x = np.random.default_rng(0).normal(size=(1, 32, 32, 3)).astype("float32")
        >>> tokens = model.forward_features(x)
        >>> tuple(tokens.shape)
        (1, 17, 16)
        >>> from keras import ops
        >>> bool(np.allclose(ops.convert_to_numpy(model.forward_head(tokens)),
        ...                  ops.convert_to_numpy(model(x)), atol=1e-6))
        True
        """
        return self.forward_intermediates(images, indices=[], training=training)[0]

    def forward_head(self, tokens, pre_logits=False, activation=True, token_mask=None):
        """The model's output from the final tokens (`forward_features`).

        Args:
            tokens: `(batch, prefix + h * w, D)`, after the encoder's norm.
            pre_logits: bool, default False: return the pooled features
                (after `fc_norm`, the embedding's projection and scaling and
                the pre-logits layer) instead.
            activation: bool, default True; False returns the logits (the
                classifier's output before its activation).
            token_mask: None (default) or a boolean `(batch, tokens)`: the
                tokens the pooling reads (for the tokens of a NaFlex batch:
                its `"patch_valid"`, after a column of True per prefix token).

        Returns:
            The output `model(images)` would give (a model without head
            returns the tokens, or their pooling).
        """
        return head(self._forward_stages, tokens, pre_logits=pre_logits, activation=activation,
                    token_mask=token_mask)
