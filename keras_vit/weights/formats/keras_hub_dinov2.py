"""keras-hub DINOv2 presets (`keras_hub>DINOV2Backbone`) -> the canonical layout.

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

from keras_vit.layers.swiglu import swiglu_hidden_width
from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import keras_block, keras_dense, keras_norm
from keras_vit.weights.formats.keras_hub_family import KerasHubFamily
from keras_vit.weights.rules import RuleTable

_E = "embeddings/"
_L = "encoder/layers_{i}/"
RULES = (
    (_E + "cls_token", C.CLS),
    (_E + "register_tokens", C.REG),
    (_E + "interpolated_position_embeddings", C.POSEMB),
    *keras_dense(_E + "patch_embeddings/projection", C.EMBEDDING),
    *keras_block(_L, "norm1", "attention/attention", "norm2", "mlp/fc1", "mlp/fc2"),
    (_L + "layer_scale1/lambda1", C.ATTENTION_SCALE),
    (_L + "layer_scale2/lambda1", C.MLP_SCALE),
    # The SwiGLU MLP (`use_swiglu_ffn`, DINOv2-giant): `weights_in` holds the
    # gate and up projections side by side, `weights_out` is the down one.
    (_L + "mlp/weights_in/kernel", C.MLP_GATE_UP + "kernel", "gate_up"),
    (_L + "mlp/weights_in/bias", C.MLP_GATE_UP + "bias", "gate_up"),
    *keras_dense(_L + "mlp/weights_out", C.MLP_DOWN),
    *keras_norm("layernorm", C.ENCODER_NORM),
)


class Dinov2Family(KerasHubFamily):
    """keras-hub's DINOv2 backbone.

    Example:

    >>> args = Dinov2Family().encoder_arguments({"patch_size": 14, "num_layers": 12, "hidden_dim": 384,
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
