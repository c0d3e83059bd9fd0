"""transformers DINOv2 backbones (`Dinov2Model`, `Dinov2WithRegistersModel`)
-> the canonical layout.

Facts about the files (`save_pretrained`; `model_type` "dinov2" or
"dinov2_with_registers"):

- `config.json`: `hidden_size`, `num_hidden_layers`, `num_attention_heads`,
  `mlp_ratio` (MLP width = `hidden_size * mlp_ratio`), `hidden_act`,
  `layer_norm_eps`, `image_size`, `patch_size`, `num_channels`, `qkv_bias`,
  `layerscale_value`, `use_swiglu_ffn`, `num_register_tokens`;
- tensors: ViT's names for the embeddings and attention, LayerScale
  vectors (`layer_scale1.lambda1`, `layer_scale2.lambda1`), `norm1`/`norm2`,
  `mlp.fc1`/`mlp.fc2`, a final `layernorm`; `register_tokens` `(1, R, D)`
  placed after the class token with no position row; a `mask_token` of
  masked pre-training (not an inference weight). `pooler_output` is the
  class token after the final norm, which is keras_vit's token pooling.

Under `dinov2.` in `Dinov2ForImageClassification`, whose classifier reads
the class token beside the mean of the patch tokens: keras_vit has no such
pooling yet, so that class is refused.
"""

import numpy as np

from keras_vit.weights import canonical as C
from keras_vit.weights.formats.transformers_common import ACTIVATIONS, pair
from keras_vit.weights.rules import RuleTable

MODEL_TYPES = ("dinov2", "dinov2_with_registers")
ARCHITECTURES = ("Dinov2Model", "Dinov2WithRegistersModel", "Dinov2Backbone")
PREFIX = "dinov2."
_L = "encoder.layer.{i}."
BODY = (
    ("embeddings.cls_token", C.CLS),
    ("embeddings.register_tokens", C.REG),
    ("embeddings.position_embeddings", C.POSEMB),
    ("embeddings.patch_embeddings.projection.weight", C.EMBEDDING + "kernel", "conv"),
    ("embeddings.patch_embeddings.projection.bias", C.EMBEDDING + "bias"),
    (_L + "norm1.weight", C.NORM_1 + "scale"),
    (_L + "norm1.bias", C.NORM_1 + "bias"),
    *(
        (_L + f"attention.attention.{name}.{leaf}", C.ATTENTION + f"{name}/{kind}", transform)
        for name in ("query", "key", "value")
        for leaf, kind, transform in (("weight", "kernel", "heads_in"), ("bias", "bias", "heads_bias"))
    ),
    (_L + "attention.output.dense.weight", C.ATTENTION + "out/kernel", "heads_out"),
    (_L + "attention.output.dense.bias", C.ATTENTION + "out/bias"),
    (_L + "layer_scale1.lambda1", C.ATTENTION_SCALE),
    (_L + "norm2.weight", C.NORM_2 + "scale"),
    (_L + "norm2.bias", C.NORM_2 + "bias"),
    (_L + "mlp.fc1.weight", C.MLP_IN + "kernel", "linear"),
    (_L + "mlp.fc1.bias", C.MLP_IN + "bias"),
    (_L + "mlp.fc2.weight", C.MLP_OUT + "kernel", "linear"),
    (_L + "mlp.fc2.bias", C.MLP_OUT + "bias"),
    (_L + "layer_scale2.lambda1", C.MLP_SCALE),
    ("layernorm.weight", C.ENCODER_NORM + "scale"),
    ("layernorm.bias", C.ENCODER_NORM + "bias"),
)
POSITION_INTERPOLATION = {"dinov2": "dinov2", "dinov2_with_registers": "dinov2_registers"}
IGNORED = {"embeddings.mask_token": "the mask token of masked pre-training"}


def _unsupported(message):
    return ValueError(f"Cannot build this transformers DINOv2 model: {message}")


def _check(config):
    architecture = (config.get("architectures") or ["Dinov2Model"])[0]
    if architecture not in ARCHITECTURES:
        raise _unsupported(
            f"architecture must be one of {ARCHITECTURES} (the classifier of "
            "Dinov2ForImageClassification reads the class token beside the mean patch token, "
            f"a pooling keras_vit does not have yet). Received: {architecture!r}"
        )
    checks = (
        ("use_swiglu_ffn", False, "a SwiGLU MLP (DINOv2-giant)"),
        ("apply_layernorm", True, "no final norm"),
    )
    for key, neutral, what in checks:
        if config.get(key, neutral) != neutral:
            raise _unsupported(f"{what} is not a keras_vit option yet. Received: {key}={config[key]!r}")
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise _unsupported(f"`hidden_act` must be one of {sorted(ACTIVATIONS)}. Received: hidden_act={act!r}")
    return ACTIVATIONS[act]


