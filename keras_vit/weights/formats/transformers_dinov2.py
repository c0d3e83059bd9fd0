"""transformers DINOv2 models (`Dinov2Model`, `Dinov2WithRegistersModel`,
`Dinov2ForImageClassification`, `Dinov2WithRegistersForImageClassification`)
<-> the canonical layout, read and written.

Facts about the files (`save_pretrained`; `model_type` "dinov2" or
"dinov2_with_registers"):

- `config.json`: `hidden_size`, `num_hidden_layers`, `num_attention_heads`,
  `mlp_ratio` (an int in transformers 5), `hidden_act`, `layer_norm_eps`,
  `image_size`, `patch_size`, `num_channels`, `qkv_bias`,
  `layerscale_value`, `use_swiglu_ffn`, `num_register_tokens`, `id2label`;
- tensors: ViT's names for the embeddings and attention, LayerScale
  vectors (`layer_scale1.lambda1`, `layer_scale2.lambda1`), `norm1`/`norm2`,
  a final `layernorm`; `register_tokens` `(1, R, D)` placed after the class
  token with no position row; a `mask_token` of masked pre-training (not an
  inference weight). `pooler_output` is the class token after the final
  norm, which is keras_vit's token pooling.
- the MLP: `mlp.fc1`/`mlp.fc2` (width `hidden_size * mlp_ratio`), or with
  `use_swiglu_ffn` (DINOv2-giant) the gated MLP `mlp.weights_in`, one
  Linear holding the gate rows then the up rows (transformers 5 splits it
  into `gate_proj`/`up_proj` in memory and joins them again on saving),
  and `mlp.weights_out`; its hidden width is two thirds of
  `int(hidden_size * mlp_ratio)` rounded up to a multiple of 8
  (`keras_vit.layers.swiglu.swiglu_hidden_width`).
- the classifiers hold the body under `dinov2.` (`dinov2_with_registers.`
  with registers) and a `classifier` Linear `(classes, 2 * D)` on the class
  token concatenated with the mean of the patch tokens (registers left
  out), both after the final norm: keras_vit's `classifier="token_avg"`.
"""

import numpy as np

from keras_vit.layers.swiglu import swiglu_hidden_width
from keras_vit.weights import canonical as C
from keras_vit.weights.formats.transformers_common import ACTIVATIONS, class_names, label_config, pair
from keras_vit.weights.rules import RuleTable

MODEL_TYPES = ("dinov2", "dinov2_with_registers")
BACKBONES = ("Dinov2Model", "Dinov2WithRegistersModel", "Dinov2Backbone")
CLASSIFIERS = ("Dinov2ForImageClassification", "Dinov2WithRegistersForImageClassification")
ARCHITECTURES = BACKBONES + CLASSIFIERS
# The body's prefix in the classifiers, by `model_type`.
PREFIXES = {"dinov2": "dinov2.", "dinov2_with_registers": "dinov2_with_registers."}
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
    (_L + "mlp.weights_in.weight", C.MLP_GATE_UP + "kernel", "gate_up_kernel"),
    (_L + "mlp.weights_in.bias", C.MLP_GATE_UP + "bias", "gate_up_bias"),
    (_L + "mlp.weights_out.weight", C.MLP_DOWN + "kernel", "linear"),
    (_L + "mlp.weights_out.bias", C.MLP_DOWN + "bias"),
    (_L + "layer_scale2.lambda1", C.MLP_SCALE),
    ("layernorm.weight", C.ENCODER_NORM + "scale"),
    ("layernorm.bias", C.ENCODER_NORM + "bias"),
)
# The classifiers' head, at the root of the state dict.
HEAD = (
    ("classifier.weight", C.HEAD + "kernel", "linear"),
    ("classifier.bias", C.HEAD + "bias"),
)
POSITION_INTERPOLATION = {"dinov2": "dinov2", "dinov2_with_registers": "dinov2_registers"}
IGNORED = {"embeddings.mask_token": "the mask token of masked pre-training"}


def _unsupported(message):
    return ValueError(f"Cannot build this transformers DINOv2 model: {message}")


def _architecture(config):
    architecture = (config.get("architectures") or ["Dinov2Model"])[0]
    if architecture not in ARCHITECTURES:
        raise _unsupported(f"architecture must be one of {ARCHITECTURES}. Received: {architecture!r}")
    return architecture


