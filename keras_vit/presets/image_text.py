"""The preset directories of `keras_vit.ImageTextModel`, read and written.

Read (`read_parts`), by the layout of the directory's `config.json`:

- transformers' two-tower directories (`CLIPModel`, `MetaClip2Model`,
  `SiglipModel`, `Siglip2Model`): the image tower as `keras_vit.from_preset`
  reads it, the text tower and logit scale and bias from the same tensors
  (`weights.formats.transformers_image_text`), the tokenizer from the
  directory's own files (`keras_vit.text.tokenizer`), texts padded as
  transformers' zero-shot pipeline pads them;
- keras-hub's `CLIPBackbone` and `SigLIPBackbone` presets saved with their
  preprocessor: the image tower as `keras_vit.from_preset` reads it, the text
  tower and logit scale and bias from the variables keras-hub loads
  (`weights.formats.keras_hub_image_text`), the tokenizer from the
  preprocessor and its assets (`keras_vit.text.keras_hub_tokenizer`), texts
  padded as keras-hub's preprocessor pads them;
- keras_vit's own image-text presets (`write`).

Written (`write`, `ImageTextModel.save_to_preset`), keras_vit's layout:
`config.json` (registered "keras_vit>ImageTextModel": the logit scale and
bias, the activation, the text tower's Keras config and the tokenizer's),
`text_encoder.weights.h5`, `image_encoder/` (the image tower's keras_vit
preset, `save_to_preset`) and `tokenizer/` (the tokenizer's vocabulary file,
as its library writes it), and `metadata.json`.
"""

import os
from typing import NamedTuple

import keras

from keras_vit.families import keras_hub_image_text, keras_hub_source, transformers_image_text, transformers_source
from keras_vit.presets.loading import build, detect_layout, from_preset, preset_directory
from keras_vit.text.encoder import TextEncoder
from keras_vit.text.keras_hub_tokenizer import SentencePieceTokenizer, load_keras_hub_tokenizer
from keras_vit.text.tokenizer import JsonTokenizer, SiglipTokenizer, load_tokenizer
from keras_vit.version import __version__
from keras_vit.weights import shards
from keras_vit.weights.files import read_json, write_json
from keras_vit.weights.formats import keras_hub_family
from keras_vit.weights.loader import load_checkpoint

REGISTERED = "keras_vit>ImageTextModel"
TEXT_WEIGHTS = "text_encoder.weights.h5"
IMAGE_FOLDER, TOKENIZER_FOLDER = "image_encoder", "tokenizer"
# The tokenizers a keras_vit image-text preset can hold, by class name.
TOKENIZERS = {cls.__name__: cls for cls in (JsonTokenizer, SiglipTokenizer, SentencePieceTokenizer)}


class Parts(NamedTuple):
    """What an `ImageTextModel` is made of (its constructor's arguments)."""

    image_encoder: object
    text_encoder: object
    tokenizer: object
    logit_scale: float
    logit_bias: float
    activation: str


def read_parts(handle, dtype=None):
    """The `Parts` of a preset directory or `hf://` handle (see the module docstring).

    Raises:
        ValueError: for a directory that is not a two-tower preset keras_vit
            reads, or whose files do not match.
    """
    directory = preset_directory(handle)
    overrides = {} if dtype is None else {"dtype": dtype}
    layout = detect_layout(directory)
    readers = {"transformers": _transformers, "keras_hub": _keras_hub, "keras_vit": _keras_vit}
    if layout not in readers:
        raise ValueError(
            f"{handle!r} is a {layout} preset, not a two-tower one: an ImageTextModel reads transformers' "
            "CLIPModel, MetaClip2Model, SiglipModel and Siglip2Model directories, keras-hub's CLIPBackbone "
            "and SigLIPBackbone presets, and keras_vit's own (ImageTextModel.save_to_preset)."
        )
    return readers[layout](directory, overrides)


def _transformers(directory, overrides):
    config = read_json(os.path.join(directory, "config.json"))
    tower = transformers_image_text.text_tower(config)
    text_encoder = TextEncoder(**transformers_image_text.text_arguments(config), **overrides)
    # Read once: the text tower, the logits and the image tower from the same tensors.
    state, path = shards.read_state(directory)
    load_checkpoint(text_encoder, transformers_image_text.read_text(state, config, path))
    scale, bias = transformers_image_text.logits(state, config, path)
    padding, max_length = transformers_image_text.pipeline_padding(config)
    tokenizer = load_tokenizer(directory, max_length, padding, lowercase=tower.lowercase)
    image_encoder = build(transformers_source.preset_source(directory, state=(state, path)), **overrides)
    return Parts(image_encoder, text_encoder, tokenizer, scale, bias, tower.activation)


