"""keras-hub CLIP presets (`keras_hub>CLIPBackbone`, `keras_hub>CLIPVisionEncoder`)
-> the canonical layout of the vision tower.

Facts about the files (`save_to_preset`):

- `config.json` of a `CLIPBackbone`: `vision_encoder` and `text_encoder`,
  each a serialised layer ("keras_hub>CLIPVisionEncoder" /
  "keras_hub>CLIPTextEncoder") with its own `config`, and
  `projection_dim`; a `CLIPVisionEncoder` preset holds the vision one
  alone. Its keys: `patch_size`, `hidden_dim`, `num_layers`, `num_heads`,
  `intermediate_dim`, `intermediate_activation` ("quick_gelu" or a Keras
  activation name), `image_shape` (square, fixed: keras-hub does not resize
  the position table). Every norm of the vision tower has epsilon 1e-5.
- vision variables, under `<vision name>_`: `embedding/class_embedding`
  `(D,)`, `embedding/patch_embedding/kernel` (HWIO, no bias),
  `embedding/position_embedding/embeddings` `(1 + N, D)` (class row
  first), the integer `embedding/position_ids`; `pre_layer_norm` (a norm
  before the blocks: keras_vit's `pre_norm`); `encoder_block_{i}/` with
  `layer_norm_1`, `attention` (a Keras `MultiHeadAttention`),
  `layer_norm_2`, `dense_1`, `dense_2`; `layer_norm` on every token (the
  encoder's final norm).
- in a `CLIPBackbone`, `vision_projection/kernel` (no bias) at the root:
  the image embedding is `vision_projection(layer_norm(x)[:, 0])`. keras_vit
  holds it as its head (`classes = projection_dim`, no activation) whose
  bias is zero, as for transformers' `CLIPModel`. The text tower (`<text
  name>_`, `text_projection/`) and the loss's `clip_head/logit_scale` are
  listed as ignored (`keras_vit.ImageTextModel` reads them).
"""

import numpy as np

from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import keras_block, keras_norm
from keras_vit.weights.formats.keras_hub_family import KerasHubFamily
from keras_vit.weights.rules import RuleTable

BACKBONE, VISION_ENCODER = "keras_hub>CLIPBackbone", "keras_hub>CLIPVisionEncoder"
RULES = (
    ("embedding/class_embedding", C.CLS, "token"),
    ("embedding/patch_embedding/kernel", C.EMBEDDING + "kernel"),
    ("embedding/position_embedding/embeddings", C.POSEMB, "batch"),
    *keras_norm("pre_layer_norm", C.PRE_NORM),
    *keras_block("encoder_block_{i}/", "layer_norm_1", "attention", "layer_norm_2", "dense_1", "dense_2"),
    *keras_norm("layer_norm", C.ENCODER_NORM),
    ("vision_projection/kernel", C.HEAD + "kernel"),
)
# keras-hub's `intermediate_activation` -> keras_vit's `mlp_activation`.
ACTIVATIONS = {"quick_gelu": "quick_gelu", "gelu": "gelu", "gelu_approximate": "gelu_tanh"}
# The epsilon keras-hub gives every norm of the CLIP towers' blocks.
EPSILON = 1e-5


class ClipFamily(KerasHubFamily):
    """keras-hub's CLIP vision encoder, alone or in a `CLIPBackbone`.

    Example:

    >>> args = ClipFamily().model_arguments({"registered_name": "keras_hub>CLIPBackbone", "config": {
    ...     "projection_dim": 12, "vision_encoder": {"registered_name": "keras_hub>CLIPVisionEncoder",
    ...     "config": {"patch_size": 8, "hidden_dim": 16, "num_layers": 2, "num_heads": 2,
    ...                "intermediate_dim": 32, "image_shape": [32, 32, 3]}}}})
    >>> args["pre_norm"], args["patch_bias"], args["mlp_activation"], args["classes"]
    (True, False, 'quick_gelu', 12)
    """

    NAME = "CLIP preset"
    REGISTERED = (BACKBONE, VISION_ENCODER)
    TABLE = RuleTable(RULES)
    VISION = VISION_ENCODER
    IGNORED = {"embedding/position_ids": "the position indices 0..N, not a weight"}

    def encoder_arguments(self, config, shape):
        activation = self.mlp_activation(config, "quick_gelu", ACTIVATIONS)
        if config.get("data_format") == "channels_first":
            raise self.unsupported("keras_vit reads channels_last towers. Received: data_format='channels_first'")
        return dict(
            self.backbone_arguments(config, shape),
            mlp_dim=config["intermediate_dim"],
            layer_norm_epsilon=EPSILON,
            mlp_activation=activation,
            patch_bias=False,
            pre_norm=True,
            # keras-hub keeps the size it was built at; other sizes resize as
            # transformers' CLIP does.
            position_interpolation="clip",
            classifier="token",
            pooling="token",
            classifier_activation=None,
        )

    def model_arguments(self, backbone, task=None):
        """The vision encoder's arguments; in a `CLIPBackbone`, with the image
        projection as the head (the output is the image embedding)."""
        args = super().model_arguments(backbone, task)
        if backbone.get("registered_name") == BACKBONE:
            args = dict(args, include_top=True, classes=int(backbone["config"]["projection_dim"]))
            args.pop("pooling")
        return args

    def variable_prefixes(self, backbone):
        """The vision encoder's prefix, and in a `CLIPBackbone` the text
        tower's, its projection's and the loss's, ignored."""
        out = super().variable_prefixes(backbone)
        if backbone.get("registered_name") == BACKBONE:
            text = backbone["config"].get("text_encoder", {}).get("config", {}).get("name")
            reason = "the text tower of the CLIP backbone (an image model has none)"
            out.update({f"{text}_": reason, "text_projection/": reason,
                        "clip_head/": "the logit scale of the image-text loss"})
        return out

    def read(self, variables, backbone, num_heads, path):
        """The variables as a `Checkpoint`, with the zero bias of the image
        projection (`vision_projection` has none).

        Raises:
            ValueError: when the position indices are not `0..N`: keras-hub
                adds the position rows they name (a tower built in keras-hub
                and never converted holds zeros there), keras_vit row `i` to
                token `i`.
        """
        prefix = next(iter(super().variable_prefixes(backbone)))
        positions = variables.get(prefix + "embedding/position_ids")
        if positions is not None and not np.array_equal(np.reshape(positions, -1), np.arange(positions.size)):
            raise self.unsupported(
                "its embedding/position_ids must be 0..N (the row of each token); keras_vit adds row i "
                f"to token i. Received: position_ids starting {np.reshape(positions, -1)[:4].tolist()}"
            )
        checkpoint = super().read(variables, backbone, num_heads, path)
        kernel = checkpoint.params.get(C.HEAD + "kernel")
        if kernel is not None:
            checkpoint.params[C.HEAD + "bias"] = np.zeros(kernel.shape[-1:], kernel.dtype)
        return checkpoint
