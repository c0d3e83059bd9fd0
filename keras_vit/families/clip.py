"""CLIP and MetaCLIP 2 (vision tower): the family's checkpoints in every layout keras_vit reads (transformers, keras-hub).

transformers CLIP vision towers (`CLIPVisionModel`,
`CLIPVisionModelWithProjection`) -> the canonical layout.

Facts about the files (`save_pretrained`; `model_type` "clip_vision_model"):

- `config.json`: `hidden_size`, `intermediate_size`, `num_hidden_layers`,
  `num_attention_heads`, `hidden_act` (OpenAI's "quick_gelu"),
  `layer_norm_eps`, `image_size`, `patch_size`, `num_channels`,
  `projection_dim` (the width of `visual_projection`);
- tensors, under `vision_model.` (the body of both classes):
  `embeddings.class_embedding` `(D,)`, a patch convolution without bias,
  `embeddings.position_embedding.weight` `(1 + N, D)` (class row first),
  `pre_layrnorm` (a LayerNorm before the blocks: keras_vit's `pre_norm`),
  blocks of `layer_norm1`, `self_attn.{q,k,v,out}_proj`, `layer_norm2`,
  `mlp.fc1`/`mlp.fc2`, and `post_layernorm`, applied to the class token
  only: keras_vit's `pooled_norm` (`fc_norm`). `last_hidden_state` is the
  tokens before that norm; `pooler_output` the normed class token.
- `CLIPVisionModelWithProjection` adds `visual_projection.weight`, a Linear
  without bias: `image_embeds` = visual_projection(pooler_output). keras_vit
  holds it as its head (`classes = projection_dim`, no activation) whose
  bias is zero.
- A two-tower `CLIPModel` directory (`model_type` "clip"; MetaCLIP 2's
  `MetaClip2Model`, "metaclip_2", alike) holds the vision
  config under `vision_config` and `projection_dim` at the top, the same
  vision tensors under `vision_model.` and `visual_projection.weight`, and
  the text tower (`text_model.`, `text_projection.weight`, `logit_scale`):
  the vision tower loads with the projection as its head, so the model's
  output is `get_image_features`; the text tower is ignored by name.

Written back (`save_to_preset(format="transformers")`): a model shaped like
a CLIP tower (a LayerNorm before the blocks, the class token normed alone
after them) as `CLIPVisionModel` (`include_top=False, pooling="token"`) or,
with a head whose bias is zero, `CLIPVisionModelWithProjection`.

keras-hub CLIP presets (`keras_hub>CLIPBackbone`, `keras_hub>CLIPVisionEncoder`)
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
from keras_vit.weights.formats.conventions import KERAS_HUB_TEXT_EMBEDDINGS, keras_block, keras_norm
from keras_vit.weights.formats.conventions import torch_block, torch_norm
from keras_vit.weights.formats.keras_hub_family import KerasHubFamily
from keras_vit.weights.formats.transformers_family import (
    CLIP_FIELDS,
    TransformersClass,
    TowerFamily,
    check_structure,
    refuse,
)
from keras_vit.weights.rules import RuleTable

# --- transformers ------------------------------------------------------------

PREFIX = "vision_model."
# The blocks of CLIP and SigLIP (same names).
BLOCKS = torch_block(
    "encoder.layers.{i}.", "layer_norm1",
    ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"),
    "layer_norm2", "mlp.fc1", "mlp.fc2",
)
BODY = (
    ("embeddings.class_embedding", C.CLS, "token"),
    ("embeddings.position_embedding.weight", C.POSEMB, "batch"),
    ("embeddings.patch_embedding.weight", C.EMBEDDING + "kernel", "conv"),
    *torch_norm("pre_layrnorm", C.PRE_NORM),
    *BLOCKS,
    *torch_norm("post_layernorm", C.POOLED_NORM),
)
PROJECTION = (("visual_projection.weight", C.HEAD + "kernel", "linear"),)


class TransformersClip(TowerFamily):
    """transformers' CLIP vision towers, and the vision side of `CLIPModel`.

    Example:

    >>> args = TransformersClip().model_arguments({"model_type": "clip_vision_model",
    ...     "architectures": ["CLIPVisionModelWithProjection"], "hidden_size": 768,
    ...     "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
    ...     "image_size": 224, "patch_size": 32, "projection_dim": 512})
    >>> args["pre_norm"], args["patch_bias"], args["mlp_activation"], args["classes"]
    (True, False, 'quick_gelu', 512)
    """

    NAME = "CLIP vision model"
    MODEL_TYPES = ("clip_vision_model", "clip", "metaclip_2")
    TRANSFORMERS_CLASSES = {
        "CLIPVisionModel": TransformersClass("clip_vision_model", PREFIX, PROJECTION),
        "CLIPVisionModelWithProjection": TransformersClass("clip_vision_model", PREFIX, PROJECTION),
        # The two-tower models, read for their vision tower and projection
        # (MetaCLIP 2's tensors and config are CLIP's).
        "CLIPModel": TransformersClass("clip", PREFIX, PROJECTION),
        "MetaClip2Model": TransformersClass("metaclip_2", PREFIX, PROJECTION),
    }
    # CLIPVisionConfig's defaults.
    DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                    image_size=224, patch_size=32, num_channels=3, hidden_act="quick_gelu", layer_norm_eps=1e-5,
                    attention_dropout=0.0)
    FIELDS = CLIP_FIELDS
    BODY = BODY
    IGNORED = {
        "embeddings.position_ids": "the position indices buffer, not a weight",
        "text_model.": "the text tower of a CLIPModel or MetaClip2Model",
        "text_projection.weight": "the text tower's projection of a CLIPModel or MetaClip2Model",
        "logit_scale": "the image-text logit scale of a CLIPModel or MetaClip2Model",
    }
    STRUCTURE = dict(
        TowerFamily.STRUCTURE,
        classifier=("token", "pools its class token"),
        class_token=(True, "pools its class token"),
        pooled_norm=(True, "normalises the class token alone after the blocks (post_layernorm): it needs pooled_norm=True"),
    )
    # Without the projection, the output is the normed class token.
    POOLER_OUTPUT = ("token", "returns the normed class token (pooler_output): include_top=False needs pooling='token'")
    EXPORTED_OPTIONS = dict(
        TowerFamily.EXPORTED_OPTIONS,
        patch_bias=(False,),
        pre_norm=(True,),
        class_token=(None, True),
        # transformers resizes the position table its own way (bicubic) at
        # other sizes, whatever keras_vit held.
        position_interpolation=("official", "timm", "clip"),
    )

    def model_arguments(self, config):
        """keras_vit `ViT` arguments for a CLIP vision (or two-tower) `config.json` dict."""
        projected = self.transformers_class(config) != "CLIPVisionModel"
        # The two-tower model's projection width is its own field, not the vision config's.
        projection_dim = config.get("projection_dim", 512)
        config = self.vision_config(config)
        args = dict(
            self.encoder_arguments(config),
            patch_bias=False,
            pre_norm=True,
            pooled_norm=True,
            position_interpolation="clip",
            classifier="token",
        )
        if projected:
            # image_embeds: the normed class token through the projection.
            return dict(args, include_top=True, classes=int(projection_dim))
        # pooler_output: the class token after `post_layernorm`.
        return dict(args, include_top=False, pooling="token")

    def complete(self, params, ignored, config):
        """Adds the zero bias of the projection head (`visual_projection` has none)."""
        kernel = params.get(C.HEAD + "kernel")
        if kernel is not None and C.HEAD + "bias" not in params:
            params[C.HEAD + "bias"] = np.zeros(kernel.shape[-1:], kernel.dtype)

    def export_class(self, config):
        """The CLIP class of a model config shaped like a CLIP tower (a LayerNorm
        before the blocks: `pre_norm=True`), else None.

        Raises:
            ValueError: for a CLIP-shaped model whose pooling or head CLIP has not.

        Example:

        >>> TransformersClip().export_class({"pre_norm": True, "pooled_norm": True, "include_top": False,
        ...                            "pooling": "token"})
        'CLIPVisionModel'
        """
        if config.get("pre_norm") is not True:
            return None
        projected = bool(config.get("include_top", True))
        hf_class = "CLIPVisionModelWithProjection" if projected else "CLIPVisionModel"
        structure = self.STRUCTURE if projected else dict(self.STRUCTURE, pooling=self.POOLER_OUTPUT)
        check_structure(config, hf_class, structure)
        return hf_class

    def export_config(self, config, hf_class, class_names=None):
        """The shared fields, with the projection's width."""
        out = super().export_config(config, hf_class, class_names)
        if hf_class == "CLIPVisionModelWithProjection":
            out["projection_dim"] = config["classes"]
        return out

    def export_state(self, params, hf_class, config):
        """The state dict, the body under `vision_model.`.

        Raises:
            ValueError: for a head with a bias other than zero (`visual_projection`
                has no bias), naming its largest magnitude.
        """
        params = dict(params)
        bias = params.pop(C.HEAD + "bias", None)
        if bias is not None and np.any(bias != 0):
            raise refuse(
                "CLIPVisionModelWithProjection's visual_projection has no bias, and the head's "
                f"is not zero (largest |bias| = {float(np.abs(bias).max()):.3g})"
            )
        return super().export_state(params, hf_class, config)

    def export_preprocessor(self, record, config):
        """`CLIPImageProcessor`'s file, whose shorter-side resize
        (`{"shortest_edge": n}`) keeps a record's int `resize`, and whose crop
        is on unless turned off."""
        out = dict(super().export_preprocessor(record, config), image_processor_type="CLIPImageProcessor")
        out.setdefault("do_center_crop", False)
        if isinstance(record.resize, int):
            out["size"] = {"shortest_edge": record.resize}
        return out