def _keras_hub(directory, overrides):
    backbone = read_json(os.path.join(directory, "config.json"))
    tower = keras_hub_image_text.text_tower(backbone)
    arguments = keras_hub_image_text.text_arguments(backbone)
    tokenizer = load_keras_hub_tokenizer(directory)
    if tokenizer.max_length > arguments["max_length"]:
        raise ValueError(
            f"{directory!r}: the preprocessor pads texts to {tokenizer.max_length} tokens, more than the text "
            f"tower's {arguments['max_length']} positions."
        )
    text_encoder = TextEncoder(**arguments, **overrides)
    # Loaded once by keras-hub: the text tower, the logits and the image tower from the same variables.
    variables = keras_hub_family.read_variables(directory, with_task=False)
    path = os.path.join(directory, keras_hub_family.WEIGHTS_FILE)
    load_checkpoint(text_encoder, keras_hub_image_text.read_text(variables, backbone, path))
    scale, bias = keras_hub_image_text.logits(variables, backbone, path)
    image_encoder = build(keras_hub_source.preset_source(directory, variables=variables), **overrides)
    return Parts(image_encoder, text_encoder, tokenizer, scale, bias, tower.activation)


def _keras_vit(directory, overrides):
    spec = read_json(os.path.join(directory, "config.json"))
    if spec.get("registered_name") != REGISTERED:
        raise ValueError(
            f"{directory!r} is a keras_vit image model preset (keras_vit.from_preset reads it), not an "
            f"image-text one. Received: registered_name={spec.get('registered_name')!r}"
        )
    config = spec["config"]
    text_config = dict(config["text_encoder"]["config"], **overrides)
    text_encoder = TextEncoder.from_config(text_config)
    text_encoder.load_weights(os.path.join(directory, TEXT_WEIGHTS))
    kind = config["tokenizer"]["class_name"]
    if kind not in TOKENIZERS:
        raise ValueError(f"{directory!r}: its tokenizer must be one of {tuple(TOKENIZERS)}. Received: {kind!r}")
    tokenizer = TOKENIZERS[kind].from_files(os.path.join(directory, TOKENIZER_FOLDER), config["tokenizer"]["config"])
    image_encoder = from_preset(os.path.join(directory, IMAGE_FOLDER), **overrides)
    return Parts(image_encoder, text_encoder, tokenizer, config["logit_scale"], config["logit_bias"],
                 config["activation"])


def write(model, directory):
    """Writes an `ImageTextModel` as a keras_vit image-text preset (see the
    module docstring); `read_parts` reads it back on any backend.

    Raises:
        ValueError: for a tokenizer or image tower this layout cannot hold
            (nothing is written).

    Example:

    >>> import tempfile, tokenizers, keras_vit
    >>> from keras_vit.text.tokenizer import JsonTokenizer
    >>> raw = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<pad>": 0, "a": 1, "cat": 2}, unk_token="<pad>"))
    >>> raw.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    >>> image = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1, num_heads=2,
    ...                       mlp_dim=8, include_top=False, pooling="token")
    >>> text = keras_vit.text.TextEncoder(vocabulary_size=3, max_length=4, hidden_size=8, num_layers=1,
    ...                                   num_heads=2, mlp_dim=8, pooling="last")
    >>> model = keras_vit.ImageTextModel(image, text, JsonTokenizer(raw, pad_id=0, max_length=4), logit_scale=10.0)
    >>> folder = tempfile.mkdtemp()
    >>> write(model, folder)
    >>> parts = read_parts(folder)
    >>> parts.logit_scale, type(parts.tokenizer).__name__, parts.tokenizer(["a cat"])["token_ids"].tolist()
    (10.0, 'JsonTokenizer', [[1, 2]])
    """
    kind = type(model.tokenizer).__name__
    if kind not in TOKENIZERS:
        raise ValueError(
            f"An image-text preset holds the tokenizers {tuple(TOKENIZERS)}. Received: a {kind}"
        )
    if not callable(getattr(model.image_encoder, "save_to_preset", None)):
        raise ValueError(
            "An image-text preset holds a keras_vit image tower (its save_to_preset). "
            f"Received: image_encoder={model.image_encoder!r}"
        )
    directory = os.fspath(directory)
    for folder in (IMAGE_FOLDER, TOKENIZER_FOLDER):
        os.makedirs(os.path.join(directory, folder), exist_ok=True)
    model.image_encoder.save_to_preset(os.path.join(directory, IMAGE_FOLDER))
    model.tokenizer.save_files(os.path.join(directory, TOKENIZER_FOLDER))
    model.text_encoder.save_weights(os.path.join(directory, TEXT_WEIGHTS))
    config = {
        "logit_scale": model.logit_scale,
        "logit_bias": model.logit_bias,
        "activation": model.activation,
        "text_encoder": keras.saving.serialize_keras_object(model.text_encoder),
        "tokenizer": {"class_name": kind, "config": model.tokenizer.get_config()},
    }
    write_json(os.path.join(directory, "config.json"),
               {"registered_name": REGISTERED, "class_name": "ImageTextModel", "config": config})
    write_json(os.path.join(directory, "metadata.json"),
               {"format": "keras_vit", "keras_vit_version": __version__, "keras_version": keras.__version__})
