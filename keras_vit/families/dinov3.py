"""DINOv3: the family's checkpoints in every layout keras_vit reads (transformers, keras-hub).

transformers DINOv3 ViTs (`DINOv3ViTModel`, `DINOv3ViTBackbone`) <-> the
canonical layout, read and written.

Facts about the files (`save_pretrained`; `model_type` "dinov3_vit"):

- `config.json`: `hidden_size`, `intermediate_size` (the MLP width, plain
  or gated), `num_hidden_layers`, `num_attention_heads`, `hidden_act`,
  `layer_norm_eps` (1e-5), `image_size`, `patch_size` (ints or pairs),
  `num_channels`, `rope_theta` (the rotary base, 100), `query_bias`,
  `key_bias` (False), `value_bias`, `proj_bias` (the attention output's),
  `mlp_bias`, `layerscale_value`, `use_gated_mlp`, `num_register_tokens`,
  and the training-time coordinate augmentations `pos_embed_shift`,
  `pos_embed_jitter`, `pos_embed_rescale`, which transformers applies in
  training mode only (keras_vit computes the inference tables);
- tensors: `embeddings.cls_token`, `embeddings.register_tokens` `(1, R, D)`
  (present, empty, without registers), `embeddings.mask_token` (masked
  pre-training, not an inference weight), `embeddings.patch_embeddings`
  (an OIHW convolution with bias); blocks `layer.{i}.` (`model.layer.{i}.`
  in memory) with `norm1`,
  `attention.{q,k,v,o}_proj` (each bias present or not as the config
  says), `layer_scale1.lambda1`, `norm2`, `mlp.up_proj`/`mlp.down_proj`
  (or, gated, `mlp.gate_proj`, `mlp.up_proj`, `mlp.down_proj`: SwiGLU
  with `hidden_act` "silu"), `layer_scale2.lambda1`; the final `norm`. No
  position table: the positions are the rotary embedding's alone
  (`rope="dinov3"`: patch centres in [-1, 1], periods `rope_theta ** (4 j
  / head_dim)`, half layout), applied to the patch tokens' queries and keys.
- the outputs: `last_hidden_state` is every token after `norm` (class,
  registers, patches), `pooler_output` its class token: keras_vit's
  `include_top=False, pooling="token"`. `DINOv3ViTBackbone` holds the same
  tensors (its feature maps are keras_vit's `forward_intermediates`).

Written back (`save_to_preset(format="transformers")`): a model with
`rope="dinov3"` (its `base` the only setting changed), no absolute position
embedding, a class token and the class-token pooling, as `DINOv3ViTModel`;
without LayerScale, the scales are written as ones; the preprocessing as
`ViTImageProcessor` (or DeiT's, with a centre crop): DINOv3's own processor
needs torchvision, and resizes before normalising as these do.

keras-hub DINOv3 presets (`keras_hub>DINOV3Backbone`) -> the canonical layout.

Facts about the files (`save_to_preset` of `keras_hub.models.DINOV3Backbone`):

- `config.json`: `patch_size`, `num_layers`, `hidden_dim`, `num_heads`,
  `intermediate_dim` (the MLP width, plain or gated),
  `layer_scale_init_value`, `num_register_tokens`, `use_mask_token`,
  `hidden_activation` (the plain MLP's, or the gated MLP's gate),
  `use_gated_mlp`, `use_query_bias`, `use_key_bias`, `use_value_bias`,
  `use_proj_bias`, `use_mlp_bias`, `attention_dropout`, `drop_path_rate`,
  `layer_norm_eps`, `image_shape`, `rope_theta`, `apply_layernorm` (the
  final norm on the feature-pyramid outputs only);
- variables (under `<name>_` once keras-hub has loaded the preset):
  `embeddings/` `cls_token`, `register_tokens` (after the class token),
  `mask_token` (masked pre-training only), `patch_embeddings/projection`
  (HWIO); blocks `encoder/layers_{i}/` with `norm1`, `attention/q_proj`,
  `k_proj`, `v_proj`, `o_proj` (Dense layers over `heads * head_dim`, each
  bias present or not as the config says), `layer_scale1/lambda1`,
  `norm2`, `mlp/up_proj`, `mlp/down_proj` (gated: also `mlp/gate_proj`),
  `layer_scale2/lambda1`; the final `layernorm`. No position table: the
  rotary embedding of transformers' DINOv3 (`rope="dinov3"`) on the patch
  tokens' queries and keys.

timm Hub directories (`vit_*_patch16_dinov3*`, timm's `Eva` class) -> the
canonical layout: the `Eva` tensor names and arguments are read by
`keras_vit.families.eva`, with DINOv3's rotary settings from `timm_rotary`
(`rope_type="dinov3"`: patch centres, `rope_temperature` the base, the half
layout with `rope_rotate_half`). The architectures' arguments are rows of
timm's table (`keras_vit.weights.formats.timm_architectures`); timm's pooled
output is the patch tokens' mean after the final norm (`pooling="avg"`).

The backbone's output is every token after the final norm; the family's
pooled embedding is the class token of it (transformers' `pooler_output`),
keras_vit's token pooling.
"""