def model_arguments(config):
    """keras_vit `ViT` arguments for a DINOv2 `config.json` dict.

    Example:

    >>> args = model_arguments({"model_type": "dinov2_with_registers", "hidden_size": 384,
    ...     "num_hidden_layers": 12, "num_attention_heads": 6, "mlp_ratio": 4,
    ...     "image_size": 518, "patch_size": 14, "num_register_tokens": 4})
    >>> args["mlp_dim"], args["num_register_tokens"], args["layer_scale_init"]
    (1536, 4, 1.0)
    """
    activation = _check(config)
    size = pair(config.get("image_size", 518))
    hidden = config["hidden_size"]
    args = dict(
        image_size=size,
        patch_size=pair(config.get("patch_size", 14)),
        hidden_size=hidden,
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        mlp_dim=int(hidden * config.get("mlp_ratio", 4)),
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-6)),
        mlp_activation=activation,
        qkv_bias=bool(config.get("qkv_bias", True)),
        layer_scale_init=float(config.get("layerscale_value", 1.0)),
        num_register_tokens=int(config.get("num_register_tokens", 0)),
        # transformers' bicubic resize (antialiased in the registers model).
        position_interpolation=POSITION_INTERPOLATION.get(config.get("model_type"), "dinov2"),
        dropout_rate=float(config.get("hidden_dropout_prob", 0.0)),
        attention_dropout_rate=float(config.get("attention_probs_dropout_prob", 0.0)),
        classifier="token",
        include_top=False,
        # The output is `pooler_output`: the class token after the final norm.
        pooling="token",
        classifier_activation=None,
    )
    if config.get("num_channels", 3) != 3:
        args["input_shape"] = size + (config["num_channels"],)
    return args


def table(state):
    """The `RuleTable` of a state dict (the body at its root or under `dinov2.`)."""
    prefix = PREFIX if any(k.startswith(PREFIX) for k in state) else ""
    return RuleTable(BODY).prefixed(prefix)


# transformers `hidden_act` of each keras_vit `mlp_activation`.
EXPORTED_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "quick_gelu": "quick_gelu"}
# The block and encoder options a DINOv2 config holds (None: any value).
EXPORTED_OPTIONS = {
    "layer_norm_epsilon": None,
    "mlp_activation": tuple(EXPORTED_ACTIVATIONS),
    "qkv_bias": None,
    "layer_scale_init": None,
    "dropout_rate": None,
    "attention_dropout_rate": None,
    # The position resize at other image sizes: transformers always applies
    # its own (bicubic; antialiased with registers) whatever keras_vit held.
    "position_interpolation": ("official", "dinov2", "dinov2_registers"),
}


def export_architecture(config):
    """"Dinov2Model" or "Dinov2WithRegistersModel" for a DINOv2-shaped model
    config (LayerScale, class token, no head), else None."""
    dinov2 = (
        config.get("layer_scale_init") is not None
        and not config.get("include_top", True)
        and config.get("classifier", "token") == "token"
        and "resnet_layers" not in config
        and not config.get("distillation_token", False)
        and not config.get("pooled_norm", False)
        and config.get("representation_size") is None
    )
    if not dinov2:
        return None
    return "Dinov2WithRegistersModel" if config.get("num_register_tokens", 0) else "Dinov2Model"


def _ratio(mlp_dim, hidden_size):
    # transformers 5 validates an integer ratio; DINOv2's are.
    ratio = mlp_dim / hidden_size
    return int(ratio) if ratio.is_integer() else ratio


def export_config(config, architecture):
    """A transformers `config.json` dict for a DINOv2-shaped keras_vit model config."""
    height, width = config["image_size"]
    ph, pw = config["patch_size"]
    if height != width or ph != pw:
        raise ValueError(
            "transformers' DINOv2 takes square images and patches. Received: "
            f"image_size={(height, width)}, patch_size={(ph, pw)}"
        )
    out = {
        "architectures": [architecture],
        "model_type": "dinov2_with_registers" if config.get("num_register_tokens", 0) else "dinov2",
        "image_size": height,
        "patch_size": ph,
        "num_channels": config["input_shape"][-1],
        "hidden_size": config["hidden_size"],
        "num_hidden_layers": config["num_layers"],
        "num_attention_heads": config["num_heads"],
        "mlp_ratio": _ratio(config["mlp_dim"], config["hidden_size"]),
        "hidden_act": EXPORTED_ACTIVATIONS[config["mlp_activation"]],
        "layer_norm_eps": config["layer_norm_epsilon"],
        "qkv_bias": config.get("qkv_bias", True),
        "layerscale_value": config["layer_scale_init"],
        "hidden_dropout_prob": config.get("dropout_rate", 0.0),
        "attention_probs_dropout_prob": config.get("attention_dropout_rate", 0.0),
        "use_swiglu_ffn": False,
        "dtype": "float32",
    }
    if config.get("num_register_tokens", 0):
        out["num_register_tokens"] = config["num_register_tokens"]
    return out


def export_state(params):
    """The state dict of canonical `params`; the mask token (not a weight
    keras_vit holds, unused at inference) is written as zeros, its initial value."""
    state = RuleTable(BODY).from_canonical(params)
    width = params[C.CLS].shape[-1]
    state["embeddings.mask_token"] = np.zeros((1, width), "float32")
    return state
