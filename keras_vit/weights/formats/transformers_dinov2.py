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
from keras_vit.weights.formats.conventions import torch_block, torch_linear
from keras_vit.weights.formats.transformers_family import (
    HIDDEN_ACTS,
    VIT_FIELDS,
    TransformersClass,
    TransformersFamily,
)
from keras_vit.weights.formats.transformers_vit import CLASS_AND_PATCHES, FINAL_NORM, POSITIONS

_L = "encoder.layer.{i}."
BODY = (
    *CLASS_AND_PATCHES,
    ("embeddings.register_tokens", C.REG),
    POSITIONS,
    *torch_block(
        _L, "norm1",
        ("attention.attention.query", "attention.attention.key", "attention.attention.value",
         "attention.output.dense"),
        "norm2", "mlp.fc1", "mlp.fc2",
    ),
    (_L + "layer_scale1.lambda1", C.ATTENTION_SCALE),
    (_L + "layer_scale2.lambda1", C.MLP_SCALE),
    *torch_linear(_L + "mlp.weights_in", C.MLP_GATE_UP, "gate_up_kernel", "gate_up_bias"),
    *torch_linear(_L + "mlp.weights_out", C.MLP_DOWN),
    *FINAL_NORM,
)
# The classifiers' head, at the root of the state dict.
HEAD = torch_linear("classifier", C.HEAD)
MASK_TOKEN = "embeddings.mask_token"