import numpy as np

from keras_vit.layers.config import qkv_biases
from keras_vit.layers.rotary import RotarySpec
from keras_vit.validation import pair
from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import keras_dense, keras_norm
from keras_vit.weights.formats.conventions import torch_attention, torch_linear, torch_norm
from keras_vit.weights.formats.keras_hub_family import KerasHubFamily
from keras_vit.weights.formats.transformers_family import (
    HIDDEN_ACTS,
    TransformersClass,
    TransformersFamily,
    check_structure,
    refuse,
)
from keras_vit.weights.rules import RuleTable

# --- transformers ------------------------------------------------------------

def _rules(gated):
    """The body's rules, blocks named as `save_pretrained` writes them
    (`layer.{i}.`, first: writing uses it) and as transformers names them
    in memory (`model.layer.{i}.`); the gated MLP's `up_proj` is the other
    half of its pair."""
    if gated:
        mlp = (
            torch_linear("mlp.gate_proj", C.MLP_GATE_UP.replace("{part}", "gate"))
            + torch_linear("mlp.up_proj", C.MLP_GATE_UP.replace("{part}", "up"))
            + torch_linear("mlp.down_proj", C.MLP_DOWN)
        )
    else:
        mlp = torch_linear("mlp.up_proj", C.MLP_IN) + torch_linear("mlp.down_proj", C.MLP_OUT)
    block = (
        *torch_norm("norm1", C.NORM_1),
        *torch_attention(*(f"attention.{p}_proj" for p in "qkvo")),
        ("layer_scale1.lambda1", C.ATTENTION_SCALE),
        *torch_norm("norm2", C.NORM_2),
        *mlp,
        ("layer_scale2.lambda1", C.MLP_SCALE),
    )
    return (
        ("embeddings.cls_token", C.CLS),
        ("embeddings.register_tokens", C.REG),
        *torch_linear("embeddings.patch_embeddings", C.EMBEDDING, "conv"),
        *((prefix + rule[0],) + tuple(rule[1:]) for prefix in ("layer.{i}.", "model.layer.{i}.") for rule in block),
        *torch_norm("norm", C.ENCODER_NORM),
    )


PLAIN, GATED = _rules(False), _rules(True)
MASK_TOKEN = "embeddings.mask_token"
# DINOv3ViTConfig's defaults.
DEFAULTS = dict(
    patch_size=16, hidden_size=384, intermediate_size=1536, num_hidden_layers=12, num_attention_heads=6,
    hidden_act="gelu", attention_dropout=0.0, layer_norm_eps=1e-5, rope_theta=100.0, image_size=224,
    num_channels=3, query_bias=True, key_bias=False, value_bias=True, proj_bias=True, mlp_bias=True,
    layerscale_value=1.0, use_gated_mlp=False, num_register_tokens=0,
)
FIELDS = {
    "layer_norm_eps": ("layer_norm_epsilon", float),
    "attention_dropout": ("attention_dropout_rate", float),
    "proj_bias": ("attention_out_bias", bool),
    "mlp_bias": ("mlp_bias", bool),
}


