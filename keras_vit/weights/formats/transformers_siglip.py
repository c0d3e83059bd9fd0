"""transformers SigLIP vision towers (`SiglipVisionModel`) -> the canonical layout.

Facts about the files (`save_pretrained`; `model_type` "siglip_vision_model"):

- `config.json`: `hidden_size`, `intermediate_size`, `num_hidden_layers`,
  `num_attention_heads`, `hidden_act` ("gelu_pytorch_tanh"),
  `layer_norm_eps`, `image_size`, `patch_size`, `num_channels`,
  `vision_use_head` (the attention-pool head; default true);
- tensors, at the root or under `vision_model.`: a patch convolution with
  bias, `embeddings.position_embedding.weight` `(N, D)` (no class token, no
  prefix row), CLIP's block names, `post_layernorm` on every token (the
  final norm: `last_hidden_state` is after it) and the MAP head `head.`:
  `probe` `(1, 1, D)`, one fused `attention.in_proj_weight` `(3D, D)` with
  its bias, `attention.out_proj`, `layernorm`, `mlp.fc1`/`mlp.fc2` (the
  blocks' width and activation). `pooler_output` is the head's output:
  keras_vit's `pooling="map"` (`MapHead`).
- A two-tower `SiglipModel` directory (`model_type` "siglip") holds the
  vision config under `vision_config` and the same vision tensors under
  `vision_model.`, beside the text tower (`text_model.`, `logit_scale`,
  `logit_bias`), which is ignored by name; `get_image_features` is the
  vision tower's `pooler_output` (SigLIP has no image projection).

Written back (`save_to_preset(format="transformers")`): a model that ends
in a MAP head without a class token, as `SiglipVisionModel` (with SigLIP2's
position resize, `transformers_siglip2` writes it).
"""

from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import torch_linear, torch_map_head_tail, torch_norm
from keras_vit.weights.formats.transformers_clip import BLOCKS, PREFIX
from keras_vit.weights.formats.transformers_family import (
    CLIP_FIELDS,
    TransformersClass,
    TowerFamily,
    check_structure,
)

_H = "head."
# The blocks, the final norm and the MAP head of SigLIP and SigLIP2.
ENCODER = (
    *BLOCKS,
    *torch_norm("post_layernorm", C.ENCODER_NORM),
    (_H + "probe", C.MAP_HEAD + "probe"),
    (_H + "attention.in_proj_weight", C.MAP_ATTENTION + "{part}/kernel", "qkv_kernel"),
    (_H + "attention.in_proj_bias", C.MAP_ATTENTION + "{part}/bias", "qkv_bias"),
    *torch_linear(_H + "attention.out_proj", C.MAP_ATTENTION + "out/", "heads_out"),
    *torch_map_head_tail(_H + "layernorm", _H + "mlp.fc1", _H + "mlp.fc2"),
)
POSITIONS = ("embeddings.position_embedding.weight", C.POSEMB, "batch")

class SiglipFamily(TowerFamily):
    """transformers' SigLIP vision towers, and the vision side of `SiglipModel`.

    Example:

    >>> args = SiglipFamily().model_arguments({"model_type": "siglip_vision_model", "hidden_size": 768,
    ...     "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
    ...     "image_size": 224, "patch_size": 16})
    >>> args["classifier"], args["pooling"], args["mlp_activation"]
    ('map', 'map', 'gelu_tanh')
    """

    NAME = "SigLIP vision model"
    MODEL_TYPES = ("siglip_vision_model", "siglip")
    TRANSFORMERS_CLASSES = {
        "SiglipVisionModel": TransformersClass("siglip_vision_model", PREFIX),
        # The two-tower model, read for its vision tower.
        "SiglipModel": TransformersClass("siglip", PREFIX),
    }
    # SiglipVisionConfig's defaults.
    DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                    image_size=224, patch_size=16, num_channels=3, hidden_act="gelu_pytorch_tanh",
                    layer_norm_eps=1e-6, attention_dropout=0.0, vision_use_head=True)
    FIELDS = CLIP_FIELDS
    BODY = (POSITIONS, *torch_linear("embeddings.patch_embedding", C.EMBEDDING, "conv"), *ENCODER)
    IGNORED = {
        "embeddings.position_ids": "the position indices buffer, not a weight",
        "text_model.": "the text tower of a SiglipModel",
        "logit_scale": "the image-text logit scale of a SiglipModel",
        "logit_bias": "the image-text logit bias of a SiglipModel",
    }
    STRUCTURE = dict(
        TowerFamily.STRUCTURE,
        include_top=(False, "has no classifier after its MAP head: build it with include_top=False, pooling='map'"),
        class_token=(False, "has no class token"),
        pooled_norm=(False, "normalises every token before its MAP head (post_layernorm), not the pooled features"),
    )
    EXPORTED_OPTIONS = dict(
        TowerFamily.EXPORTED_OPTIONS,
        class_token=(None, False),
        # transformers resizes the position table its own way (bicubic) at
        # other sizes, whatever keras_vit held.
        position_interpolation=("official", "timm", "siglip"),
    )

    def model_arguments(self, config):
        """keras_vit `ViT` arguments for a SigLIP vision (or two-tower) `config.json` dict."""
        self.transformers_class(config)
        return self.tower_arguments(self.vision_config(config))

    def tower_arguments(self, config):
        """The arguments of a vision config (its defaults filled in): no class
        token, the output is the MAP head's (`pooler_output`)."""
        if not config["vision_use_head"]:
            raise self.unsupported("a tower without its attention-pool head (vision_use_head=False) "
                                   "has no pooled output. Received: vision_use_head=False")
        return dict(
            self.encoder_arguments(config),
            position_interpolation="siglip",
            classifier="map",
            include_top=False,
            pooling="map",
        )

    def export_class(self, config):
        """"SiglipVisionModel" for a model config that ends in a MAP head
        (`pooling="map"`, or `classifier="map"` with a head), else None; a
        SigLIP2 one (`position_interpolation="siglip2"`) is SigLIP2's to write.

        Raises:
            ValueError: for a MAP-pooled model SigLIP cannot hold (a class token,
                a classifier after the MAP head, a norm after pooling).

        Example:

        >>> SiglipFamily().export_class({"classifier": "map", "include_top": False, "pooling": "map"})
        'SiglipVisionModel'
        """
        if config.get("position_interpolation") == "siglip2":
            return None
        return self.map_tower(config, "SiglipVisionModel")

    def map_tower(self, config, hf_class):
        """`hf_class` when a model config ends in a MAP head, else None.

        Raises:
            ValueError: for a MAP-pooled model a SigLIP tower cannot hold.
        """
        include_top = config.get("include_top", True)
        if (config.get("classifier", "token") if include_top else config.get("pooling")) != "map":
            return None
        check_structure(config, hf_class, self.STRUCTURE)
        return hf_class

    def export_config(self, config, hf_class, class_names=None):
        """The shared fields; the attention-pool head is always there."""
        return dict(super().export_config(config, hf_class, class_names), vision_use_head=True)