class Dinov2Family(TransformersFamily):
    """transformers' DINOv2, with and without registers.

    Example:

    >>> family = Dinov2Family()
    >>> args = family.model_arguments({"model_type": "dinov2_with_registers", "hidden_size": 384,
    ...     "num_hidden_layers": 12, "num_attention_heads": 6, "mlp_ratio": 4,
    ...     "image_size": 518, "patch_size": 14, "num_register_tokens": 4})
    >>> args["mlp_dim"], args["num_register_tokens"], args["layer_scale_init"]
    (1536, 4, 1.0)
    >>> args = family.model_arguments({"model_type": "dinov2", "hidden_size": 1536,
    ...     "num_hidden_layers": 40, "num_attention_heads": 24, "use_swiglu_ffn": True,
    ...     "architectures": ["Dinov2ForImageClassification"], "num_labels": 1000})
    >>> args["mlp_kind"], args["mlp_dim"], args["classifier"], args["classes"]
    ('swiglu', 4096, 'token_avg', 1000)
    """

    NAME = "DINOv2 model"
    MODEL_TYPES = ("dinov2", "dinov2_with_registers")
    TRANSFORMERS_CLASSES = {
        "Dinov2Model": TransformersClass("dinov2"),
        "Dinov2WithRegistersModel": TransformersClass("dinov2_with_registers"),
        "Dinov2Backbone": TransformersClass("dinov2"),
        "Dinov2ForImageClassification": TransformersClass("dinov2", "dinov2.", HEAD, True),
        "Dinov2WithRegistersForImageClassification": TransformersClass(
            "dinov2_with_registers", "dinov2_with_registers.", HEAD, True
        ),
    }
    DEFAULTS = dict(image_size=518, patch_size=14, num_channels=3, hidden_act="gelu", layer_norm_eps=1e-6,
                    qkv_bias=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, mlp_ratio=4,
                    layerscale_value=1.0, num_register_tokens=0, use_swiglu_ffn=False, apply_layernorm=True)
    FIELDS = VIT_FIELDS
    BODY = BODY
    IGNORED = {MASK_TOKEN: "the mask token of masked pre-training"}
    # The position resize at other image sizes: transformers' bicubic one
    # (antialiased in the registers model).
    POSITION_INTERPOLATION = {"dinov2": "dinov2", "dinov2_with_registers": "dinov2_registers"}
    EXPORTED_OPTIONS = {
        "layer_norm_epsilon": None,
        "mlp_activation": tuple(HIDDEN_ACTS),
        "mlp_kind": ("plain", "swiglu"),
        "qkv_bias": (True, False),
        "layer_scale_init": None,
        "dropout_rate": None,
        "attention_dropout_rate": None,
        # transformers always applies its own resize at other image sizes,
        # whatever keras_vit held.
        "position_interpolation": ("official", "timm", "dinov2", "dinov2_registers"),
    }

    def activation(self, config):
        if config["apply_layernorm"] is not True:
            raise self.unsupported(
                f"no final norm is not a keras_vit option yet. Received: apply_layernorm={config['apply_layernorm']!r}"
            )
        if config["use_swiglu_ffn"]:
            # The gated MLP's gate is SiLU whatever `hidden_act` says.
            return self.ACTIVATIONS.get(config["hidden_act"], "gelu")
        return super().activation(config)

    def mlp_arguments(self, config):
        """The plain MLP's width `hidden_size * mlp_ratio`, or the gated MLP's."""
        hidden, ratio = config["hidden_size"], config["mlp_ratio"]
        if config["use_swiglu_ffn"]:
            return dict(mlp_kind="swiglu", mlp_dim=swiglu_hidden_width(hidden, ratio))
        return dict(mlp_dim=int(hidden * ratio))

    def model_arguments(self, config):
        """keras_vit `ViT` arguments for a DINOv2 `config.json` dict."""
        spec = self.TRANSFORMERS_CLASSES[self.transformers_class(config)]
        config = self.vision_config(config)
        args = dict(
            self.encoder_arguments(config),
            layer_scale_init=float(config["layerscale_value"]),
            num_register_tokens=int(config["num_register_tokens"]),
            position_interpolation=self.POSITION_INTERPOLATION.get(config.get("model_type"), "dinov2"),
        )
        if not spec.classifier:
            # The output is `pooler_output`: the class token after the final norm.
            return dict(args, classifier="token", include_top=False, pooling="token")
        return dict(args, classifier="token_avg", include_top=True, **self.label_arguments(config))

    def export_class(self, config):
        """The DINOv2 class of a DINOv2-shaped model config (LayerScale, class
        token; no head, or a "token_avg" one), else None.

        Example:

        >>> Dinov2Family().export_class({"layer_scale_init": 1.0, "include_top": False})
        'Dinov2Model'
        """
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
        registers = "WithRegisters" if config.get("num_register_tokens", 0) else ""
        return f"Dinov2{registers}{'ForImageClassification' if head[0] else 'Model'}"

    def export_config(self, config, hf_class, class_names=None):
        """The shared fields, with DINOv2's MLP ratio, LayerScale and registers."""
        out = super().export_config(config, hf_class, class_names)
        del out["intermediate_size"]
        mlp_kind = config.get("mlp_kind", "plain")
        out.update(
            mlp_ratio=_ratio(config["mlp_dim"], config["hidden_size"], mlp_kind),
            layerscale_value=config["layer_scale_init"],
            use_swiglu_ffn=mlp_kind == "swiglu",
        )
        if config.get("num_register_tokens", 0):
            out["num_register_tokens"] = config["num_register_tokens"]
        return out

    def export_state(self, params, hf_class, config):
        """The state dict; the mask token (not a weight keras_vit holds,
        unused at inference) is written as zeros, its initial value."""
        state = super().export_state(params, hf_class, config)
        prefix = self.TRANSFORMERS_CLASSES[hf_class].prefix
        state[prefix + MASK_TOKEN] = np.zeros((1, params[C.CLS].shape[-1]), "float32")
        return state


def _ratio(mlp_dim, hidden_size, mlp_kind):
    """transformers' integer `mlp_ratio` (validated by transformers 5) that
    gives `mlp_dim`.

    Example:

    >>> _ratio(64, 16, "plain"), _ratio(48, 16, "swiglu")
    (4, 4)
    """
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
