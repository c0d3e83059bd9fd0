"""transformers MAE encoders (`ViTMAEModel`) -> the canonical layout.

Facts about the files (`save_pretrained`; `model_type` "vit_mae"):

- `config.json`: ViT's fields (`hidden_size`, `num_hidden_layers`,
  `num_attention_heads`, `intermediate_size`, `hidden_act`,
  `layer_norm_eps`, `image_size`, `patch_size`, `num_channels`,
  `qkv_bias`) and `mask_ratio` (random masking at every forward pass:
  keras_vit encodes every patch, as transformers does with `mask_ratio=0`
  and patches kept in order);
- tensors: ViT's names at the root; `embeddings.position_embeddings`
  `(1, 1 + N, D)` is MAE's fixed 2D sin-cos table (a zero class row first),
  not learned: keras_vit computes the same table (`position_embedding=
  "sincos"`), so the stored one is ignored. `last_hidden_state` is the
  tokens after the final `layernorm`; the model has no pooled output, so
  the keras_vit model returns those tokens.

Written back (`save_to_preset(format="transformers")`): a model with MAE's
fixed sin-cos position embedding (`position_embedding="sincos"`), a class
token and no pooling, as `ViTMAEModel`, the encoder alone:

- the table is written as transformers holds it (computed here, zero class
  row first), since transformers stores it among the weights;
- `mask_ratio` is written as 0: the written model encodes every patch, as
  keras_vit does (transformers still shuffles the patch order unless
  `noise` is given; ascending noise keeps it);
- no decoder: keras_vit holds none. `ViTMAEModel` has no decoder either, so
  it loads with no missing key; the decoder fields of the config keep
  transformers' defaults, and `ViTMAEForPreTraining` would start its decoder
  (and mask token) from a random initialisation.
"""

import numpy as np
from keras import ops

from keras_vit.layers.sincos import sincos_position_embedding
from keras_vit.weights import canonical as C
from keras_vit.weights.formats.transformers_common import (
    ACTIVATIONS,
    HIDDEN_ACTS,
    has_class_token,
    pair,
    refuse_layout,
    shape_checks,
    square,
    tower_config,
)
from keras_vit.weights.rules import RuleTable

MODEL_TYPES = ("vit_mae",)
ARCHITECTURES = ("ViTMAEModel",)
_L = "encoder.layer.{i}."
BODY = (
    ("embeddings.cls_token", C.CLS),
    ("embeddings.patch_embeddings.projection.weight", C.EMBEDDING + "kernel", "conv"),
    ("embeddings.patch_embeddings.projection.bias", C.EMBEDDING + "bias"),
    (_L + "layernorm_before.weight", C.NORM_1 + "scale"),
    (_L + "layernorm_before.bias", C.NORM_1 + "bias"),
    *(
        (_L + f"attention.attention.{name}.{leaf}", C.ATTENTION + f"{name}/{kind}", transform)
        for name in ("query", "key", "value")
        for leaf, kind, transform in (("weight", "kernel", "heads_in"), ("bias", "bias", "heads_bias"))
    ),
    (_L + "attention.output.dense.weight", C.ATTENTION + "out/kernel", "heads_out"),
    (_L + "attention.output.dense.bias", C.ATTENTION + "out/bias"),
    (_L + "layernorm_after.weight", C.NORM_2 + "scale"),
    (_L + "layernorm_after.bias", C.NORM_2 + "bias"),
    (_L + "intermediate.dense.weight", C.MLP_IN + "kernel", "linear"),
    (_L + "intermediate.dense.bias", C.MLP_IN + "bias"),
    (_L + "output.dense.weight", C.MLP_OUT + "kernel", "linear"),
    (_L + "output.dense.bias", C.MLP_OUT + "bias"),
    ("layernorm.weight", C.ENCODER_NORM + "scale"),
    ("layernorm.bias", C.ENCODER_NORM + "bias"),
)
IGNORED = {"embeddings.position_embeddings": "MAE's fixed sin-cos table, which keras_vit computes"}


def _unsupported(message):
    return ValueError(f"Cannot build this transformers ViTMAE model: {message}")


