"""OWL-ViT and OWLv2 (transformers' `OwlViTForObjectDetection`,
`Owlv2ForObjectDetection`) -> keras_vit's open-vocabulary detector.

Facts about the files (`save_pretrained`; `model_type` "owlvit", "owlv2"):

- `config.json`: `vision_config` and `text_config` (the CLIP towers' fields:
  `hidden_size`, `intermediate_size`, `num_hidden_layers`,
  `num_attention_heads`, `hidden_act` "quick_gelu", `layer_norm_eps`,
  `image_size` 768 / 960, `patch_size`; the text tower's `vocab_size` and
  `max_position_embeddings`, 16), `projection_dim`; fields left out take the
  config classes' defaults (`VISION_DEFAULTS`, `TEXT_DEFAULTS`).
- tensors under `owlvit.` (`owlv2.`): the CLIP vision tower
  (`vision_model.`: a patch convolution without bias, class token, position
  table, `pre_layernorm`, CLIP blocks, `post_layernorm`), the CLIP text
  tower (`text_model.`) with `text_projection`, and `visual_projection` and
  `logit_scale`, which detection does not use; at the root the heads:
  `layer_norm`, `class_head.{dense0, logit_shift, logit_scale}`,
  `box_head.dense{0,1,2}`, and OWLv2's `objectness_head.dense{0,1,2}`.
- the detector: every token of the vision tower through `post_layernorm`
  (keras_vit's `encoder_norm`), each patch token times the class token,
  `layer_norm`, then the heads (`keras_vit.layers.detection_heads`). Text
  queries are the text tower's projected end token (the largest id, OpenAI's
  rule) scaled to unit length.
- `preprocessor_config.json`: OWL-ViT resizes to 768 x 768 (bicubic);
  OWLv2 pads to a square (bottom and right, black) and resizes to 960 x 960
  with a Gaussian blur against aliasing (`do_pad`); both take CLIP's
  statistics. The tokenizer (CLIP's) pads queries to
  `max_position_embeddings`.
"""

from typing import NamedTuple

from keras_vit.families.clip import BLOCKS
from keras_vit.families.transformers_image_text import TEXT_BODY
from keras_vit.weights import canonical as C
from keras_vit.weights.formats import transformers_processor
from keras_vit.weights.formats.conventions import torch_linear, torch_norm
from keras_vit.weights.formats.transformers_family import ACTIVATIONS, split_ignored
from keras_vit.weights.rules import RuleTable

# The config classes' defaults (OwlViTVisionConfig, OwlViTTextConfig; OWLv2's
# differ in `image_size` alone).
VISION_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                       num_channels=3, image_size=768, patch_size=32, hidden_act="quick_gelu", layer_norm_eps=1e-5,
                       attention_dropout=0.0)
TEXT_DEFAULTS = dict(vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12,
                     num_attention_heads=8, max_position_embeddings=16, hidden_act="quick_gelu",
                     layer_norm_eps=1e-5, attention_dropout=0.0)


class OwlClass(NamedTuple):
    """A transformers detection class as keras_vit reads it.

    Attributes:
        model_type: its config's `model_type`.
        prefix: where its two towers sit in its state dict.
        objectness: whether it has OWLv2's objectness head.
        image_size: its vision config's default `image_size`.
        pad_to_square: whether its image processor pads images to a square.
    """

    model_type: str
    prefix: str
    objectness: bool
    image_size: int
    pad_to_square: bool