def _activation(config):
    if config.get("apply_layernorm", True) is not True:
        raise _unsupported(
            f"no final norm is not a keras_vit option yet. Received: apply_layernorm={config['apply_layernorm']!r}"
        )
    act = config.get("hidden_act", "gelu")
    if config.get("use_swiglu_ffn", False):
        # The gated MLP's gate is SiLU whatever `hidden_act` says.
        return ACTIVATIONS.get(act, "gelu")
    if act not in ACTIVATIONS:
        raise _unsupported(f"`hidden_act` must be one of {sorted(ACTIVATIONS)}. Received: hidden_act={act!r}")
    return ACTIVATIONS[act]


def _mlp_arguments(config):
    hidden, ratio = config["hidden_size"], config.get("mlp_ratio", 4)
    if config.get("use_swiglu_ffn", False):
        return dict(mlp_kind="swiglu", mlp_dim=swiglu_hidden_width(hidden, ratio))
    return dict(mlp_dim=int(hidden * ratio))


def _head_arguments(config, architecture):
    if architecture not in CLASSIFIERS:
        # The output is `pooler_output`: the class token after the final norm.
        return dict(classifier="token", include_top=False, pooling="token")
    return dict(
        classifier="token_avg",
        include_top=True,
        classes=len(config.get("id2label") or {}) or config.get("num_labels", 2),
        class_names=class_names(config),
    )


def model_arguments(config):
    """keras_vit `ViT` arguments for a DINOv2 `config.json` dict.

    Example:

    >>> args = model_arguments({"model_type": "dinov2_with_registers", "hidden_size": 384,
    ...     "num_hidden_layers": 12, "num_attention_heads": 6, "mlp_ratio": 4,
    ...     "image_size": 518, "patch_size": 14, "num_register_tokens": 4})
    >>> args["mlp_dim"], args["num_register_tokens"], args["layer_scale_init"]
    (1536, 4, 1.0)
    >>> args = model_arguments({"model_type": "dinov2", "hidden_size": 1536,
    ...     "num_hidden_layers": 40, "num_attention_heads": 24, "use_swiglu_ffn": True,
    ...     "architectures": ["Dinov2ForImageClassification"], "num_labels": 1000})
    >>> args["mlp_kind"], args["mlp_dim"], args["classifier"], args["classes"]
    ('swiglu', 4096, 'token_avg', 1000)
    """
    architecture = _architecture(config)
    activation = _activation(config)
    size = pair(config.get("image_size", 518))
    args = dict(
        image_size=size,
        patch_size=pair(config.get("patch_size", 14)),
        hidden_size=config["hidden_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-6)),
        mlp_activation=activation,
        qkv_bias=bool(config.get("qkv_bias", True)),
        layer_scale_init=float(config.get("layerscale_value", 1.0)),
        num_register_tokens=int(config.get("num_register_tokens", 0)),
        # transformers' bicubic resize (antialiased in the registers model).
        position_interpolation=POSITION_INTERPOLATION.get(config.get("model_type"), "dinov2"),
        dropout_rate=float(config.get("hidden_dropout_prob", 0.0)),
        attention_dropout_rate=float(config.get("attention_probs_dropout_prob", 0.0)),
        classifier_activation=None,
        **_mlp_arguments(config),
        **_head_arguments(config, architecture),
    )
    if config.get("num_channels", 3) != 3:
        args["input_shape"] = size + (config["num_channels"],)
    return args


def _table(prefix):
    return RuleTable(BODY).prefixed(prefix) + RuleTable(HEAD)


def table(state):
    """The `RuleTable` of a state dict: the body at its root (backbones) or
    under `dinov2.`/`dinov2_with_registers.` (classifiers), then the head."""
    prefix = next((p for p in PREFIXES.values() if any(k.startswith(p) for k in state)), "")
    return _table(prefix)


# transformers `hidden_act` of each keras_vit `mlp_activation`.
EXPORTED_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "quick_gelu": "quick_gelu"}
# The block and encoder options a DINOv2 config holds (None: any value).
EXPORTED_OPTIONS = {
    "layer_norm_epsilon": None,
    "mlp_activation": tuple(EXPORTED_ACTIVATIONS),
    "mlp_kind": ("plain", "swiglu"),
    "qkv_bias": None,
    "layer_scale_init": None,
    "dropout_rate": None,
    "attention_dropout_rate": None,
    # The position resize at other image sizes: transformers always applies
    # its own (bicubic; antialiased with registers) whatever keras_vit held.
    "position_interpolation": ("official", "timm", "dinov2", "dinov2_registers"),
}


