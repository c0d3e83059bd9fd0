"""transformers two-tower image-text directories (CLIP, MetaCLIP 2, SigLIP,
SigLIP 2) -> the text tower, its tokenizer settings and the logit scale and
bias. The image tower is read by the vision family registered for the
directory's `model_type` (`transformers_source.TRANSFORMERS_FAMILIES`:
`TransformersClip`, `TransformersSiglip`, `TransformersSiglip2` read the
two-tower classes' vision side); each family module holds its text towers'
records (`TRANSFORMERS_TEXT_TOWERS` of `keras_vit.families.clip` and
`siglip`), which become this module's `TextTower`s (`TEXT_TOWERS`), found
through the vision family's `transformers_class`.

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

import math
from typing import NamedTuple

from keras_vit.families import clip, siglip
from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import torch_linear, torch_norm
from keras_vit.families.transformers_source import TRANSFORMERS_FAMILIES
from keras_vit.weights.formats.transformers_family import ACTIVATIONS, split_ignored
from keras_vit.weights.rules import RuleTable

class TextTower(NamedTuple):
    """The text side of a transformers two-tower class, and how its zero-shot
    pipeline feeds and scores texts.

    Attributes:
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
        defaults: the text config class's defaults.
    """

    causal: bool
    pooling: str
    legacy_eos: bool
    projection: str
    padding: str
    max_length: object
    activation: str
    lowercase: bool
    defaults: dict


# By transformers class, as the vision families name them (`TRANSFORMERS_CLASSES`).
TEXT_TOWERS = {
    name: TextTower(**record)
    for family in (clip, siglip)
    for name, record in family.TRANSFORMERS_TEXT_TOWERS.items()
}
_T = "text_model."
TEXT_BODY = (
    ("embeddings.token_embedding.weight", "embedding/token_embedding"),
    ("embeddings.position_embedding.weight", "embedding/position_embedding"),
    *clip.BLOCKS,
    *torch_norm("final_layer_norm", C.ENCODER_NORM),
)
PROJECTIONS = {
    "text_projection": (("text_projection.weight", "projection/kernel", "linear"),),
    "head": torch_linear(_T + "head", "projection/"),
}
LOGIT_SCALE, LOGIT_BIAS = "logit_scale", "logit_bias"
IGNORED = {
    "vision_model.": "the image tower (read by the vision family)",
    "visual_projection.": "the image tower's projection (read with the image tower)",
    "position_ids": "the position indices buffer, not a weight",
    LOGIT_SCALE: "the logit scale (read beside the towers)",
    LOGIT_BIAS: "the logit bias (read beside the towers)",
}


def _unsupported(message):
    return ValueError(f"Cannot build this transformers image-text model: {message}")


def two_tower_class(config):
    """The transformers two-tower class of a `config.json` dict.

    Raises:
        ValueError: for a model type or architecture no vision family reads,
            or a class without a text tower (a vision tower alone).

    Example:

    >>> two_tower_class({"model_type": "siglip2"})
    'Siglip2Model'
    """
    hf_class = TRANSFORMERS_FAMILIES.find(config).transformers_class(config)
    if hf_class not in TEXT_TOWERS:
        raise _unsupported(
            f"the class must be a two-tower one, {tuple(TEXT_TOWERS)} (image and text). "
            f"Received: {hf_class!r} (model_type={config.get('model_type')!r})"
        )
    return hf_class


def text_tower(config):
    """The `TextTower` of a two-tower `config.json` dict (`two_tower_class`).

    Example:

    >>> text_tower({"model_type": "siglip2"}).activation
    'sigmoid'
    """
    return TEXT_TOWERS[two_tower_class(config)]


def text_config(config):
    """The text tower's config: `text_config` over the class's defaults."""
    return {**text_tower(config).defaults, **(config.get("text_config") or {})}


def _pooling(tower, text):
    if tower.pooling == "eos" and tower.legacy_eos and text["eos_token_id"] == 2:
        return "argmax"
    return tower.pooling


def text_arguments(config):
    """`keras_vit.text.TextEncoder` arguments for a two-tower `config.json` dict.

    Example:

    >>> args = text_arguments({"model_type": "clip", "projection_dim": 256,
    ...                        "text_config": {"hidden_size": 64, "eos_token_id": 2}})
    >>> args["pooling"], args["causal"], args["projection_dim"], args["mlp_activation"]
    ('argmax', True, 256, 'quick_gelu')
    """
    tower = text_tower(config)
    text = text_config(config)
    act = text["hidden_act"]
    if act not in ACTIVATIONS:
        raise _unsupported(f"`hidden_act` must be one of {sorted(ACTIVATIONS)}. Received: hidden_act={act!r}")
    eos = text["eos_token_id"]
    if isinstance(eos, (list, tuple)):
        raise _unsupported(f"the text tower pools one `eos_token_id`. Received: eos_token_id={eos!r}")
    if tower.projection == "text_projection":
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
        causal=tower.causal,
        pooling=_pooling(tower, text),
        eos_token_id=eos,
        layer_norm_epsilon=float(text["layer_norm_eps"]),
        mlp_activation=ACTIVATIONS[act],
        attention_dropout_rate=float(text.get("attention_dropout", 0.0)),
        **projection,
    )


def text_table(config):
    """The `RuleTable` of the text tower of a two-tower directory."""
    return RuleTable(TEXT_BODY).prefixed(_T) + RuleTable(PROJECTIONS[text_tower(config).projection])


def read_text(state, config, path):
    """The text tower of a two-tower state dict as a `Checkpoint`.

    Args:
        state: `{key: NumPy array}` as `save_pretrained` wrote it.
        config: the `config.json` dict.
        path: the file it came from, for messages.
    """
    kept, ignored = split_ignored(state, IGNORED)
    heads = text_config(config)["num_attention_heads"]
    params, unknown = text_table(config).to_canonical(kept, heads)
    params.update({k: kept[k] for k in unknown})  # reported as unexpected
    return C.Checkpoint(path, "transformers", params, ignored)


def logits(state, config, path):
    """`(scale, bias)` of `logits_per_image`: `exp(logit_scale)` and the
    logit bias (0 for CLIP and MetaCLIP 2), as Python floats.

    Raises:
        ValueError: naming the file when a tensor the class has is absent.
    """
    hf_class = two_tower_class(config)
    names = (LOGIT_SCALE,) + ((LOGIT_BIAS,) if TEXT_TOWERS[hf_class].activation == "sigmoid" else ())
    missing = [n for n in names if n not in state]
    if missing:
        raise ValueError(f"Cannot load {path!r}: a {hf_class} has {missing}, the file has not.")
    scale = math.exp(float(state[LOGIT_SCALE].reshape(-1)[0]))
    bias = float(state[LOGIT_BIAS].reshape(-1)[0]) if LOGIT_BIAS in names else 0.0
    return scale, bias


def pipeline_padding(config):
    """`(padding, max_length)` of the texts, as transformers' zero-shot
    pipeline pads them (max_length: the pipeline's, else the tower's context)."""
    tower = text_tower(config)
    context = text_config(config)["max_position_embeddings"]
    return tower.padding, min(tower.max_length or context, context)
