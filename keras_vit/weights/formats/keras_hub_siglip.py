"""keras-hub SigLIP presets (`keras_hub>SigLIPBackbone`, `keras_hub>SigLIPVisionEncoder`)
-> the canonical layout of the vision tower.

Facts about the files (`save_to_preset`):

- `config.json` of a `SigLIPBackbone`: `vision_encoder` and `text_encoder`,
  each a serialised layer (`registered_name` "keras_hub>SigLIPVisionEncoder"
  / "keras_hub>SigLIPTextEncoder") with its own `config`; a
  `SigLIPVisionEncoder` preset holds the vision one alone. Its keys:
  `patch_size`, `hidden_dim`, `num_layers`, `num_heads`,
  `intermediate_dim`, `intermediate_activation` ("gelu_approximate", the
  tanh GELU, or a Keras activation name), `layer_norm_epsilon` (the blocks'
  and the head's; the final norm's is always 1e-6), `image_shape` (fixed:
  keras-hub does not resize the position table).
- vision variables, under `<vision name>_`: `embedding/patch_embedding`
  (HWIO, with bias), `embedding/position_embedding/embeddings` `(N, D)` (no
  class token), the integer `embedding/position_ids`;
  `encoder_block_{i}/` with `layer_norm1`, `self_attn` (a Keras
  `MultiHeadAttention`), `layer_norm2`, `mlp/fc1`, `mlp/fc2`;
  `post_layer_norm` on every token; the attention-pool head `head/`: the
  probe (an unnamed weight: `variable`, or `variable_<n>` when Keras has
  made other unnamed ones in the session), `attention` (a Keras
  `MultiHeadAttention` with separate query/key/value), `layernorm`,
  `mlp/fc1`, `mlp/fc2`.
- in a `SigLIPBackbone`, the text tower under `<text name>_` and the loss's
  `siglip_head/logit_scale`, `siglip_head/logit_bias`: not part of an image
  model, listed as ignored.

The vision encoder's output, the image embedding `SigLIPBackbone` compares
with the text, is the head's output: keras_vit's `pooling="map"`.
"""

import re

from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import keras_block, keras_dense, keras_map_head, keras_norm
from keras_vit.weights.formats.keras_hub_family import KerasHubFamily
from keras_vit.weights.rules import RuleTable

VISION_ENCODER = "keras_hub>SigLIPVisionEncoder"
RULES = (
    *keras_dense("embedding/patch_embedding", C.EMBEDDING),
    ("embedding/position_embedding/embeddings", C.POSEMB, "batch"),
    *keras_block("encoder_block_{i}/", "layer_norm1", "self_attn", "layer_norm2", "mlp/fc1", "mlp/fc2"),
    *keras_norm("post_layer_norm", C.ENCODER_NORM),
    *keras_map_head("head"),
)
# keras-hub's `intermediate_activation` -> keras_vit's `mlp_activation`.
ACTIVATIONS = {"gelu_approximate": "gelu_tanh", "gelu": "gelu"}
_PROBE = re.compile(r"head/variable(_\d+)?")


class SiglipFamily(KerasHubFamily):
    """keras-hub's SigLIP vision encoder, alone or in a `SigLIPBackbone`.

    Example:

    >>> args = SiglipFamily().encoder_arguments({"patch_size": 16, "hidden_dim": 768, "num_layers": 12,
    ...     "num_heads": 12, "intermediate_dim": 3072}, (224, 224, 3))
    >>> args["classifier"], args["pooling"], args["mlp_activation"]
    ('map', 'map', 'gelu_tanh')
    """

    NAME = "SigLIP preset"
    REGISTERED = ("keras_hub>SigLIPBackbone", VISION_ENCODER)
    VISION = VISION_ENCODER
    TABLE = RuleTable(RULES)
    IGNORED = {"embedding/position_ids": "the position indices 0..N-1, not a weight"}
    # The epsilon of the final norm, whatever `layer_norm_epsilon` says.
    POST_NORM_EPSILON = 1e-6

    def source_name(self, name):
        """A variable's name in `RULES`: the head's unnamed probe is `head/probe`.

        Example:

        >>> family = SiglipFamily()
        >>> family.source_name("head/variable_3"), family.source_name("head/layernorm/gamma")
        ('head/probe', 'head/layernorm/gamma')
        """
        return "head/probe" if _PROBE.fullmatch(name) else name

    def encoder_arguments(self, config, shape):
        activation = self.mlp_activation(config, "gelu_approximate", ACTIVATIONS)
        epsilon = float(config.get("layer_norm_epsilon", 1e-6))
        if epsilon != self.POST_NORM_EPSILON:
            raise self.unsupported(
                "keras_vit gives its final norm the blocks' epsilon, keras-hub's is always "
                f"{self.POST_NORM_EPSILON}. Received: layer_norm_epsilon={epsilon}"
            )
        return dict(
            self.backbone_arguments(config, shape),
            mlp_dim=config["intermediate_dim"],
            layer_norm_epsilon=epsilon,
            mlp_activation=activation,
            # keras-hub keeps the size it was built at; other sizes resize as
            # transformers' SigLIP does.
            position_interpolation="siglip",
            classifier="map",
            pooling="map",
            classifier_activation=None,
        )

    def variable_prefixes(self, backbone):
        """The vision encoder's prefix, and in a `SigLIPBackbone` the text
        tower's and the loss's, ignored."""
        out = super().variable_prefixes(backbone)
        if backbone.get("registered_name") != VISION_ENCODER:
            text = backbone["config"].get("text_encoder", {}).get("config", {}).get("name")
            out[f"{text}_"] = "the text tower of the SigLIP backbone (an image model has none)"
            out["siglip_head/"] = "the logit scale and bias of the image-text loss"
        return out
