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
"""

import numpy as np

from keras_vit.weights import canonical as C
from keras_vit.weights.formats.transformers_common import ACTIVATIONS, pair
from keras_vit.weights.rules import RuleTable

MODEL_TYPES = ("clip_vision_model",)
ARCHITECTURES = ("CLIPVisionModel", "CLIPVisionModelWithProjection")
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
IGNORED = {"embeddings.position_ids": "the position indices buffer, not a weight"}


def _unsupported(message):
    return ValueError(f"Cannot build this transformers CLIP vision model: {message}")


def _architecture(config):
    architecture = (config.get("architectures") or ["CLIPVisionModel"])[0]
    if architecture not in ARCHITECTURES:
        raise _unsupported(f"architecture must be one of {ARCHITECTURES}. Received: {architecture!r}")
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
    projected = _architecture(config) == "CLIPVisionModelWithProjection"
    act = config.get("hidden_act", "quick_gelu")
    if act not in ACTIVATIONS:
        raise _unsupported(f"`hidden_act` must be one of {sorted(ACTIVATIONS)}. Received: hidden_act={act!r}")
    size = pair(config.get("image_size", 224))
    args = dict(
        image_size=size,
        patch_size=pair(config.get("patch_size", 32)),
        hidden_size=config["hidden_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        mlp_dim=config["intermediate_size"],
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-5)),
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
        args.update(include_top=True, classes=int(config.get("projection_dim", 512)))
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