CLASSES = {
    "OwlViTForObjectDetection": OwlClass("owlvit", "owlvit.", False, 768, False),
    "Owlv2ForObjectDetection": OwlClass("owlv2", "owlv2.", True, 960, True),
}
MODEL_TYPES = tuple(spec.model_type for spec in CLASSES.values())
# The vision tower, under `<prefix>vision_model.`: CLIP's, its
# `post_layernorm` applied to every token (the encoder's final norm).
VISION_BODY = (
    ("embeddings.class_embedding", C.CLS, "token"),
    ("embeddings.position_embedding.weight", C.POSEMB, "batch"),
    ("embeddings.patch_embedding.weight", C.EMBEDDING + "kernel", "conv"),
    *torch_norm("pre_layernorm", C.PRE_NORM),
    *BLOCKS,
    *torch_norm("post_layernorm", C.ENCODER_NORM),
)
# The heads, at the root, by the variable paths of
# `keras_vit.layers.detection_heads.DetectionHeads` (layer "heads").
HEADS = "heads/"
HEAD_RULES = (
    *torch_norm("layer_norm", HEADS + "layer_norm/"),
    *torch_linear("class_head.dense0", HEADS + "class_embedding/"),
    *torch_linear("class_head.logit_shift", HEADS + "logit_shift/"),
    *torch_linear("class_head.logit_scale", HEADS + "logit_scale/"),
    *(rule for i in range(3) for rule in torch_linear(f"box_head.dense{i}", HEADS + f"box_{i}/")),
    *(rule for i in range(3) for rule in torch_linear(f"objectness_head.dense{i}", HEADS + f"objectness_{i}/")),
)
IGNORED = {
    "position_ids": "the position indices buffer, not a weight",
    "visual_projection.weight": "the image-text projection of the two towers: detection scores through its class head",
    "logit_scale": "the image-text logit scale of the two towers: detection scores through its class head",
}


def unsupported(message):
    """The error of a config keras_vit cannot build."""
    return ValueError(f"Cannot build this transformers OWL-ViT detector: {message}")


def detection_class(config):
    """The class a `config.json` dict describes, and its `OwlClass`.

    Raises:
        ValueError: for another model type or class.

    Example:

    >>> detection_class({"model_type": "owlv2"})[1].objectness
    True
    """
    model_type = config.get("model_type")
    known = [name for name, spec in CLASSES.items() if spec.model_type == model_type]
    if not known:
        raise unsupported(f"`model_type` must be one of {MODEL_TYPES}. Received: model_type={model_type!r}")
    name = (config.get("architectures") or known)[0]
    if name not in known:
        raise unsupported(
            f"a {model_type} directory must hold {known[0]} (the detector). Received: architectures="
            f"{config.get('architectures')!r}"
        )
    return name, CLASSES[name]


def vision_config(config):
    """The vision tower's config over the class's defaults."""
    spec = detection_class(config)[1]
    return {**VISION_DEFAULTS, "image_size": spec.image_size, **(config.get("vision_config") or {})}


def text_config(config):
    """The text tower's config over the class's defaults."""
    return {**TEXT_DEFAULTS, **(config.get("text_config") or {})}


def _activation(tower, which):
    act = tower["hidden_act"]
    if act not in ACTIVATIONS:
        raise unsupported(f"the {which} tower's `hidden_act` must be one of {sorted(ACTIVATIONS)}. "
                          f"Received: hidden_act={act!r}")
    return ACTIVATIONS[act]


def image_arguments(config):
    """`keras_vit.ViT` arguments of the vision tower: every token out, after
    `post_layernorm` (the encoder's final norm).

    Example:

    >>> args = image_arguments({"model_type": "owlv2", "vision_config": {"patch_size": 16}})
    >>> args["image_size"], args["pre_norm"], args["pooling"], args["mlp_activation"]
    ((960, 960), True, None, 'quick_gelu')
    """
    vision = vision_config(config)
    return C.encoder_arguments(
        vision["image_size"], vision["patch_size"], vision["hidden_size"], vision["num_hidden_layers"],
        vision["num_attention_heads"], vision["intermediate_size"], channels=vision["num_channels"],
        mlp_activation=_activation(vision, "vision"), layer_norm_epsilon=float(vision["layer_norm_eps"]),
        attention_dropout_rate=float(vision["attention_dropout"]),
        patch_bias=False, pre_norm=True, position_interpolation="clip", classifier="token",
        include_top=False, pooling=None, classifier_activation=None,
    )


def text_arguments(config):
    """`keras_vit.text.TextEncoder` arguments of the text tower: causal, its
    largest token id pooled, projected without bias.

    Example:

    >>> args = text_arguments({"model_type": "owlvit", "projection_dim": 12})
    >>> args["pooling"], args["max_length"], args["projection_dim"]
    ('argmax', 16, 12)
    """
    text = text_config(config)
    return dict(
        vocabulary_size=text["vocab_size"], max_length=text["max_position_embeddings"],
        hidden_size=text["hidden_size"], num_layers=text["num_hidden_layers"],
        num_heads=text["num_attention_heads"], mlp_dim=text["intermediate_size"], causal=True,
        pooling="argmax", layer_norm_epsilon=float(text["layer_norm_eps"]),
        mlp_activation=_activation(text, "text"), attention_dropout_rate=float(text["attention_dropout"]),
        projection_dim=int(config.get("projection_dim", 512)), projection_bias=False,
    )