# The text tower of the two-tower classes (`CLIPModel`, `MetaClip2Model`):
# the fields of `keras_vit.families.transformers_image_text.TextTower`.
# `defaults`: `CLIPTextConfig`'s.
CLIP_TEXT_DEFAULTS = dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                          num_attention_heads=8, max_position_embeddings=77, hidden_act="quick_gelu",
                          layer_norm_eps=1e-5, eos_token_id=49407, attention_dropout=0.0)
_CLIP_TEXT = dict(causal=True, pooling="eos", projection="text_projection", padding="longest",
                  max_length=None, activation="softmax", lowercase=False, defaults=CLIP_TEXT_DEFAULTS)
TRANSFORMERS_TEXT_TOWERS = {
    "CLIPModel": dict(_CLIP_TEXT, legacy_eos=True),
    "MetaClip2Model": dict(_CLIP_TEXT, legacy_eos=False),
}


# --- keras-hub ---------------------------------------------------------------

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


class KerasHubClip(KerasHubFamily):
    """keras-hub's CLIP vision encoder, alone or in a `CLIPBackbone`.

    Example:

    >>> args = KerasHubClip().model_arguments({"registered_name": "keras_hub>CLIPBackbone", "config": {
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


# The text tower of `keras_hub>CLIPBackbone`: the fields of
# `keras_vit.families.keras_hub_image_text.KerasHubTextTower`; its blocks' norms and
# its final norm take fixed epsilons in keras-hub.
KERAS_HUB_TEXT_TOWERS = {
    "keras_hub>CLIPBackbone": dict(
        text_encoder="keras_hub>CLIPTextEncoder",
        rules=(*KERAS_HUB_TEXT_EMBEDDINGS,
               *keras_block("encoder_block_{i}/", "layer_norm_1", "attention", "layer_norm_2", "dense_1", "dense_2"),
               *keras_norm("layer_norm", C.ENCODER_NORM)),
        projection=(("text_projection/kernel", "projection/kernel"),),
        head="clip_head/", activation="softmax", causal=True, pooling="argmax",
    ),
}
KERAS_HUB_TEXT_EPSILON, KERAS_HUB_TEXT_FINAL_EPSILON = 1e-5, 1e-6