def export_architecture(config):
    """The transformers DINOv2 class of a DINOv2-shaped model config
    (LayerScale, class token; no head, or a "token_avg" one), else None."""
    dinov2 = (
        config.get("layer_scale_init") is not None
        and "resnet_layers" not in config
        and not config.get("distillation_token", False)
        and not config.get("pooled_norm", False)
        and config.get("representation_size") is None
    )
    head = (config.get("include_top", True), config.get("classifier", "token"))
    if not dinov2 or head not in ((False, "token"), (True, "token_avg")):
        return None
    registers = bool(config.get("num_register_tokens", 0))
    return (CLASSIFIERS if head[0] else BACKBONES)[registers]


def _ratio(mlp_dim, hidden_size, mlp_kind):
    """transformers' integer `mlp_ratio` (validated by transformers 5) that
    gives `mlp_dim`."""
    if mlp_kind != "swiglu":
        ratio = mlp_dim / hidden_size
        return int(ratio) if ratio.is_integer() else ratio
    # The SwiGLU width is rounded: the integer ratio nearest 1.5 * mlp_dim / D that gives it.
    guess = max(1, round(1.5 * mlp_dim / hidden_size))
    for ratio in sorted(range(1, 2 * guess + 2), key=lambda r: abs(r - guess)):
        if swiglu_hidden_width(hidden_size, ratio) == mlp_dim:
            return ratio
    raise ValueError(
        "transformers has no ViT that represents this model: its DINOv2 SwiGLU width is "
        f"computed from an integer mlp_ratio, and none gives mlp_dim={mlp_dim} at "
        f"hidden_size={hidden_size} (keras_vit.layers.swiglu_hidden_width gives the widths it can hold)."
    )


def export_config(config, architecture, class_names=None):
    """A transformers `config.json` dict for a DINOv2-shaped keras_vit model
    config (`class_names` name a classifier's outputs; None: `LABEL_i`)."""
    height, width = config["image_size"]
    ph, pw = config["patch_size"]
    if height != width or ph != pw:
        raise ValueError(
            "transformers' DINOv2 takes square images and patches. Received: "
            f"image_size={(height, width)}, patch_size={(ph, pw)}"
        )
    registers = config.get("num_register_tokens", 0)
    mlp_kind = config.get("mlp_kind", "plain")
    out = {
        "architectures": [architecture],
        "model_type": "dinov2_with_registers" if registers else "dinov2",
        "image_size": height,
        "patch_size": ph,
        "num_channels": config["input_shape"][-1],
        "hidden_size": config["hidden_size"],
        "num_hidden_layers": config["num_layers"],
        "num_attention_heads": config["num_heads"],
        "mlp_ratio": _ratio(config["mlp_dim"], config["hidden_size"], mlp_kind),
        "hidden_act": EXPORTED_ACTIVATIONS[config["mlp_activation"]],
        "layer_norm_eps": config["layer_norm_epsilon"],
        "qkv_bias": config.get("qkv_bias", True),
        "layerscale_value": config["layer_scale_init"],
        "hidden_dropout_prob": config.get("dropout_rate", 0.0),
        "attention_probs_dropout_prob": config.get("attention_dropout_rate", 0.0),
        "use_swiglu_ffn": mlp_kind == "swiglu",
        "dtype": "float32",
    }
    if registers:
        out["num_register_tokens"] = registers
    if architecture in CLASSIFIERS:
        out.update(label_config(class_names, config["classes"]))
    return out


def export_state(params, architecture):
    """The state dict of canonical `params` for `architecture`; the mask
    token (not a weight keras_vit holds, unused at inference) is written as
    zeros, its initial value."""
    prefix = ""
    if architecture in CLASSIFIERS:
        prefix = PREFIXES["dinov2_with_registers" if C.REG in params else "dinov2"]
    state = _table(prefix).from_canonical(params)
    width = params[C.CLS].shape[-1]
    state[prefix + "embeddings.mask_token"] = np.zeros((1, width), "float32")
    return state
