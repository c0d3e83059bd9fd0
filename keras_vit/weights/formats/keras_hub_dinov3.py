"""keras-hub DINOv3 presets (`keras_hub>DINOV3Backbone`) -> the canonical layout.

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

The backbone's output is every token after the final norm; the family's
pooled embedding is the class token of it (transformers' `pooler_output`),
keras_vit's token pooling.
"""

from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import keras_dense, keras_norm
from keras_vit.weights.formats.keras_hub_family import KerasHubFamily
from keras_vit.weights.rules import RuleTable

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
PLAIN = RULES + keras_dense(_L + "mlp/up_proj", C.MLP_IN) + keras_dense(_L + "mlp/down_proj", C.MLP_OUT)
# The gated MLP: `up_proj` is the other half of the pair.
GATED = (
    RULES
    + keras_dense(_L + "mlp/gate_proj", C.MLP_GATE_UP.replace("{part}", "gate"))
    + keras_dense(_L + "mlp/up_proj", C.MLP_GATE_UP.replace("{part}", "up"))
    + keras_dense(_L + "mlp/down_proj", C.MLP_DOWN)
)


class Dinov3Family(KerasHubFamily):
    """keras-hub's DINOv3 backbone.

    Example:

    >>> args = Dinov3Family().encoder_arguments({"patch_size": 16, "num_layers": 12, "hidden_dim": 384,
    ...     "num_heads": 6, "intermediate_dim": 1536, "num_register_tokens": 4,
    ...     "use_key_bias": False}, (224, 224, 3))
    >>> args["rope"], args["qkv_bias"], args["position_embedding"], args["pooling"]
    ('dinov3', (True, False, True), 'none', 'token')
    """

    NAME = "DINOv3 preset"
    REGISTERED = ("keras_hub>DINOV3Backbone",)
    TABLE = RuleTable(PLAIN)
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
        return RuleTable(GATED) if gated else self.TABLE
