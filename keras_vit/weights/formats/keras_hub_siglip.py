"""keras-hub SigLIP presets (`keras_hub>SigLIPBackbone`, `keras_hub>SigLIPVisionEncoder`)
-> the canonical layout of the vision tower.

Facts about the files (`save_to_preset`):

- `config.json` of a `SigLIPBackbone`: `vision_encoder` and `text_encoder`,
  each a serialised layer (`registered_name` "keras_hub>SigLIPVisionEncoder"
  / "keras_hub>SigLIPTextEncoder") with its own `config`; a
  `SigLIPVisionEncoder` preset holds the vision one alone. Its keys:
  `patch_size`, `hidden_dim`, `num_layers`, `num_heads`,
  `intermediate_dim`, `intermediate_activation` ("gelu_approximate", the
  tanh GELU, or a Keras activation name), `layer_norm_epsilon` (the blocks'
  and the head's; the final norm's is always 1e-6), `image_shape` (fixed:
  keras-hub does not resize the position table).
- vision variables, under `<vision name>_`: `embedding/patch_embedding`
  (HWIO, with bias), `embedding/position_embedding/embeddings` `(N, D)` (no
  class token), the integer `embedding/position_ids`;
  `encoder_block_{i}/` with `layer_norm1`, `self_attn` (a Keras
  `MultiHeadAttention`), `layer_norm2`, `mlp/fc1`, `mlp/fc2`;
  `post_layer_norm` on every token; the attention-pool head `head/`: the
  probe (an unnamed weight: `variable`, or `variable_<n>` when Keras has
  made other unnamed ones in the session), `attention` (a Keras
  `MultiHeadAttention` with separate query/key/value), `layernorm`,
  `mlp/fc1`, `mlp/fc2`.
- in a `SigLIPBackbone`, the text tower under `<text name>_` and the loss's
  `siglip_head/logit_scale`, `siglip_head/logit_bias`: not part of an image
  model, listed as ignored.

The vision encoder's output, the image embedding `SigLIPBackbone` compares
with the text, is the head's output: keras_vit's `pooling="map"`.
"""

import re

from keras_vit.weights import canonical as C
from keras_vit.weights.rules import RuleTable

REGISTERED = ("keras_hub>SigLIPBackbone", "keras_hub>SigLIPVisionEncoder")
VISION = "keras_hub>SigLIPVisionEncoder"
_B = "encoder_block_{i}/"
_H = "head/"
_MAP = C.MAP_HEAD
_POOL_ATTENTION = _MAP + "MultiHeadDotProductAttention_0/"
_MHA = (("query", "query"), ("key", "key"), ("value", "value"), ("attention_output", "out"))
RULES = (
    ("embedding/patch_embedding/kernel", C.EMBEDDING + "kernel"),
    ("embedding/patch_embedding/bias", C.EMBEDDING + "bias"),
    ("embedding/position_embedding/embeddings", C.POSEMB, "batch"),
    (_B + "layer_norm1/gamma", C.NORM_1 + "scale"),
    (_B + "layer_norm1/beta", C.NORM_1 + "bias"),
    *(
        (_B + f"self_attn/{source}/{leaf}", C.ATTENTION + f"{name}/{leaf}")
        for source, name in _MHA
        for leaf in ("kernel", "bias")
    ),
    (_B + "layer_norm2/gamma", C.NORM_2 + "scale"),
    (_B + "layer_norm2/beta", C.NORM_2 + "bias"),
    (_B + "mlp/fc1/kernel", C.MLP_IN + "kernel"),
    (_B + "mlp/fc1/bias", C.MLP_IN + "bias"),
    (_B + "mlp/fc2/kernel", C.MLP_OUT + "kernel"),
    (_B + "mlp/fc2/bias", C.MLP_OUT + "bias"),
    ("post_layer_norm/gamma", C.ENCODER_NORM + "scale"),
    ("post_layer_norm/beta", C.ENCODER_NORM + "bias"),
    (_H + "probe", _MAP + "probe"),
    *(
        (_H + f"attention/{source}/{leaf}", _POOL_ATTENTION + f"{name}/{leaf}")
        for source, name in _MHA
        for leaf in ("kernel", "bias")
    ),
    (_H + "layernorm/gamma", _MAP + "LayerNorm_0/scale"),
    (_H + "layernorm/beta", _MAP + "LayerNorm_0/bias"),
    (_H + "mlp/fc1/kernel", _MAP + "MlpBlock_0/Dense_0/kernel"),
    (_H + "mlp/fc1/bias", _MAP + "MlpBlock_0/Dense_0/bias"),
    (_H + "mlp/fc2/kernel", _MAP + "MlpBlock_0/Dense_1/kernel"),
    (_H + "mlp/fc2/bias", _MAP + "MlpBlock_0/Dense_1/bias"),
)
TABLE = RuleTable(RULES)
IGNORED = {"embedding/position_ids": "the position indices 0..N-1, not a weight"}
# keras-hub's `intermediate_activation` -> keras_vit's `mlp_activation`.
ACTIVATIONS = {"gelu_approximate": "gelu_tanh", "gelu": "gelu"}
# The epsilon of the final norm, whatever `layer_norm_epsilon` says.
POST_NORM_EPSILON = 1e-6


