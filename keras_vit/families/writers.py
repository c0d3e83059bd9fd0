"""Preset writers: a keras_vit model as a keras_vit, transformers or timm directory.

On the weights floor (they need a model's config and weights, not the model
classes), so `ViT.save_to_preset` can call them. `keras_vit.from_preset`
reads both back.
"""

import contextlib
import os

import keras

from keras_vit import labels
from keras_vit.layers.config import RECORDS
from keras_vit.version import __version__
from keras_vit.weights.files import write_json
from keras_vit.families import transformers_source as transformers
from keras_vit.weights import shards
from keras_vit.weights.formats import timm_writer
from keras_vit.weights.mapping import model_state
from keras_vit.weights.record import Preprocessing

# The directory layouts `save_to_preset` writes.
PRESET_FORMATS = ("keras_vit", "transformers", "timm")
KERAS_WEIGHTS = "model.weights.h5"


def _check_format(format):
    if format not in PRESET_FORMATS:
        raise ValueError(f"`format` must be one of {PRESET_FORMATS}. Received: format={format!r}")


@contextlib.contextmanager
def _without_optimizer(model):
    """The model with its optimizer detached: Keras' `save_weights` writes a
    compiled model's optimizer state too (twice the model's size for SGD
    with momentum), which a preset, a model to use or fine-tune anew, does
    not need."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        yield model
        return
    model.optimizer = None
    try:
        yield model
    finally:
        model.optimizer = optimizer


def _save_keras_vit(model, directory, metadata):
    config = keras.saving.serialize_keras_object(model)
    config["config"].update(metadata)
    write_json(os.path.join(directory, "config.json"), config)
    with _without_optimizer(model):
        model.save_weights(os.path.join(directory, KERAS_WEIGHTS))
    write_json(
        os.path.join(directory, "metadata.json"),
        {
            "format": "keras_vit",
            "keras_vit_version": __version__,
            "keras_version": keras.__version__,
            "parameter_count": int(model.count_params()),
        },
    )


def _class_names(value, classes):
    if isinstance(value, str):
        if value not in labels.LISTS:
            raise ValueError(
                f"`class_names` must be one of {tuple(labels.LISTS)} or a sequence of "
                f"strings. Received: class_names={value!r}"
            )
        value = labels.class_names(labels.LISTS[value])
    names = list(value)
    if len(names) != classes or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"`class_names` must be {classes} strings, one per class of the head. "
            f"Received: {len(names)} items, class_names={names[:4]!r}..."
        )
    return names


def _preprocessing(value, model):
    if isinstance(value, str):
        return Preprocessing.from_mode(value, image_size=tuple(model.image_size))
    return Preprocessing.from_config(value)


def _flat_config(model):
    """The model's config with its option records' fields as top-level keys,
    the form the transformers writer reads."""
    config = model.get_config()
    for key in RECORDS:
        config.update(config.pop(key))
    return config


def encoder_state(model, head_prefixes):
    """`(the encoder's flat config, its canonical params, the head's params)` of a task model."""
    from keras_vit.weights.mapping import model_state

    params = model_state(model)
    head = {k: v for k, v in params.items() if k.startswith(head_prefixes)}
    encoder = {k: v for k, v in params.items() if k not in head}
    return _flat_config(model.encoder), encoder, head


def _names_classes(model, format):
    if format == "transformers":
        return transformers.names_classes(_flat_config(model))
    return model.include_top


def _metadata(model, format, preprocessing, class_names):
    """`class_names` and `preprocessing` as written: the arguments, else the model's.

    A transformers directory needs both (`id2label` names the classes,
    `preprocessor_config.json` is what `AutoImageProcessor` and `pipeline`
    read); a model built from a bare checkpoint file knows neither.
    A keras_vit preset keeps the model's own configuration; only explicit
    arguments replace it there.
    """
    if format == "keras_vit":
        model_names = model_prep = None
    else:
        model_names, model_prep = model.class_names, model.preprocessing
    class_names = model_names if class_names is None else class_names
    preprocessing = model_prep if preprocessing is None else preprocessing
    missing = [
        f"{arg}= ({example})"
        for arg, value, example in (
            ("preprocessing", preprocessing,
             "'imagenet' for ImageNet mean/std, 'inception' for [-1, 1], or a Preprocessing record"),
            ("class_names", class_names, "'imagenet1k', 'imagenet21k' or one string per class"),
        )
        # A model without a head (a backbone) has no classes to name,
        # nor one whose head is an embedding projection (CLIP's).
        if value is None and (arg != "class_names" or _names_classes(model, format))
    ]
    if format == "transformers" and missing:
        raise ValueError(
            f"A transformers directory needs the model's class names (`id2label`) and "
            f"preprocessing (`preprocessor_config.json`), and model {model.name!r} lacks "
            f"them (a model built from a checkpoint file does not know them). Pass "
            f"{' and '.join(missing)} to save_to_preset, or build the model with them."
        )
    out = {}
    if class_names is not None and (model.include_top or format == "keras_vit"):
        out["class_names"] = _class_names(class_names, model.classes)
    if preprocessing is not None:
        out["preprocessing"] = _preprocessing(preprocessing, model).get_config()
    return out


def _save_timm(model, directory, metadata, max_shard_size=None):
    prep = metadata.get("preprocessing")
    timm_writer.write(directory, _flat_config(model), model_state(model), metadata.get("class_names"),
                      None if prep is None else Preprocessing.from_config(prep), max_shard_size=max_shard_size)


def _save_transformers(model, directory, metadata, max_shard_size=None):
    transformers.write(
        directory,
        _flat_config(model),
        model_state(model),
        metadata.get("class_names"),
        Preprocessing.from_config(metadata["preprocessing"]),
        max_shard_size=max_shard_size,
    )


def save_to_preset(model, directory, format="keras_vit", preprocessing=None, class_names=None,
                   max_shard_size=None):
    """Writes a model as a preset directory.

    - `"keras_vit"`: `config.json` (Keras' serialisation of the model, its
      `get_config` with preprocessing and class names), `model.weights.h5`
      and `metadata.json`; `from_preset` rebuilds it exactly on any backend.
    - `"transformers"`: `config.json`, `model.safetensors` and
      `preprocessor_config.json` (with `id2label` from the class names) that
      `transformers.AutoModelForImageClassification.from_pretrained`,
      `AutoImageProcessor.from_pretrained` and
      `pipeline("image-classification")` load, with no missing or
      unexpected keys (`ViTForImageClassification`, or
      the DeiT classes for models with a distillation token; for the
      backbones, which need no class names: `Dinov2Model` or
      `Dinov2WithRegistersModel` (LayerScale, a class token, no head),
      `SiglipVisionModel` (a MAP head, no class token), `Siglip2VisionModel`
      (the same with `position_interpolation="siglip2"`), `ViTMAEModel`
      (fixed sin-cos position embedding, no pooling), `CLIPVisionModel`
      (`pre_norm`, the class token normed alone) or
      `CLIPVisionModelWithProjection` (the same with a zero-bias head as
      its projection); `keras_vit.families.transformers_source`). The tanh GELU
      is written as `hidden_act="gelu_pytorch_tanh"`. Models transformers
      cannot represent (hybrids, register tokens, GAP or pooled-norm
      classifiers, pre-logits layers, no head, block or encoder options a
      transformers ViT or family config has no field for) are refused
      before anything is written.
    - `"timm"`: `config.json` and `model.safetensors` of a timm Hub
      directory, which `timm.create_model("local-dir:<directory>",
      pretrained=True)` builds with the model's outputs (timm's
      `VisionTransformer` or DeiT's distilled one, an architecture of
      keras_vit's table of timm's model functions with `model_args`;
      `keras_vit.weights.formats.timm_writer`); class names and
      preprocessing are written when known. Models timm's
      VisionTransformer cannot hold (rotary or relative positions,
      qk-norm, parallel, post-norm or differential blocks, hybrids, ...)
      are refused before anything is written.

    Args:
        model: a keras_vit `ViT` or `ViTHybrid`.
        directory: folder to write (created if needed; existing files of the
            same names are replaced).
        format: "keras_vit" (default), "transformers" or "timm".
        preprocessing: None (default: `model.preprocessing`), a mode
            ("imagenet": ImageNet mean/std; "inception": [-1, 1]) at the
            model's input size, or a `Preprocessing` record or its config.
        class_names: None (default: `model.class_names`), "imagenet1k",
            "imagenet21k", or one string per class in head order.
        max_shard_size: for "transformers" and "timm", None (default: one
            `model.safetensors`) or the largest shard, in bytes or as "5GB":
            `model-0000i-of-0000N.safetensors` files and their
            `model.safetensors.index.json`, as transformers writes them.

    Raises:
        ValueError: for an unknown format, a model the format cannot hold,
            or a transformers directory with neither the model nor the
            arguments giving preprocessing and class names (nothing is
            written).

    Example:

    >>> import os, tempfile
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8,
    ...                       num_layers=1, num_heads=2, mlp_dim=8, classes=2)
    >>> folder = tempfile.mkdtemp()
    >>> save_to_preset(model, folder, format="transformers",
    ...                preprocessing="imagenet", class_names=["no", "yes"])
    >>> sorted(os.listdir(folder))
    ['config.json', 'model.safetensors', 'preprocessor_config.json']
    """
    _check_format(format)
    if max_shard_size is not None:
        if format == "keras_vit":
            raise ValueError(
                "max_shard_size applies to the safetensors formats, 'transformers' and 'timm'; the "
                "'keras_vit' format writes one model.weights.h5. Received: "
                f"format={format!r}, max_shard_size={max_shard_size!r}")
        shards.shard_bytes(max_shard_size)
    if format == "transformers":
        transformers.export_class(_flat_config(model))  # refuse before writing
    if format == "timm":
        timm_writer.timm_arguments(_flat_config(model))  # refuse before writing
    metadata = _metadata(model, format, preprocessing, class_names)
    os.makedirs(directory, exist_ok=True)
    if format == "keras_vit":
        _save_keras_vit(model, directory, metadata)
    else:
        {"transformers": _save_transformers, "timm": _save_timm}[format](
            model, directory, metadata, max_shard_size=max_shard_size)