def head_arguments(config):
    """`keras_vit.layers.detection_heads.DetectionHeads` arguments.

    Example:

    >>> head_arguments({"model_type": "owlv2", "projection_dim": 24, "text_config": {"hidden_size": 24}})
    {'query_dim': 24, 'objectness': True, 'layer_norm_epsilon': 1e-05}
    """
    spec = detection_class(config)[1]
    width, projection = int(text_config(config)["hidden_size"]), int(config.get("projection_dim", 512))
    if width != projection:
        raise unsupported(
            "the class head compares the projected text embeddings with class embeddings as wide as the text "
            f"tower: `projection_dim` must equal the text `hidden_size`. Received: projection_dim={projection}, "
            f"text hidden_size={width}"
        )
    return dict(query_dim=width, objectness=spec.objectness,
                layer_norm_epsilon=float(vision_config(config)["layer_norm_eps"]))


def processor(config, file):
    """`(Preprocessing record, pad_to_square)` of a `preprocessor_config.json`
    dict (None: the class's processor defaults).

    Example:

    >>> record, pad = processor({"model_type": "owlv2"}, None)
    >>> record.image_size, record.interpolation, pad
    ((960, 960), 'bilinear', True)
    """
    spec = detection_class(config)[1]
    size = vision_config(config)["image_size"]
    defaults = {
        "image_processor_type": "OwlViTImageProcessor", "size": {"height": size, "width": size},
        "resample": 2 if spec.pad_to_square else 3, "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711], "do_pad": spec.pad_to_square,
    }
    file = {**defaults, **(file or {})}
    return transformers_processor.preprocessing(file), bool(file.get("do_pad", False))


class DetectorCheckpoints(NamedTuple):
    """A detector's state dict, split by tower, in the canonical layouts.

    Attributes:
        image: `Checkpoint` of the vision tower (`keras_vit.ViT` keys).
        text: `Checkpoint` of the text tower (`TextEncoder` keys).
        heads: `Checkpoint` of the heads (their variable paths).
    """

    image: object
    text: object
    heads: object


def tables(config):
    """`(vision, text, heads)` `RuleTable`s of a detector's state dict."""
    prefix = detection_class(config)[1].prefix
    vision = RuleTable(VISION_BODY).prefixed(prefix + "vision_model.")
    text = RuleTable(TEXT_BODY).prefixed(prefix + "text_model.") + RuleTable(
        (((prefix + "text_projection.weight"), "projection/kernel", "linear"),)
    )
    return vision, text, RuleTable(HEAD_RULES)


def read(state, config, path):
    """A detector's state dict as `DetectorCheckpoints` (keys no table knows are kept in
    `heads`, for the loader to report as unexpected).

    Args:
        state: `{key: NumPy array}` as `save_pretrained` wrote it.
        config: the `config.json` dict.
        path: the file it came from, for messages.
    """
    kept, ignored = split_ignored(state, IGNORED)
    vision_table, text_table, heads_table = tables(config)
    prefix = detection_class(config)[1].prefix
    vision = {k: v for k, v in kept.items() if k.startswith(prefix + "vision_model.")}
    text = {k: v for k, v in kept.items() if k.startswith((prefix + "text_model.", prefix + "text_projection."))}
    rest = {k: v for k, v in kept.items() if k not in vision and k not in text}
    image_params, unknown = vision_table.to_canonical(vision, vision_config(config)["num_attention_heads"])
    image_params.update({k: vision[k] for k in unknown})
    text_params, unknown = text_table.to_canonical(text, text_config(config)["num_attention_heads"])
    text_params.update({k: text[k] for k in unknown})
    head_params, unknown = heads_table.to_canonical(rest)
    head_params.update({k: rest[k] for k in unknown})
    return DetectorCheckpoints(C.Checkpoint(path, "transformers", image_params, ignored),
                 C.Checkpoint(path, "transformers", text_params),
                 C.Checkpoint(path, "transformers", head_params))
