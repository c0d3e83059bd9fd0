"""keras-hub two-tower presets (`keras_hub>CLIPBackbone`,
`keras_hub>SigLIPBackbone`) -> the text tower and the logit scale and bias.
The image tower is read by the family registered for the backbone
(`keras_hub_source.KERAS_HUB_FAMILIES`: `clip.KerasHubClip`,
`siglip.KerasHubSiglip`), the text tower by the records the family modules
hold (`KERAS_HUB_TEXT_TOWERS`), the tokenizer by
`keras_vit.text.keras_hub_tokenizer`.

Facts about the files (`save_to_preset` of the backbone):

- `config.json`: `text_encoder`, a serialised "keras_hub>CLIPTextEncoder"
  or "keras_hub>SigLIPTextEncoder" with its `config` (`vocabulary_size`,
  `embedding_dim`, `hidden_dim`, `num_layers`, `num_heads`,
  `intermediate_dim`, `intermediate_activation`, `max_sequence_length`;
  SigLIP's `layer_norm_epsilon` and `projection_dim`); CLIP's
  `projection_dim` beside it.
- text variables, under `<text name>_`: `embedding/token_embedding/embeddings`
  `(vocab, D)` and `embedding/position_embedding/embeddings` `(max_length,
  D)`; blocks `encoder_block_{i}/` (CLIP: `layer_norm_1`, `attention`,
  `layer_norm_2`, `dense_1`, `dense_2`; SigLIP: `layer_norm1`,
  `self_attn`, `layer_norm2`, `mlp/fc1`, `mlp/fc2`), the final norm (CLIP:
  `layer_norm`, SigLIP: `post_layer_norm`) and SigLIP's `head` (with bias);
  CLIP's `text_projection/kernel` (no bias) at the root; the loss's
  `clip_head/logit_scale` or `siglip_head/logit_scale` and `logit_bias`
  (the log of the scale, and the bias).
- the text model: CLIP masks attention causally, gives the blocks' norms
  epsilon 1e-5 and the final one 1e-6, and pools the token of the largest
  id (its end-of-text token: `CLIPTextPooler`); SigLIP attends both ways
  and pools the last token. Neither takes a padding mask: every token
  attends to the padding (keras_vit's `mask_padding=False`).
- `vision_logits = exp(logit_scale) * cos(image, text) (+ logit_bias)`.
"""

import math
from typing import NamedTuple

from keras_vit.families import clip, siglip
from keras_vit.weights import canonical as C
from keras_vit.weights.rules import RuleTable

# keras-hub's `intermediate_activation` -> keras_vit's `mlp_activation`.
ACTIVATIONS = {"quick_gelu": "quick_gelu", "gelu": "gelu", "gelu_approximate": "gelu_tanh"}


class KerasHubTextTower(NamedTuple):
    """The text side of a keras-hub two-tower backbone.

    Attributes:
        text_encoder: the `registered_name` of its text encoder.
        rules: the text encoder's variables (after its prefix) -> canonical keys.
        projection: rules of the variables at the root beside it (CLIP's projection).
        head: the prefix of the logit scale (and bias) variables.
        activation: how one image's scores become probabilities, "softmax"
            (CLIP) or "sigmoid" (SigLIP).
        causal, pooling: the `TextEncoder`'s.
    """

    text_encoder: str
    rules: tuple
    projection: tuple
    head: str
    activation: str
    causal: bool
    pooling: str


TEXT_TOWERS = {
    name: KerasHubTextTower(**record)
    for family in (clip, siglip)
    for name, record in family.KERAS_HUB_TEXT_TOWERS.items()
}
_IGNORED = {"embedding/position_ids": "the position indices 0..N-1, not a weight"}


def _unsupported(message):
    return ValueError(f"Cannot build this keras-hub image-text model: {message}")


def text_tower(backbone):
    """The `KerasHubTextTower` of a preset's `config.json` dict.

    Raises:
        ValueError: for a backbone without a text tower keras_vit reads.

    Example:

    >>> text_tower({"registered_name": "keras_hub>SigLIPBackbone", "config": {
    ...     "text_encoder": {"registered_name": "keras_hub>SigLIPTextEncoder"}}}).activation
    'sigmoid'
    """
    name = backbone.get("registered_name")
    if name not in TEXT_TOWERS:
        raise _unsupported(
            f"config.json must describe one of {tuple(TEXT_TOWERS)} (image and text). "
            f"Received: registered_name={name!r}"
        )
    tower = TEXT_TOWERS[name]
    found = text_encoder(backbone).get("registered_name")
    if found != tower.text_encoder:
        raise _unsupported(f"its text_encoder must be a {tower.text_encoder}. Received: registered_name={found!r}")
    return tower


def text_encoder(backbone):
    """The serialised text encoder of a preset's `config.json` dict."""
    return backbone.get("config", {}).get("text_encoder") or {}


