"""transformers two-tower image-text directories (CLIP, MetaCLIP 2, SigLIP,
SigLIP 2) -> the text tower, its tokenizer settings and the logit scale and
bias; the image tower is read by the family's vision module
(`transformers_clip`, `transformers_siglip`, `transformers_siglip2`).

Facts about the files (`save_pretrained` of `CLIPModel`, `MetaClip2Model`,
`SiglipModel`, `Siglip2Model`; `model_type` "clip", "metaclip_2",
"siglip", "siglip2"):

- `config.json`: `text_config` (`vocab_size`, `hidden_size`,
  `intermediate_size`, `num_hidden_layers`, `num_attention_heads`,
  `max_position_embeddings`, `hidden_act`, `layer_norm_eps`,
  `eos_token_id`; SigLIP's `projection_size`), `vision_config`, and for
  CLIP and MetaCLIP 2 `projection_dim`; fields left out take the config
  classes' defaults (`TEXT_DEFAULTS`).
- text tensors, all four families alike, under `text_model.`:
  `embeddings.token_embedding.weight` `(vocab, D)`,
  `embeddings.position_embedding.weight` `(max_length, D)`, the vision
  towers' block names (`encoder.layers.{i}.layer_norm1`, `self_attn.*`,
  `mlp.fc1`/`fc2`), `final_layer_norm`; CLIP's projection
  `text_projection.weight` (no bias) at the root, SigLIP's `head` (with
  bias) under `text_model.`; `logit_scale` (the log of the scale), and
  SigLIP's `logit_bias`.
- the text model: CLIP and MetaCLIP 2 mask attention causally and pool the
  first `eos_token_id` (CLIP configs with the earlier `eos_token_id=2`: the
  largest id, OpenAI's rule; MetaCLIP 2 keeps the first rule whatever the
  id); SigLIP and SigLIP 2 attend both ways and pool the last token. Each
  masks padding with the tokenizer's attention mask.
- `logits_per_image = exp(logit_scale) * cos(image, text) (+ logit_bias)`;
  transformers' zero-shot pipeline takes their softmax over the texts (CLIP,
  MetaCLIP 2) or their sigmoid (SigLIP, SigLIP 2), and tokenizes with
  `padding=True` (CLIP) or `padding="max_length", max_length=64` (SigLIP).
"""

import dataclasses
import math

from keras_vit.weights import canonical as C
from keras_vit.weights.formats.transformers_clip import BLOCKS
from keras_vit.weights.formats.transformers_common import ACTIVATIONS
from keras_vit.weights.rules import RuleTable

_CLIP_TEXT = dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                  num_attention_heads=8, max_position_embeddings=77, hidden_act="quick_gelu",
                  layer_norm_eps=1e-5, eos_token_id=49407, attention_dropout=0.0)
_SIGLIP_TEXT = dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                    num_attention_heads=12, max_position_embeddings=64, hidden_act="gelu_pytorch_tanh",
                    layer_norm_eps=1e-6, eos_token_id=49407, attention_dropout=0.0, projection_size=None)


@dataclasses.dataclass(frozen=True)
class ImageTextFamily:
    """What a two-tower family is, as transformers defines it.

    Attributes:
        model_type: the two-tower `model_type`.
        architecture: its transformers class.
        vision_model_type: the `model_type` of its vision tower's module.
        causal: the text tower's causal mask.
        pooling: "eos" or "last" (see `keras_vit.text.layers.TEXT_POOLINGS`).
        legacy_eos: whether `eos_token_id == 2` means OpenAI's "argmax" rule.
        projection: "text_projection" (root, no bias) or "head" (under
            `text_model.`, with bias).
        padding: the zero-shot pipeline's text padding, "longest" or
            "max_length".
        max_length: None (the tower's context) or the pipeline's length.
        activation: the pipeline's scores, "softmax" or "sigmoid".
        lowercase: texts lowercased before the tokenizer (transformers'
            SigLIP 2 tokenizer).
        text_defaults: the text config class's defaults.
    """

    model_type: str
    architecture: str
    vision_model_type: str
    causal: bool
    pooling: str
    legacy_eos: bool
    projection: str
    padding: str
    max_length: object
    activation: str
    lowercase: bool
    text_defaults: dict


_CLIP = dict(causal=True, pooling="eos", projection="text_projection", padding="longest",
             max_length=None, activation="softmax", lowercase=False, text_defaults=_CLIP_TEXT)
_SIGLIP = dict(causal=False, pooling="last", legacy_eos=False, projection="head", padding="max_length",
               max_length=64, activation="sigmoid", text_defaults=_SIGLIP_TEXT)
FAMILIES = {
    "clip": ImageTextFamily("clip", "CLIPModel", "clip", legacy_eos=True, **_CLIP),
    "metaclip_2": ImageTextFamily("metaclip_2", "MetaClip2Model", "clip", legacy_eos=False, **_CLIP),
    "siglip": ImageTextFamily("siglip", "SiglipModel", "siglip", lowercase=False, **_SIGLIP),
    "siglip2": ImageTextFamily("siglip2", "Siglip2Model", "siglip2", lowercase=True, **_SIGLIP),
}
_T = "text_model."
TEXT_BODY = (
    ("embeddings.token_embedding.weight", "embedding/token_embedding"),
    ("embeddings.position_embedding.weight", "embedding/position_embedding"),
    *BLOCKS,
    ("final_layer_norm.weight", C.ENCODER_NORM + "scale"),
    ("final_layer_norm.bias", C.ENCODER_NORM + "bias"),
)
PROJECTIONS = {
    "text_projection": (("text_projection.weight", "projection/kernel", "linear"),),
    "head": ((_T + "head.weight", "projection/kernel", "linear"), (_T + "head.bias", "projection/bias")),
}
LOGIT_SCALE, LOGIT_BIAS = "logit_scale", "logit_bias"
IGNORED = {
    "vision_model.": "the image tower (read by the family's vision module)",
    "visual_projection.": "the image tower's projection (read with the image tower)",
    "position_ids": "the position indices buffer, not a weight",
    LOGIT_SCALE: "the logit scale (read beside the towers)",
    LOGIT_BIAS: "the logit bias (read beside the towers)",
}


