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
from keras_vit.weights.formats.transformers_common import (
    ACTIVATIONS,
    HIDDEN_ACTS,
    has_class_token,
    pair,
    refuse,
    refuse_layout,
    shape_checks,
    tower_config,
    vision_config,
)
from keras_vit.weights.rules import RuleTable

MODEL_TYPES = ("clip_vision_model", "clip", "metaclip_2")
ARCHITECTURES = ("CLIPVisionModel", "CLIPVisionModelWithProjection")
# The two-tower models, read for their vision tower and projection
# (MetaCLIP 2's tensors and config are CLIP's).
TWO_TOWERS = ("CLIPModel", "MetaClip2Model")
PREFIX = "vision_model."
_L = "encoder.layers.{i}."
# The blocks of CLIP and SigLIP (same names).
BLOCKS = (
    (_L + "layer_norm1.weight", C.NORM_1 + "scale"),
    (_L + "layer_norm1.bias", C.NORM_1 + "bias"),
    *(
        (_L + f"self_attn.{source}.{leaf}", C.ATTENTION + f"{name}/{kind}", transform)
        for source, name in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"))
        for leaf, kind, transform in (("weight", "kernel", "heads_in"), ("bias", "bias", "heads_bias"))
    ),
    (_L + "self_attn.out_proj.weight", C.ATTENTION + "out/kernel", "heads_out"),
    (_L + "self_attn.out_proj.bias", C.ATTENTION + "out/bias"),
    (_L + "layer_norm2.weight", C.NORM_2 + "scale"),
    (_L + "layer_norm2.bias", C.NORM_2 + "bias"),
    (_L + "mlp.fc1.weight", C.MLP_IN + "kernel", "linear"),
    (_L + "mlp.fc1.bias", C.MLP_IN + "bias"),
    (_L + "mlp.fc2.weight", C.MLP_OUT + "kernel", "linear"),
    (_L + "mlp.fc2.bias", C.MLP_OUT + "bias"),
)
BODY = (
    ("embeddings.class_embedding", C.CLS, "token"),
    ("embeddings.position_embedding.weight", C.POSEMB, "batch"),
    ("embeddings.patch_embedding.weight", C.EMBEDDING + "kernel", "conv"),
    ("pre_layrnorm.weight", C.PRE_NORM + "scale"),
    ("pre_layrnorm.bias", C.PRE_NORM + "bias"),
    *BLOCKS,
    ("post_layernorm.weight", C.POOLED_NORM + "scale"),
    ("post_layernorm.bias", C.POOLED_NORM + "bias"),
)
PROJECTION = (("visual_projection.weight", C.HEAD + "kernel", "linear"),)
# Keys ignored by their end or their start.
IGNORED = {
    "embeddings.position_ids": "the position indices buffer, not a weight",
    "text_model.": "the text tower of a CLIPModel",
    "text_projection.weight": "the text tower's projection of a CLIPModel",
    "logit_scale": "the image-text logit scale of a CLIPModel",
}
# CLIPVisionConfig's defaults, for a `vision_config` that leaves fields out.
DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                image_size=224, patch_size=32, hidden_act="quick_gelu", layer_norm_eps=1e-5)


def _unsupported(message):
    return ValueError(f"Cannot build this transformers CLIP vision model: {message}")


def _architecture(config):
    known = ARCHITECTURES + TWO_TOWERS
    two_towers = TWO_TOWERS[config.get("model_type") == "metaclip_2"]
    default = two_towers if "vision_config" in config else known[0]
    architecture = (config.get("architectures") or [default])[0]
    if architecture not in known:
        raise _unsupported(f"architecture must be one of {known}. Received: {architecture!r}")
    return architecture