def model_arguments(config):
    """keras_vit `ViT` arguments for a ViTMAE `config.json` dict.

    Example:

    >>> args = model_arguments({"model_type": "vit_mae", "hidden_size": 768,
    ...     "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072})
    >>> args["position_embedding"], args["pooling"], args["mlp_activation"]
    ('sincos', None, 'gelu')
    """
    architecture = (config.get("architectures") or ["ViTMAEModel"])[0]
    if architecture not in ARCHITECTURES:
        raise _unsupported(f"architecture must be one of {ARCHITECTURES}. Received: {architecture!r}")
    act = config.get("hidden_act", "gelu")
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
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
        mlp_activation=ACTIVATIONS[act],
        qkv_bias=bool(config.get("qkv_bias", True)),
        dropout_rate=float(config.get("hidden_dropout_prob", 0.0)),
        attention_dropout_rate=float(config.get("attention_probs_dropout_prob", 0.0)),
        position_embedding="sincos",
        classifier="token",
        # No pooled output: the model returns last_hidden_state.
        include_top=False,
        pooling=None,
        classifier_activation=None,
    )
    if config.get("num_channels", 3) != 3:
        args["input_shape"] = size + (config["num_channels"],)
    return args


def table(state):
    """The `RuleTable` of a `ViTMAEModel` state dict."""
    return RuleTable(BODY)


POSITION_KEY = "embeddings.position_embeddings"
# The block and encoder options a ViTMAE config holds (None: any value); the
# others must keep their defaults.
EXPORTED_OPTIONS = {
    "layer_norm_epsilon": None,
    "mlp_activation": tuple(HIDDEN_ACTS),
    "qkv_bias": None,
    "position_embedding": ("sincos",),
    "class_token": (None, True),
    # A fixed table is computed for each grid: no interpolation applies.
    "position_interpolation": None,
}


def export_architecture(config):
    """"ViTMAEModel" for a model config with a fixed sin-cos position
    embedding, else None.

    Raises:
        ValueError: for a sin-cos model ViTMAEModel cannot hold (a head, a
            pooled output, no class token, a norm after pooling).

    Example:

    >>> export_architecture({"position_embedding": "sincos", "include_top": False})
    'ViTMAEModel'
    """
    embedding = config.get("position_embedding")
    if not (isinstance(embedding, str) and embedding.startswith("sincos")):
        return None
    architecture = ARCHITECTURES[0]
    pooling = config.get("pooling")
    refuse_layout(architecture, shape_checks(config) + (
        (config.get("include_top", True),
         f"has no classifier head: build it with include_top=False, pooling=None. "
         f"Received: include_top=True, classes={config.get('classes')!r}"),
        (pooling is not None,
         f"returns the tokens (last_hidden_state) and has no pooled output: it needs pooling=None. "
         f"Received: pooling={pooling!r}"),
        (not has_class_token(config),
         f"has a class token. Received: classifier={config.get('classifier')!r}, "
         f"class_token={config.get('class_token')!r}"),
        (config.get("pooled_norm", False), "normalises every token (layernorm). Received: pooled_norm=True"),
    ))
    return architecture


def export_config(config, architecture, class_names=None):
    """A transformers `config.json` dict for an MAE-shaped keras_vit model config."""
    return {
        **tower_config(config, architecture, "vit_mae"),
        "qkv_bias": config.get("qkv_bias", True),
        "hidden_dropout_prob": config.get("dropout_rate", 0.0),
        "attention_probs_dropout_prob": config.get("attention_dropout_rate", 0.0),
        # Every patch encoded, as keras_vit does.
        "mask_ratio": 0.0,
    }


def export_state(params, architecture=None):
    """The state dict of canonical `params` (the fixed table is `export_fixed`'s)."""
    return RuleTable(BODY).from_canonical(params)


def export_fixed(config):
    """`{key: array}` of what transformers stores and keras_vit computes: MAE's
    sin-cos table `(1, 1 + N, D)` for the model's patch grid, zero class row first."""
    size, patch = square(config, ARCHITECTURES[0])
    table = sincos_position_embedding((size // patch, size // patch), config["hidden_size"], style="mae")
    return {POSITION_KEY: np.asarray(ops.convert_to_numpy(table), "float32")}
