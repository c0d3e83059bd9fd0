"""DINOv2 (with registers): the family's checkpoints in every layout keras_vit reads (transformers, keras-hub).

transformers DINOv2 models (`Dinov2Model`, `Dinov2WithRegistersModel`,
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

keras-hub DINOv2 presets (`keras_hub>DINOV2Backbone`) -> the canonical layout.

Facts about the files (`save_to_preset` of `keras_hub.models.DINOV2Backbone`):

- `config.json`: `patch_size`, `num_layers`, `hidden_dim`, `num_heads`,
  `intermediate_dim` (the MLP width), `layer_scale_init_value`,
  `num_register_tokens`, `use_mask_token`, `use_swiglu_ffn`,
  `image_shape`, `position_embedding_shape` (the grid the position table
  was trained at; keras-hub's converter sets it to `image_shape`),
  `antialias_in_interpolation` (true for the registers checkpoints, as
  transformers resizes them), `apply_layernorm` (the final norm on the
  feature-pyramid outputs only), `dropout_rate`, `drop_path_rate`. Every
  LayerNorm has epsilon 1e-6 and the MLP the exact (erf) GELU.
- variables (under `<name>_` once keras-hub has loaded the preset):
  `embeddings/` `cls_token`, `register_tokens` (after the class token,
  without a position row), `mask_token` (masked pre-training only),
  `position_embeddings` at `position_embedding_shape` and
  `interpolated_position_embeddings`, the table resized at build to
  `image_shape` (bicubic, `keras.ops.image.resize`) that the forward pass
  adds; `patch_embeddings/projection` (HWIO); blocks
  `encoder/layers_{i}/` with `norm1`, `attention/attention/` (a Keras
  `MultiHeadAttention`: the canonical `(D, heads, head_dim)` kernels),
  `layer_scale1/lambda1`, `norm2`, `mlp/fc1`, `mlp/fc2` (with
  `use_swiglu_ffn`: `mlp/weights_in`, the SiLU gate and the up projection
  side by side, and `mlp/weights_out`), `layer_scale2/lambda1`; the final
  `layernorm`.

The backbone's output is every token after the final norm; the family's
pooled embedding is the class token of it (transformers' `pooler_output`),
keras_vit's token pooling.

At another image size keras-hub resizes `position_embeddings` with the
backend's `keras.ops.image.resize(interpolation="bicubic")`, which is
transformers' resize on torch but Keys' `a = -0.5` kernel on jax and
tensorflow; keras_vit resizes as transformers does on every backend
(`position_interpolation` "dinov2", or "dinov2_registers" where keras-hub
antialiases).
"""

import numpy as np

from keras_vit.families.vit import CLASS_AND_PATCHES, FINAL_NORM, POSITIONS
from keras_vit.layers.swiglu import swiglu_hidden_width
from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import keras_block, keras_dense, keras_norm
from keras_vit.weights.formats.conventions import torch_block, torch_linear
from keras_vit.weights.formats.keras_hub_family import KerasHubFamily
from keras_vit.weights.formats.transformers_family import (
    HIDDEN_ACTS,
    VIT_FIELDS,
    TransformersClass,
    TransformersFamily,
)
from keras_vit.weights.rules import RuleTable

# --- transformers ------------------------------------------------------------

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


class TransformersDinov2(TransformersFamily):
    """transformers' DINOv2, with and without registers.

    Example:

    >>> family = TransformersDinov2()
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

        >>> TransformersDinov2().export_class({"layer_scale_init": 1.0, "include_top": False})
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


# --- keras-hub ---------------------------------------------------------------

_E = "embeddings/"
_HUB_L = "encoder/layers_{i}/"
RULES = (
    (_E + "cls_token", C.CLS),
    (_E + "register_tokens", C.REG),
    (_E + "interpolated_position_embeddings", C.POSEMB),
    *keras_dense(_E + "patch_embeddings/projection", C.EMBEDDING),
    *keras_block(_HUB_L, "norm1", "attention/attention", "norm2", "mlp/fc1", "mlp/fc2"),
    (_HUB_L + "layer_scale1/lambda1", C.ATTENTION_SCALE),
    (_HUB_L + "layer_scale2/lambda1", C.MLP_SCALE),
    # The SwiGLU MLP (`use_swiglu_ffn`, DINOv2-giant): `weights_in` holds the
    # gate and up projections side by side, `weights_out` is the down one.
    (_HUB_L + "mlp/weights_in/kernel", C.MLP_GATE_UP + "kernel", "gate_up"),
    (_HUB_L + "mlp/weights_in/bias", C.MLP_GATE_UP + "bias", "gate_up"),
    *keras_dense(_HUB_L + "mlp/weights_out", C.MLP_DOWN),
    *keras_norm("layernorm", C.ENCODER_NORM),
)


class KerasHubDinov2(KerasHubFamily):
    """keras-hub's DINOv2 backbone.

    Example:

    >>> args = KerasHubDinov2().encoder_arguments({"patch_size": 14, "num_layers": 12, "hidden_dim": 384,
    ...     "num_heads": 6, "intermediate_dim": 1536, "num_register_tokens": 4,
    ...     "antialias_in_interpolation": True}, (518, 518, 3))
    >>> args["num_register_tokens"], args["position_interpolation"], args["pooling"]
    (4, 'dinov2_registers', 'token')
    """

    NAME = "DINOv2 preset"
    REGISTERED = ("keras_hub>DINOV2Backbone",)
    TABLE = RuleTable(RULES)
    IGNORED = {
        _E + "mask_token": "the mask token of masked pre-training, not used at inference",
        _E + "position_embeddings": (
            "the table at `position_embedding_shape`; the forward pass adds its resize to "
            "`image_shape`, `interpolated_position_embeddings`"
        ),
    }
    # keras-hub's LayerNorms all have this epsilon, whatever the checkpoint.
    LAYER_NORM_EPSILON = 1e-6

    def encoder_arguments(self, config, shape):
        antialias = bool(config.get("antialias_in_interpolation", False))
        mlp_dim = int(config["intermediate_dim"])
        swiglu = bool(config.get("use_swiglu_ffn", False))
        if swiglu:
            # keras-hub's `DINOV2SwiGLUFFN` keeps two thirds of `intermediate_dim`,
            # rounded up to a multiple of 8: the width of a ratio of 1.
            mlp_dim = swiglu_hidden_width(mlp_dim, 1)
        return dict(
            self.backbone_arguments(config, shape),
            mlp_dim=mlp_dim,
            mlp_kind="swiglu" if swiglu else "plain",
            layer_norm_epsilon=self.LAYER_NORM_EPSILON,
            mlp_activation="gelu",
            layer_scale_init=float(config.get("layer_scale_init_value", 1.0)),
            num_register_tokens=int(config.get("num_register_tokens", 0)),
            position_interpolation="dinov2_registers" if antialias else "dinov2",
            # keras-hub's rate drops the attention probabilities too.
            dropout_rate=float(config.get("dropout_rate", 0.0)),
            attention_dropout_rate=float(config.get("dropout_rate", 0.0)),
            classifier="token",
            # The class token after the final norm.
            pooling="token",
            classifier_activation=None,
        )