def _unsupported(message):
    return ValueError(f"Cannot build this transformers image-text model: {message}")


def family(config):
    """The `ImageTextFamily` of a two-tower `config.json` dict.

    Raises:
        ValueError: for another model type (a vision tower alone included)
            or architecture.

    Example:

    >>> family({"model_type": "siglip2"}).activation
    'sigmoid'
    """
    model_type = config.get("model_type")
    if model_type not in FAMILIES:
        raise _unsupported(
            f"`model_type` must be one of {tuple(FAMILIES)} (a two-tower directory: image and "
            f"text). Received: model_type={model_type!r}"
        )
    row = FAMILIES[model_type]
    architecture = (config.get("architectures") or [row.architecture])[0]
    if architecture != row.architecture:
        raise _unsupported(
            f"architecture must be {row.architecture!r} for model_type={model_type!r}. "
            f"Received: {architecture!r}"
        )
    return row


def text_config(config):
    """The text tower's config: `text_config` over the family's defaults."""
    return {**family(config).text_defaults, **(config.get("text_config") or {})}


def _pooling(row, text):
    if row.pooling == "eos" and row.legacy_eos and text["eos_token_id"] == 2:
        return "argmax"
    return row.pooling


def text_arguments(config):
    """`keras_vit.text.TextEncoder` arguments for a two-tower `config.json` dict.

    Example:

    >>> args = text_arguments({"model_type": "clip", "projection_dim": 256,
    ...                        "text_config": {"hidden_size": 64, "eos_token_id": 2}})
    >>> args["pooling"], args["causal"], args["projection_dim"], args["mlp_activation"]
    ('argmax', True, 256, 'quick_gelu')
    """
    row = family(config)
    text = text_config(config)
    act = text["hidden_act"]
    if act not in ACTIVATIONS:
        raise _unsupported(f"`hidden_act` must be one of {sorted(ACTIVATIONS)}. Received: hidden_act={act!r}")
    eos = text["eos_token_id"]
    if isinstance(eos, (list, tuple)):
        raise _unsupported(f"the text tower pools one `eos_token_id`. Received: eos_token_id={eos!r}")
    if row.projection == "text_projection":
        projection = dict(projection_dim=int(config.get("projection_dim", 512)), projection_bias=False)
    else:
        projection = dict(projection_dim=int(text.get("projection_size") or text["hidden_size"]),
                          projection_bias=True)
    return dict(
        vocabulary_size=text["vocab_size"],
        max_length=text["max_position_embeddings"],
        hidden_size=text["hidden_size"],
        num_layers=text["num_hidden_layers"],
        num_heads=text["num_attention_heads"],
        mlp_dim=text["intermediate_size"],
        causal=row.causal,
        pooling=_pooling(row, text),
        eos_token_id=eos,
        layer_norm_epsilon=float(text["layer_norm_eps"]),
        mlp_activation=ACTIVATIONS[act],
        attention_dropout_rate=float(text.get("attention_dropout", 0.0)),
        **projection,
    )


def text_table(config):
    """The `RuleTable` of the text tower of a two-tower directory."""
    return RuleTable(TEXT_BODY).prefixed(_T) + RuleTable(PROJECTIONS[family(config).projection])


def read_text(state, config, path):
    """The text tower of a two-tower state dict as a `Checkpoint`.

    Args:
        state: `{key: NumPy array}` as `save_pretrained` wrote it.
        config: the `config.json` dict.
        path: the file it came from, for messages.
    """
    kept, ignored = {}, {}
    for key, value in state.items():
        reason = next((r for p, r in IGNORED.items() if key.startswith(p) or key.endswith(p)), None)
        if reason:
            ignored[key] = reason
        else:
            kept[key] = value
    heads = text_config(config)["num_attention_heads"]
    params, unknown = text_table(config).to_canonical(kept, heads)
    params.update({k: kept[k] for k in unknown})  # reported as unexpected
    return C.Checkpoint(path, "transformers", params, ignored)


def logits(state, config, path):
    """`(scale, bias)` of `logits_per_image`: `exp(logit_scale)` and the
    logit bias (0 for CLIP and MetaCLIP 2), as Python floats.

    Raises:
        ValueError: naming the file when a tensor the family has is absent.
    """
    row = family(config)
    names = (LOGIT_SCALE,) + ((LOGIT_BIAS,) if row.activation == "sigmoid" else ())
    missing = [n for n in names if n not in state]
    if missing:
        raise ValueError(f"Cannot load {path!r}: a {row.architecture} has {missing}, the file has not.")
    scale = math.exp(float(state[LOGIT_SCALE].reshape(-1)[0]))
    bias = float(state[LOGIT_BIAS].reshape(-1)[0]) if LOGIT_BIAS in names else 0.0
    return scale, bias


def pipeline_padding(config):
    """`(padding, max_length)` of the texts, as transformers' zero-shot
    pipeline pads them (max_length: the pipeline's, else the tower's context)."""
    row = family(config)
    context = text_config(config)["max_position_embeddings"]
    return row.padding, min(row.max_length or context, context)