def text_arguments(backbone):
    """`keras_vit.text.TextEncoder` arguments for a preset's `config.json` dict.

    Example:

    >>> args = text_arguments({"registered_name": "keras_hub>CLIPBackbone", "config": {
    ...     "projection_dim": 12, "text_encoder": {"registered_name": "keras_hub>CLIPTextEncoder",
    ...     "config": {"vocabulary_size": 300, "embedding_dim": 24, "hidden_dim": 24, "num_layers": 2,
    ...                "num_heads": 2, "intermediate_dim": 32}}}})
    >>> args["pooling"], args["max_length"], args["final_norm_epsilon"], args["mask_padding"]
    ('argmax', 77, 1e-06, False)
    """
    tower = text_tower(backbone)
    config = text_encoder(backbone)["config"]
    if config["embedding_dim"] != config["hidden_dim"]:
        raise _unsupported(
            "the token embedding must be as wide as the blocks (keras_vit adds no projection between "
            f"them). Received: embedding_dim={config['embedding_dim']}, hidden_dim={config['hidden_dim']}"
        )
    if config.get("intermediate_output_index") is not None:
        raise _unsupported("the text encoder's output must be its final tokens. Received: "
                           f"intermediate_output_index={config['intermediate_output_index']}")
    siglip = tower.text_encoder == "keras_hub>SigLIPTextEncoder"
    activation = config.get("intermediate_activation", "gelu_approximate" if siglip else "quick_gelu")
    if activation not in ACTIVATIONS:
        raise _unsupported(f"`intermediate_activation` must be one of {sorted(ACTIVATIONS)}. "
                           f"Received: intermediate_activation={activation!r}")
    if siglip:
        epsilon = float(config.get("layer_norm_epsilon", 1e-6))
        norms = dict(layer_norm_epsilon=epsilon, final_norm_epsilon=None)
        projection = dict(projection_dim=int(config.get("projection_dim") or config["hidden_dim"]),
                          projection_bias=True)
    else:
        norms = dict(layer_norm_epsilon=clip.KERAS_HUB_TEXT_EPSILON, final_norm_epsilon=clip.KERAS_HUB_TEXT_FINAL_EPSILON)
        projection = dict(projection_dim=int(backbone["config"]["projection_dim"]), projection_bias=False)
    return dict(
        vocabulary_size=config["vocabulary_size"],
        max_length=config.get("max_sequence_length", 64 if siglip else 77),
        hidden_size=config["hidden_dim"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        mlp_dim=config["intermediate_dim"],
        causal=tower.causal,
        pooling=tower.pooling,
        mask_padding=False,
        mlp_activation=ACTIVATIONS[activation],
        **norms,
        **projection,
    )


def read_text(variables, backbone, path):
    """The text tower of a preset's variables as a `Checkpoint`.

    Args:
        variables: `{variable path: NumPy array}` of the backbone keras-hub
            loaded (`keras_hub_family.read_variables`).
        backbone: the `config.json` dict.
        path: the weights file, for messages.
    """
    tower = text_tower(backbone)
    prefix = f"{text_encoder(backbone)['config'].get('name')}_"
    roots = {source for source, *_ in tower.projection}
    state, ignored = {}, {}
    for name, array in variables.items():
        if name.startswith(prefix):
            local = name[len(prefix):]
            if local in _IGNORED:
                ignored[name] = _IGNORED[local]
            else:
                state[local] = array
        elif name in roots:
            state[name] = array
        elif name.startswith(tower.head):
            ignored[name] = "the logit scale or bias (read beside the towers)"
        else:
            ignored[name] = "the image tower (read by the vision family)"
    num_heads = text_encoder(backbone)["config"]["num_heads"]
    params, unknown = RuleTable(tower.rules + tower.projection).to_canonical(state, num_heads)
    params.update({k: state[k] for k in unknown})  # reported as unexpected
    return C.Checkpoint(path, "keras_hub", params, ignored)


def logits(variables, backbone, path):
    """`(scale, bias)` of the scores: `exp(logit_scale)` and the logit bias
    (0 for CLIP), as Python floats.

    Raises:
        ValueError: naming the file when a variable the backbone has is absent.
    """
    tower = text_tower(backbone)
    names = ("logit_scale",) + (("logit_bias",) if tower.activation == "sigmoid" else ())
    found = {n: variables.get(tower.head + n) for n in names}
    missing = [tower.head + n for n, v in found.items() if v is None]
    if missing:
        raise ValueError(f"Cannot load {path!r}: a {backbone['registered_name']} has {missing}, the preset has not.")
    scale = math.exp(float(found["logit_scale"].reshape(-1)[0]))
    bias = float(found["logit_bias"].reshape(-1)[0]) if "logit_bias" in found else 0.0
    return scale, bias
