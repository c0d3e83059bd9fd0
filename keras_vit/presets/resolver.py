"""One resolver: a keras_vit model from whatever names one.

`load_model(source)` takes every way keras_vit knows to name a model, so
the library and every command (`keras-vit inspect`, `export`, `classify`,
`keras-vit-convert`) accept the same things:

| `source` | built by |
| --- | --- |
| a keras model | itself |
| a preset name ("dinov3_vits16", "facebook/dinov2-small", "vit_base_patch16_224.augreg_in1k": `keras_vit.list_presets()`) | `keras_vit.from_preset` of its handle |
| a preset folder (keras_vit, transformers, timm, keras-hub), `hf://org/name[@revision]` or `kaggle://owner/model/framework/variation` | `keras_vit.from_preset` |
| a `.keras` file | `keras.saving.load_model` |
| a checkpoint file (`.npz`, `.safetensors`, `.pth`, `.weights.h5`, ...) | the named constructor of the architecture its tensors hold, `weights=` the file |
| a constructor ("ViTTi16", "ViT") or architecture ("Ti/16") name | that constructor, with `weights=` |

A checkpoint file that does not record the numerics it was trained with
(`numerics_unrecorded`: an `.npz` or `.weights.h5` its GELU, every file
but a `.keras` archive its input scaling) needs them said:
`mlp_activation=` (the constructors refuse the file without it) and
`preprocessing=` (or `keras_vit.classify` asks for it).
"""

import difflib
import os

from keras_vit.architectures import ARCHITECTURE_CONFIGS, CONSTRUCTORS, get_variant
from keras_vit.presets.catalogue import closest_names, find_preset
from keras_vit.weights.describe import numerics_unrecorded  # noqa: F401 (the commands' import)
from keras_vit.weights.record import Preprocessing

# The generic model classes a source may name besides the table's constructors.
MODEL_CLASSES = ("ViT", "ViTHybrid", "ViTConvStem")
CHECKPOINT_SUFFIXES = (".npz", ".safetensors", ".pth", ".pt", ".bin", ".h5")


def _preprocessing(value, image_size):
    if value is None or isinstance(value, Preprocessing) or isinstance(value, dict):
        return None if value is None else Preprocessing.from_config(value)
    return Preprocessing.from_mode(value, image_size=tuple(image_size))


# Constructor and class names by their lower-case spelling: the default
# `name` of the model each builds.
_LOWER_NAMES = {name.lower(): name for name in (*CONSTRUCTORS, *MODEL_CLASSES)}


def _closest(name):
    names = list(CONSTRUCTORS) + list(MODEL_CLASSES) + list(ARCHITECTURE_CONFIGS)
    match = difflib.get_close_matches(name, names, n=1) + closest_names(name)
    return f" Did you mean {' or '.join(map(repr, match))}?" if match else ""


def _constructor(name):
    from keras_vit import models

    if name in MODEL_CLASSES:
        return getattr(models, name)
    return getattr(models, get_variant(name).constructor)


def untrained_reason(source, weights=None):
    """Why `load_model(source, weights)` gives random weights, or None.

    A constructor, class or architecture name without `weights` builds a
    model from scratch: right for training, meaningless for predictions.
    `keras_vit.classify` and `keras-vit classify` refuse it with this reason;
    `keras-vit inspect` and `keras-vit export` warn with it.

    Example:

    >>> untrained_reason("ViTTi16", weights="augreg-i21k+imagenet2012") is None
    True
    >>> "randomly initialised" in untrained_reason("ViTTi16")
    True
    """
    if weights is not None or not isinstance(source, str) or os.path.exists(source):
        return None
    name = source if source in (*CONSTRUCTORS, *MODEL_CLASSES, *ARCHITECTURE_CONFIGS) else _LOWER_NAMES.get(
        source.lower())
    if name is None:
        return None
    from keras_vit.weights.registry import weights_names

    registered = weights_names(get_variant(name).architecture) if name not in MODEL_CLASSES else []
    known = f" (registered for it: {', '.join(registered)})" if registered else ""
    return (
        f"{source!r} names an architecture: without weights its model is randomly initialised and "
        f"its predictions mean nothing. Give weights{known}: `weights=` with the name "
        "(keras-vit: --weights), a checkpoint or .keras file, a preset folder, an hf:// handle or "
        "a preset name (keras_vit.list_presets())."
    )