_PROBE = re.compile(r"head/variable(_\d+)?")


def source_name(name):
    """A variable's name in `RULES`: the head's unnamed probe is `head/probe`.

    Example:

    >>> source_name("head/variable_3"), source_name("head/layernorm/gamma")
    ('head/probe', 'head/layernorm/gamma')
    """
    return _H + "probe" if _PROBE.fullmatch(name) else name


def _unsupported(message):
    return ValueError(f"Cannot build this keras-hub SigLIP preset: {message}")


def _vision(backbone):
    if backbone.get("registered_name") == VISION:
        return backbone
    vision = backbone.get("config", {}).get("vision_encoder") or {}
    if vision.get("registered_name") != VISION:
        raise _unsupported(
            f"its vision_encoder must be a {VISION}. Received: "
            f"registered_name={vision.get('registered_name')!r}"
        )
    return vision


def encoder_config(backbone):
    """The vision encoder's `config` dict in a preset's `config.json` dict."""
    return _vision(backbone)["config"]


def model_arguments(config, input_shape):
    """keras_vit `ViT` arguments for the `config` of a SigLIPVisionEncoder.

    Args:
        config: the vision encoder's `config` dict.
        input_shape: `(height, width, channels)` of its `image_shape`.

    Example:

    >>> args = model_arguments({"patch_size": 16, "hidden_dim": 768, "num_layers": 12,
    ...     "num_heads": 12, "intermediate_dim": 3072}, (224, 224, 3))
    >>> args["classifier"], args["pooling"], args["mlp_activation"]
    ('map', 'map', 'gelu_tanh')
    """
    activation = config.get("intermediate_activation", "gelu_approximate")
    if activation not in ACTIVATIONS:
        raise _unsupported(
            f"`intermediate_activation` must be one of {sorted(ACTIVATIONS)}. "
            f"Received: intermediate_activation={activation!r}"
        )
    epsilon = float(config.get("layer_norm_epsilon", 1e-6))
    if epsilon != POST_NORM_EPSILON:
        raise _unsupported(
            "keras_vit gives its final norm the blocks' epsilon, keras-hub's is always "
            f"{POST_NORM_EPSILON}. Received: layer_norm_epsilon={epsilon}"
        )
    return dict(
        input_shape=tuple(input_shape),
        patch_size=int(config["patch_size"]),
        hidden_size=config["hidden_dim"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        mlp_dim=config["intermediate_dim"],
        layer_norm_epsilon=epsilon,
        mlp_activation=ACTIVATIONS[activation],
        # keras-hub keeps the size it was built at; other sizes resize as
        # transformers' SigLIP does.
        position_interpolation="siglip",
        classifier="map",
        include_top=False,
        pooling="map",
        classifier_activation=None,
    )


def variable_prefixes(backbone):
    """`{prefix: None for the vision tower, else why it is ignored}` of the
    variables of a preset (keras-hub names a tower's layers `<name>_...`)."""
    vision = encoder_config(backbone).get("name")
    out = {f"{vision}_" if vision else "": None}
    if backbone.get("registered_name") != VISION:
        text = backbone["config"].get("text_encoder", {}).get("config", {}).get("name")
        out[f"{text}_"] = "the text tower of the SigLIP backbone (an image model has none)"
        out["siglip_head/"] = "the logit scale and bias of the image-text loss"
    return out