class TransformersDinov3(TransformersFamily):
    """transformers' DINOv3 ViTs.

    Example:

    >>> args = TransformersDinov3().model_arguments({"model_type": "dinov3_vit", "hidden_size": 384,
    ...     "num_attention_heads": 6, "num_register_tokens": 4, "layerscale_value": 1e-5})
    >>> args["rope"], args["qkv_bias"], args["position_embedding"], args["pooling"]
    ('dinov3', (True, False, True), 'none', 'token')
    """

    NAME = "DINOv3 model"
    MODEL_TYPES = ("dinov3_vit",)
    TRANSFORMERS_CLASSES = {
        "DINOv3ViTModel": TransformersClass("dinov3_vit"),
        "DINOv3ViTBackbone": TransformersClass("dinov3_vit"),
    }
    DEFAULTS = DEFAULTS
    FIELDS = FIELDS
    BODY = PLAIN
    IGNORED = {MASK_TOKEN: "the mask token of masked pre-training"}
    STRUCTURE = {
        "resnet_layers": (None, "has no ResNet stem (a hybrid's resnet_layers)"),
        "distillation_token": (False, "has no distillation token"),
        "representation_size": (None, "has no pre-logits layer"),
        "class_token": (True, "has a class token"),
        "include_top": (False, "has no classifier: build it with include_top=False, pooling='token'"),
        "pooling": ("token", "pools its class token (pooler_output)"),
        "pooled_norm": (False, "normalises every token (norm), not the pooled features"),
    }
    EXPORTED_OPTIONS = {
        "layer_norm_epsilon": None,
        "mlp_activation": tuple(HIDDEN_ACTS),
        "qkv_bias": None,
        "attention_out_bias": None,
        "mlp_bias": None,
        "mlp_kind": ("plain", "swiglu"),
        "layer_scale_init": None,
        "attention_dropout_rate": None,
        "position_embedding": ("none",),
        "rope": ("dinov3",),
        "rope_settings": None,
        # Without a position table the resize is never used.
        "position_interpolation": None,
    }

    def activation(self, config):
        if config["use_gated_mlp"]:
            if config["hidden_act"] != "silu":
                raise self.unsupported(
                    "the gated MLP is SwiGLU (SiLU gate) in keras_vit. "
                    f"Received: use_gated_mlp=True, hidden_act={config['hidden_act']!r}"
                )
            return "gelu"  # not used by the gated MLP
        return super().activation(config)

    def mlp_arguments(self, config):
        kind = "swiglu" if config["use_gated_mlp"] else "plain"
        return dict(mlp_dim=config["intermediate_size"], mlp_kind=kind)

    def body(self, config):
        """The gated MLP's names, or the plain one's."""
        return GATED if self.vision_config(config)["use_gated_mlp"] else PLAIN

    def model_arguments(self, config):
        """keras_vit `ViT` arguments for a DINOv3 `config.json` dict."""
        self.transformers_class(config)
        config = self.vision_config(config)
        rope_settings = None if float(config["rope_theta"]) == 100.0 else {"base": float(config["rope_theta"])}
        return dict(
            self.encoder_arguments(config),
            qkv_bias=tuple(bool(config[f"{p}_bias"]) for p in ("query", "key", "value")),
            layer_scale_init=float(config["layerscale_value"]),
            num_register_tokens=int(config["num_register_tokens"]),
            position_embedding="none",
            rope="dinov3",
            rope_settings=rope_settings,
            classifier="token",
            include_top=False,
            pooling="token",
        )

    def complete(self, params, ignored, config):
        """An empty register table (`num_register_tokens=0`) is no weight."""
        registers = params.get(C.REG)
        if registers is not None and registers.shape[1] == 0:
            ignored["embeddings.register_tokens"] = "an empty table: the model has no register tokens"
            del params[C.REG]

    # Writing.

    def export_class(self, config):
        """"DINOv3ViTModel" for a model config with DINOv3's rotary embedding,
        else None.

        Raises:
            ValueError: for such a model DINOv3 cannot hold (another head,
                another rotary setting than the base, ...).

        Example:

        >>> TransformersDinov3().export_class({"rope": "dinov3", "position_embedding": "none",
        ...     "include_top": False, "pooling": "token"})
        'DINOv3ViTModel'
        """
        if config.get("rope") != "dinov3":
            return None
        hf_class = "DINOv3ViTModel"
        check_structure(config, hf_class, self.STRUCTURE)
        other = sorted(set(config.get("rope_settings") or {}) - {"base"})
        if other:
            raise refuse(f"{hf_class} sets the rotary base (rope_theta) alone. Received: rope_settings="
                         f"{config['rope_settings']!r}")
        return hf_class

    def export_sizes(self, config, hf_class):
        """`image_size` and `patch_size`: ints when square, else pairs."""
        sizes = [pair(config[k], k) for k in ("image_size", "patch_size")]
        return tuple(s[0] if s[0] == s[1] else list(s) for s in sizes)

    def export_config(self, config, hf_class, class_names=None):
        """The shared fields, with DINOv3's rotary base, biases, LayerScale,
        gating and registers."""
        out = super().export_config(config, hf_class, class_names)
        query, key, value = qkv_biases(config.get("qkv_bias", True))
        gated = config.get("mlp_kind", "plain") == "swiglu"
        scale = config.get("layer_scale_init")
        out.update(
            rope_theta=(config.get("rope_settings") or {}).get("base", 100.0),
            query_bias=query, key_bias=key, value_bias=value,
            layerscale_value=1.0 if scale is None else scale,
            use_gated_mlp=gated,
            num_register_tokens=config.get("num_register_tokens", 0),
        )
        if gated:
            out["hidden_act"] = "silu"
        return out

    def export_state(self, params, hf_class, config):
        """The state dict; the mask token is written as zeros (its initial
        value, unused at inference), LayerScale as ones when the model has
        none, and an empty register table when it has no registers."""
        params = dict(params)
        width = params[C.CLS].shape[-1]
        for i in range(config["num_layers"]):
            for key in (C.ATTENTION_SCALE, C.MLP_SCALE):
                params.setdefault(C.block(key, i), np.ones((width,), "float32"))
        params.setdefault(C.REG, np.zeros((1, 0, width), "float32"))
        gated = config.get("mlp_kind", "plain") == "swiglu"
        state = self.rule_table(hf_class, body=GATED if gated else PLAIN).from_canonical(params)
        state[MASK_TOKEN] = np.zeros((1, 1, width), "float32")
        return state