def _from_file(path, weights, overrides):
    import keras

    from keras_vit.weights.describe import checkpoint_constructor

    if weights is not None:
        raise ValueError(
            f"`weights` goes with a constructor name; {path!r} is a file already. "
            f"Received: source={path!r}, weights={weights!r}"
        )
    if path.lower().endswith(".keras"):
        if overrides:
            raise ValueError(
                f"A .keras file is a whole model; it takes no {sorted(overrides)}. "
                f"Received: source={path!r}"
            )
        return keras.saving.load_model(path)
    if not path.lower().endswith(CHECKPOINT_SUFFIXES):
        raise ValueError(
            f"{path!r} is neither a checkpoint file ({', '.join(CHECKPOINT_SUFFIXES)}), "
            "a .keras file nor a preset folder."
        )
    name = checkpoint_constructor(path)
    if name is None:
        raise ValueError(
            f"Cannot tell which architecture {path!r} holds (a Keras weights file, or a "
            "shape outside the table): name it, e.g. load_model('ViTTi16', "
            f"weights={path!r}) (command line: --model ViTTi16 --weights {path})."
        )
    return _constructor(name)(weights=path, **overrides)


def _check_source(source):
    if isinstance(source, os.PathLike):
        return os.fspath(source)
    if not isinstance(source, str) or not source:
        raise ValueError(
            "`source` must be a keras model, a constructor or architecture name, a "
            "checkpoint or .keras file, a preset folder or an hf:// or kaggle:// handle. "
            f"Received: source={source!r}"
        )
    return source


def load_model(source, weights=None, preprocessing=None, **overrides):
    """A keras_vit model from a name, a file, a preset folder or a Hub handle.

    Args:
        source: a keras model (returned as it is); a preset name
            ("dinov3_vits16", "facebook/dinov2-small",
            `keras_vit.list_presets()`); a preset folder, an
            `"hf://org/name[@revision]"` or a
            `"kaggle://owner/model/framework/variation"` handle
            (`keras_vit.from_preset`); a `.keras` file; a checkpoint file
            (the architecture is read from its tensors); or a constructor
            ("ViTTi16", "ViT", or the model name it gives, "vitti16") or
            architecture ("Ti/16") name.
        weights: with a name only: None, a registered weights name or a
            checkpoint path.
        preprocessing: None (the source's record, if any), a mode
            ("inception", "imagenet") or a `Preprocessing` record: how the
            model's images are prepared (`model.preprocessing`).
        **overrides: model arguments: for a name or a checkpoint file any
            constructor argument (e.g. `mlp_activation="gelu"`,
            `image_size=384`, `classes=10`); for a preset the overrides
            `from_preset` takes.

    Returns:
        A keras model.

    Raises:
        ValueError: naming what `source` is and what it cannot take, or the
            closest valid name for an unknown one.

    Example:

    >>> model = load_model("ViTTi16", image_size=32, classes=3)
    >>> model.name, model.image_size
    ('vitti16', (32, 32))
    """
    import keras

    from keras_vit.presets.loading import HANDLE_SCHEMES, from_preset

    if isinstance(source, keras.Model):
        if weights is not None or preprocessing is not None or overrides:
            raise ValueError(
                "A model is used as it is; build it with the arguments instead. "
                f"Received: model {source.name!r} with weights={weights!r}, "
                f"preprocessing={preprocessing!r}, {sorted(overrides)}"
            )
        return source
    source = _check_source(source)
    named = not os.path.exists(source) and find_preset(source) is not None
    if source.startswith(HANDLE_SCHEMES) or os.path.isdir(source) or named:
        if weights is not None:
            raise ValueError(
                f"A preset holds its own weights. Received: source={source!r}, weights={weights!r}"
            )
        model = from_preset(source, **overrides)
    elif os.path.isfile(source):
        model = _from_file(source, weights, overrides)
    elif source in MODEL_CLASSES or source in CONSTRUCTORS or source in ARCHITECTURE_CONFIGS:
        model = _constructor(source)(weights=weights, **overrides)
    elif source.lower() in _LOWER_NAMES:
        # The name a constructor gives its model ("vitti16"), as printed.
        model = _constructor(_LOWER_NAMES[source.lower()])(weights=weights, **overrides)
    elif os.sep in source or "/" in source or os.path.splitext(source)[1]:
        raise ValueError(
            f"No file or folder at {source!r} (resolved to {os.path.abspath(source)!r}), and no preset of "
            f"that name (keras_vit.list_presets() lists them).{_closest(source)}"
        )
    else:
        raise ValueError(
            f"Unknown model {source!r}: no file or folder of that name (in "
            f"{os.getcwd()!r}) and no model name. Give a constructor "
            f"({', '.join(CONSTRUCTORS)}, ViT), an architecture name, a preset name "
            "(keras_vit.list_presets()), a checkpoint or "
            f".keras file, a preset folder or an hf:// or kaggle:// handle.{_closest(source)}"
        )
    prep = _preprocessing(preprocessing, getattr(model, "image_size", (224, 224)))
    if prep is not None:
        model.preprocessing = prep
    return model
