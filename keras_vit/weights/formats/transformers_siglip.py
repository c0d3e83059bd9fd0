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
from keras_vit.weights.formats.transformers_clip import BLOCKS
from keras_vit.weights.formats.transformers_common import (
    ACTIVATIONS,
    HIDDEN_ACTS,
    has_class_token,
    pair,
    refuse_layout,
    shape_checks,
    tower_config,
    vision_config,
)
from keras_vit.weights.rules import RuleTable

MODEL_TYPES = ("siglip_vision_model", "siglip")
ARCHITECTURES = ("SiglipVisionModel",)
# The two-tower model, read for its vision tower.
TWO_TOWERS = "SiglipModel"
PREFIX = "vision_model."
_H = "head."
_MAP = C.MAP_HEAD
BODY = (
    ("embeddings.position_embedding.weight", C.POSEMB, "batch"),
    ("embeddings.patch_embedding.weight", C.EMBEDDING + "kernel", "conv"),
    ("embeddings.patch_embedding.bias", C.EMBEDDING + "bias"),
    *BLOCKS,
    ("post_layernorm.weight", C.ENCODER_NORM + "scale"),
    ("post_layernorm.bias", C.ENCODER_NORM + "bias"),
    (_H + "probe", _MAP + "probe"),
    (_H + "attention.in_proj_weight", _MAP + "MultiHeadDotProductAttention_0/{part}/kernel", "qkv_kernel"),
    (_H + "attention.in_proj_bias", _MAP + "MultiHeadDotProductAttention_0/{part}/bias", "qkv_bias"),
    (_H + "attention.out_proj.weight", _MAP + "MultiHeadDotProductAttention_0/out/kernel", "heads_out"),
    (_H + "attention.out_proj.bias", _MAP + "MultiHeadDotProductAttention_0/out/bias"),
    (_H + "layernorm.weight", _MAP + "LayerNorm_0/scale"),
    (_H + "layernorm.bias", _MAP + "LayerNorm_0/bias"),
    (_H + "mlp.fc1.weight", _MAP + "MlpBlock_0/Dense_0/kernel", "linear"),
    (_H + "mlp.fc1.bias", _MAP + "MlpBlock_0/Dense_0/bias"),
    (_H + "mlp.fc2.weight", _MAP + "MlpBlock_0/Dense_1/kernel", "linear"),
    (_H + "mlp.fc2.bias", _MAP + "MlpBlock_0/Dense_1/bias"),
)
# Keys ignored by their end or their start.
IGNORED = {
    "embeddings.position_ids": "the position indices buffer, not a weight",
    "text_model.": "the text tower of a SiglipModel",
    "logit_scale": "the image-text logit scale of a SiglipModel",
    "logit_bias": "the image-text logit bias of a SiglipModel",
}
# SiglipVisionConfig's defaults, for a `vision_config` that leaves fields out.
DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                image_size=224, patch_size=16, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)


def _unsupported(message):
    return ValueError(f"Cannot build this transformers SigLIP vision model: {message}")


def model_arguments(config):
    """keras_vit `ViT` arguments for a SigLIP vision `config.json` dict.

    Example:

    >>> args = model_arguments({"model_type": "siglip_vision_model", "hidden_size": 768,
    ...     "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
    ...     "image_size": 224, "patch_size": 16})
    >>> args["classifier"], args["pooling"], args["mlp_activation"]
    ('map', 'map', 'gelu_tanh')
    """
    known = ARCHITECTURES + (TWO_TOWERS,)
    architecture = (config.get("architectures") or [known[1 if "vision_config" in config else 0]])[0]
    if architecture not in known:
        raise _unsupported(f"architecture must be one of {known}. Received: {architecture!r}")
    config = vision_config(config, DEFAULTS)
    if not config.get("vision_use_head", True):
        raise _unsupported("a tower without its attention-pool head (vision_use_head=False) "
                           "has no pooled output. Received: vision_use_head=False")
    act = config["hidden_act"]
    if act not in ACTIVATIONS:
        raise _unsupported(f"`hidden_act` must be one of {sorted(ACTIVATIONS)}. Received: hidden_act={act!r}")
    size = pair(config["image_size"])
    args = dict(
        image_size=size,
        patch_size=pair(config["patch_size"]),
        hidden_size=config["hidden_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        mlp_dim=config["intermediate_size"],
        layer_norm_epsilon=float(config["layer_norm_eps"]),
        mlp_activation=ACTIVATIONS[act],
        attention_dropout_rate=float(config.get("attention_dropout", 0.0)),
        position_interpolation="siglip",
        # No class token; pooler_output is the MAP head's output.
        classifier="map",
        include_top=False,
        pooling="map",
        classifier_activation=None,
    )
    if config.get("num_channels", 3) != 3:
        args["input_shape"] = size + (config["num_channels"],)
    return args


def table(state):
    """The `RuleTable` of a state dict (at its root or under `vision_model.`)."""
    prefix = PREFIX if any(k.startswith(PREFIX) for k in state) else ""
    return RuleTable(BODY).prefixed(prefix)


# The block and encoder options a SigLIP vision config holds (None: any value);
# the others must keep their defaults.
EXPORTED_OPTIONS = {
    "layer_norm_epsilon": None,
    "mlp_activation": tuple(HIDDEN_ACTS),
    "class_token": (None, False),
    # transformers resizes the position table its own way (bicubic) at
    # other sizes, whatever keras_vit held.
    "position_interpolation": ("official", "timm", "siglip"),
}


def export_architecture(config):
    """"SiglipVisionModel" for a model config that ends in a MAP head
    (`pooling="map"`, or `classifier="map"` with a head), else None; a
    SigLIP2 one (`position_interpolation="siglip2"`) is SigLIP2's to write.

    Raises:
        ValueError: for a MAP-pooled model SigLIP cannot hold (a class token,
            a classifier after the MAP head, a norm after pooling).

    Example:

    >>> export_architecture({"classifier": "map", "include_top": False, "pooling": "map"})
    'SiglipVisionModel'
    """
    if config.get("position_interpolation") == "siglip2":
        return None
    return map_tower(config, ARCHITECTURES[0])


def map_tower(config, architecture):
    """`architecture` when a model config ends in a MAP head, else None.

    Raises:
        ValueError: for a MAP-pooled model a SigLIP tower cannot hold.
    """
    include_top = bool(config.get("include_top", True))
    classifier = config.get("classifier", "token")
    if (classifier if include_top else config.get("pooling")) != "map":
        return None
    refuse_layout(architecture, shape_checks(config) + (
        (include_top,
         f"has no classifier after its MAP head: build it with include_top=False, pooling='map'. "
         f"Received: include_top=True, classes={config.get('classes')!r}"),
        (has_class_token(config),
         f"has no class token. Received: classifier={classifier!r}, class_token={config.get('class_token')!r}"),
        (config.get("pooled_norm", False),
         "normalises every token before its MAP head (post_layernorm), not the pooled "
         "features. Received: pooled_norm=True"),
    ))
    return architecture


def export_config(config, architecture, class_names=None):
    """A transformers `config.json` dict for a SigLIP-shaped keras_vit model config."""
    return {**tower_config(config, architecture, "siglip_vision_model"), **head_fields(config)}


def head_fields(config):
    """The SigLIP (and SigLIP2) fields beyond `tower_config`'s."""
    return {"attention_dropout": config.get("attention_dropout_rate", 0.0), "vision_use_head": True}


def export_state(params, architecture=None):
    """The state dict of canonical `params`, under `vision_model.`."""
    return RuleTable(BODY).prefixed(PREFIX).from_canonical(params)
