"""Preset writers: a keras_vit model as a keras_vit or transformers directory.

On the weights floor (they need a model's config and weights, not the model
classes), so `ViT.save_to_preset` can call them. `keras_vit.from_preset`
reads both back.
"""

import json
import os

import keras
import numpy as np

from keras_vit.version import __version__
from keras_vit.weights import hf_layout
from keras_vit.weights.mapping import model_state
from keras_vit.weights.record import Preprocessing

FORMATS = ("keras_vit", "transformers")
KERAS_WEIGHTS = "model.weights.h5"


def _check_format(format):
    if format not in FORMATS:
        raise ValueError(f"`format` must be one of {FORMATS}. Received: format={format!r}")


def _write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.write("\n")


def _save_keras_vit(model, directory):
    _write_json(os.path.join(directory, "config.json"), keras.saving.serialize_keras_object(model))
    model.save_weights(os.path.join(directory, KERAS_WEIGHTS))
    _write_json(
        os.path.join(directory, "metadata.json"),
        {
            "format": "keras_vit",
            "keras_vit_version": __version__,
            "keras_version": keras.__version__,
            "parameter_count": int(model.count_params()),
        },
    )


def _save_transformers(model, directory):
    from safetensors.numpy import save_file

    config = model.get_config()
    hf_config = hf_layout.export_config(config, model.class_names)
    architecture = hf_config["architectures"][0]
    _, prefix, head = hf_layout.ARCHITECTURES[architecture]
    state = hf_layout.table(prefix, head).from_canonical(model_state(model))
    state = {k: np.asarray(v, "float32") for k, v in state.items()}
    save_file(state, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    _write_json(os.path.join(directory, "config.json"), hf_config)
    if model.preprocessing is not None:
        record = Preprocessing.from_config(model.preprocessing)
        _write_json(
            os.path.join(directory, "preprocessor_config.json"),
            hf_layout.export_preprocessor(record),
        )


def save_to_preset(model, directory, format="keras_vit"):
    """Writes a model as a preset directory.

    - `"keras_vit"`: `config.json` (Keras' serialisation of the model, its
      `get_config` with preprocessing and class names), `model.weights.h5`
      and `metadata.json`; `from_preset` rebuilds it exactly on any backend.
    - `"transformers"`: `config.json`, `model.safetensors` and
      `preprocessor_config.json` that
      `transformers.AutoModelForImageClassification.from_pretrained` loads
      with no missing or unexpected keys (`ViTForImageClassification`, or
      the DeiT classes for models with a distillation token). The tanh GELU
      is written as `hidden_act="gelu_pytorch_tanh"`. Models transformers
      cannot represent (hybrids, register tokens, GAP or pooled-norm
      classifiers, pre-logits layers, no head) are refused before anything
      is written.

    Args:
        model: a keras_vit `ViT` or `ViTHybrid`.
        directory: folder to write (created if needed; existing files of the
            same names are replaced).
        format: "keras_vit" (default) or "transformers".

    Raises:
        ValueError: for an unknown format or a model the format cannot hold.

    Example:

    >>> import os, tempfile
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8,
    ...                       num_layers=1, num_heads=2, mlp_dim=8, classes=2)
    >>> folder = tempfile.mkdtemp()
    >>> save_to_preset(model, folder, format="transformers")
    >>> sorted(os.listdir(folder))
    ['config.json', 'model.safetensors']
    """
    _check_format(format)
    if format == "transformers":
        hf_layout.export_architecture(model.get_config())  # refuse before writing
    os.makedirs(directory, exist_ok=True)
    if format == "keras_vit":
        _save_keras_vit(model, directory)
    else:
        _save_transformers(model, directory)