def model_arguments(config):
    """keras_vit `ViT` arguments for a CLIP vision `config.json` dict.

    Example:

    >>> args = model_arguments({"model_type": "clip_vision_model",
    ...     "architectures": ["CLIPVisionModelWithProjection"], "hidden_size": 768,
    ...     "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
    ...     "image_size": 224, "patch_size": 32, "projection_dim": 512})
    >>> args["pre_norm"], args["patch_bias"], args["mlp_activation"], args["classes"]
    (True, False, 'quick_gelu', 512)
    """
    projected = _architecture(config) != "CLIPVisionModel"
    # The two-tower model's projection width is its own field, not the vision config's.
    projection_dim = config.get("projection_dim", 512)
    config = vision_config(config, DEFAULTS)
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
        patch_bias=False,
        pre_norm=True,
        pooled_norm=True,
        position_interpolation="clip",
        attention_dropout_rate=float(config.get("attention_dropout", 0.0)),
        classifier="token",
        classifier_activation=None,
    )
    if projected:
        # image_embeds: the normed class token through the projection.
        args.update(include_top=True, classes=int(projection_dim))
    else:
        # pooler_output: the class token after `post_layernorm`.
        args.update(include_top=False, pooling="token")
    if config.get("num_channels", 3) != 3:
        args["input_shape"] = size + (config["num_channels"],)
    return args


def table(state):
    """The `RuleTable` of a state dict (the body at its root or under
    `vision_model.`, the projection at the root)."""
    prefix = PREFIX if any(k.startswith(PREFIX) for k in state) else ""
    return RuleTable(BODY).prefixed(prefix) + RuleTable(PROJECTION)


def complete(params):
    """Adds the zero bias of the projection head (`visual_projection` has none)."""
    kernel = params.get(C.HEAD + "kernel")
    if kernel is not None and C.HEAD + "bias" not in params:
        params[C.HEAD + "bias"] = np.zeros(kernel.shape[-1:], kernel.dtype)
    return params


# The block and encoder options a CLIP vision config holds (None: any value);
# the others must keep their defaults.
EXPORTED_OPTIONS = {
    "layer_norm_epsilon": None,
    "mlp_activation": tuple(HIDDEN_ACTS),
    "patch_bias": (False,),
    "pre_norm": (True,),
    "class_token": (None, True),
    # transformers resizes the position table its own way (bicubic) at
    # other sizes, whatever keras_vit held.
    "position_interpolation": ("official", "timm", "clip"),
}


def export_architecture(config):
    """The CLIP class of a model config shaped like a CLIP tower (a LayerNorm
    before the blocks: `pre_norm=True`), else None.

    Raises:
        ValueError: for a CLIP-shaped model whose pooling or head CLIP has not.

    Example:

    >>> export_architecture({"pre_norm": True, "pooled_norm": True, "include_top": False,
    ...                      "pooling": "token"})
    'CLIPVisionModel'
    """
    if config.get("pre_norm") is not True:
        return None
    projected = bool(config.get("include_top", True))
    architecture = ARCHITECTURES[projected]
    classifier, pooling = config.get("classifier", "token"), config.get("pooling")
    refuse_layout(architecture, shape_checks(config) + (
        (classifier != "token" or not has_class_token(config),
         f"pools its class token. Received: classifier={classifier!r}, class_token={config.get('class_token')!r}"),
        (not config.get("pooled_norm", False),
         "normalises the class token alone after the blocks (post_layernorm): it needs "
         "pooled_norm=True. Received: pooled_norm=False"),
        (not projected and pooling != "token",
         "returns the normed class token (pooler_output): include_top=False needs pooling='token'. "
         f"Received: pooling={pooling!r}"),
    ))
    return architecture


def export_config(config, architecture, class_names=None):
    """A transformers `config.json` dict for a CLIP-shaped keras_vit model config."""
    out = tower_config(config, architecture, "clip_vision_model")
    out["attention_dropout"] = config.get("attention_dropout_rate", 0.0)
    if architecture == "CLIPVisionModelWithProjection":
        out["projection_dim"] = config["classes"]
    return out


def export_state(params, architecture=None):
    """The state dict of canonical `params`, the body under `vision_model.`.

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
    return (RuleTable(BODY).prefixed(PREFIX) + RuleTable(PROJECTION)).from_canonical(params)


def adjust_preprocessor(out, record, config=None):
    """The `preprocessor_config.json` dict `out` (written for `record`) for
    `CLIPImageProcessor`, whose shorter-side resize (`{"shortest_edge": n}`)
    keeps a record's int `resize`, and whose crop is on unless turned off."""
    out = dict(out, image_processor_type="CLIPImageProcessor")
    out.setdefault("do_center_crop", False)
    if isinstance(record.resize, int):
        out["size"] = {"shortest_edge": record.resize}
    return out