# --- keras-hub ---------------------------------------------------------------

_E = "embeddings/"
_L = "encoder/layers_{i}/"
_A = _L + "attention/"


def _attention():
    rules = ()
    for name, layer in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
        rules += ((_A + layer + "/kernel", C.ATTENTION + name + "/kernel", "dense_heads_in"),
                  (_A + layer + "/bias", C.ATTENTION + name + "/bias", "heads_bias"))
    return rules + ((_A + "o_proj/kernel", C.ATTENTION + "out/kernel", "dense_heads_out"),
                    (_A + "o_proj/bias", C.ATTENTION + "out/bias"))


RULES = (
    (_E + "cls_token", C.CLS),
    (_E + "register_tokens", C.REG),
    *keras_dense(_E + "patch_embeddings/projection", C.EMBEDDING),
    *keras_norm(_L + "norm1", C.NORM_1),
    *_attention(),
    (_L + "layer_scale1/lambda1", C.ATTENTION_SCALE),
    *keras_norm(_L + "norm2", C.NORM_2),
    (_L + "layer_scale2/lambda1", C.MLP_SCALE),
    *keras_norm("layernorm", C.ENCODER_NORM),
)
HUB_PLAIN = RULES + keras_dense(_L + "mlp/up_proj", C.MLP_IN) + keras_dense(_L + "mlp/down_proj", C.MLP_OUT)
# The gated MLP: `up_proj` is the other half of the pair.
HUB_GATED = (
    RULES
    + keras_dense(_L + "mlp/gate_proj", C.MLP_GATE_UP.replace("{part}", "gate"))
    + keras_dense(_L + "mlp/up_proj", C.MLP_GATE_UP.replace("{part}", "up"))
    + keras_dense(_L + "mlp/down_proj", C.MLP_DOWN)
)


