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
"""

from keras_vit.weights import canonical as C
from keras_vit.weights.formats.transformers_clip import BLOCKS
from keras_vit.weights.formats.transformers_common import ACTIVATIONS, pair
from keras_vit.weights.rules import RuleTable

MODEL_TYPES = ("siglip_vision_model",)
ARCHITECTURES = ("SiglipVisionModel",)
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
IGNORED = {"embeddings.position_ids": "the position indices buffer, not a weight"}


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
    architecture = (config.get("architectures") or ["SiglipVisionModel"])[0]
    if architecture not in ARCHITECTURES:
        raise _unsupported(f"architecture must be one of {ARCHITECTURES}. Received: {architecture!r}")
    if not config.get("vision_use_head", True):
        raise _unsupported("a tower without its attention-pool head (vision_use_head=False) "
                           "has no pooled output. Received: vision_use_head=False")
    act = config.get("hidden_act", "gelu_pytorch_tanh")
    if act not in ACTIVATIONS:
        raise _unsupported(f"`hidden_act` must be one of {sorted(ACTIVATIONS)}. Received: hidden_act={act!r}")
    size = pair(config.get("image_size", 224))
    args = dict(
        image_size=size,
        patch_size=pair(config.get("patch_size", 16)),
        hidden_size=config["hidden_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        mlp_dim=config["intermediate_size"],
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-6)),
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
