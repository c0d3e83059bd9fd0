"""transformers CLIP vision towers (`CLIPVisionModel`,
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
"""

import numpy as np

from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import torch_block, torch_linear, torch_norm
from keras_vit.weights.formats.transformers_family import (
    CLIP_FIELDS,
    TransformersClass,
    TowerFamily,
    check_structure,
    refuse,
)

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


class ClipFamily(TowerFamily):
    """transformers' CLIP vision towers, and the vision side of `CLIPModel`.

    Example:

    >>> args = ClipFamily().model_arguments({"model_type": "clip_vision_model",
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

        >>> ClipFamily().export_class({"pre_norm": True, "pooled_norm": True, "include_top": False,
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