class KerasHubDinov3(KerasHubFamily):
    """keras-hub's DINOv3 backbone.

    Example:

    >>> args = KerasHubDinov3().encoder_arguments({"patch_size": 16, "num_layers": 12, "hidden_dim": 384,
    ...     "num_heads": 6, "intermediate_dim": 1536, "num_register_tokens": 4,
    ...     "use_key_bias": False}, (224, 224, 3))
    >>> args["rope"], args["qkv_bias"], args["position_embedding"], args["pooling"]
    ('dinov3', (True, False, True), 'none', 'token')
    """

    NAME = "DINOv3 preset"
    REGISTERED = ("keras_hub>DINOV3Backbone",)
    TABLE = RuleTable(HUB_PLAIN)
    IGNORED = {_E + "mask_token": "the mask token of masked pre-training, not used at inference"}

    def encoder_arguments(self, config, shape):
        gated = bool(config.get("use_gated_mlp", False))
        activation = config.get("hidden_activation", "gelu")
        if activation not in (("silu",) if gated else ("gelu",)):
            raise self.unsupported(
                "keras_vit's DINOv3 MLP is the erf GELU one, or gated by SiLU (SwiGLU). Received: "
                f"hidden_activation={activation!r}, use_gated_mlp={gated}"
            )
        theta = float(config.get("rope_theta", 100.0))
        return dict(
            self.backbone_arguments(config, shape),
            mlp_dim=int(config["intermediate_dim"]),
            mlp_kind="swiglu" if gated else "plain",
            mlp_activation="gelu",
            layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-5)),
            layer_scale_init=float(config.get("layer_scale_init_value", 1.0)),
            num_register_tokens=int(config.get("num_register_tokens", 4)),
            qkv_bias=tuple(bool(config.get(f"use_{p}_bias", True)) for p in ("query", "key", "value")),
            attention_out_bias=bool(config.get("use_proj_bias", True)),
            mlp_bias=bool(config.get("use_mlp_bias", True)),
            attention_dropout_rate=float(config.get("attention_dropout", 0.0)),
            position_embedding="none",
            rope="dinov3",
            rope_settings=None if theta == 100.0 else {"base": theta},
            classifier="token",
            # The class token after the final norm.
            pooling="token",
            classifier_activation=None,
        )

    def table(self, backbone):
        """The gated MLP's names where the preset has one."""
        gated = bool(self.encoder_config(backbone).get("use_gated_mlp", False))
        return RuleTable(HUB_GATED) if gated else self.TABLE


# --- timm ----------------------------------------------------------------------

def timm_rotary(args):
    """`(candidate variants, RotarySpec)` of timm's DINOv3 rotary embedding
    (resolved `Eva` arguments with `rope_type="dinov3"`), for
    `keras_vit.families.eva`.

    Example:

    >>> candidates, spec = timm_rotary({"rope_temperature": 100.0, "rope_rotate_half": True})
    >>> candidates, spec.coordinates, spec.base, spec.layout
    (('dinov3',), 'centered', 100.0, 'half')
    """
    layout = "half" if args["rope_rotate_half"] else "interleaved"
    return ("dinov3",), RotarySpec("centered", args["rope_temperature"], "yx", layout)
