"""Task presets in: a transformers, keras-hub or keras_vit directory that
holds a task model, built and loaded.

`keras_vit.from_preset` looks every directory up in `TASK_PRESETS` before
reading it as an image model: one row per kind of task checkpoint, keyed by
its layout and name (a transformers `config.json`'s `model_type`, a
keras-hub one's `registered_name`, a keras_vit one's `class_name`):

| layout | name | task model | read by |
| --- | --- | --- | --- |
| transformers | `depth_anything`, `dpt`, `chmv2` | `DepthEstimator` | `keras_vit.families.dpt` |
| transformers | `eomt`, `eomt_dinov3` | `Segmenter` | `keras_vit.families.eomt` |
| keras_hub | `keras_hub>DepthAnythingBackbone` | `DepthEstimator` | `keras_vit.families.dpt` |
| keras_vit | `DepthEstimator`, `Segmenter` | the same | Keras (`model.weights.h5`) |
| transformers | `owlvit`, `owlv2` | `OpenVocabularyDetector` | its `from_transformers` (`keras_vit.families.owlvit`) |
| transformers | `sam` | `PromptableSegmenter` | its `from_transformers` (`keras_vit.families.sam`) |
| keras_hub | `keras_hub>SAMBackbone` | `PromptableSegmenter` | its `from_keras_hub` (`keras_vit.families.sam`) |

A dense task model (depth, segmentation) is described first
(`task_source`: the family of the checkpoint, `keras_vit.families.task_source`,
says what encoder and head it holds), then built here, the encoder (`ViT`
or `ViTHybrid`) from its arguments and the task model around it, and
loaded by the one strict loader (`keras_vit.weights.loader`). A detector or
SAM model is built and loaded by its class's reader.

The task classes are Keras' registered ones, looked up by name, not
imported: the task modules' one-call functions resolve handles through
`keras_vit.presets`, which reads task presets through this module
(importing `keras_vit` registers them).
"""

import dataclasses
import os

from keras_vit.families import task_source as families
from keras_vit.families.dpt import KerasHubDepthAnything
from keras_vit.families.sam import KERAS_HUB_REGISTERED as KERAS_HUB_SAM
from keras_vit.models import ViT, ViTHybrid
from keras_vit.weights import loader, shards
from keras_vit.weights.files import read_json
from keras_vit.weights.formats.task_family import TaskSource


@dataclasses.dataclass(frozen=True)
class TaskPreset:
    """One kind of task checkpoint (a row of `TASK_PRESETS`).

    Attributes:
        task_class: the task model's class, by its registered name
            (`keras_vit>{task_class}`).
        overrides: what `from_preset` may change about its model.
        reader: None for a dense task model (described by `task_source`,
            built by `build_task`), else the name of the class's
            classmethod `reader(directory, dtype)` that builds and loads it.
    """

    task_class: str
    overrides: tuple
    reader: str = None


# What `from_preset` may change about a dense task checkpoint's model
# (`build_task`), and about a model its class reads.
DENSE_OVERRIDES = ("image_size", "dtype", "name", "classes", "class_names")
READER_OVERRIDES = ("dtype",)
_DEPTH = TaskPreset("DepthEstimator", DENSE_OVERRIDES)
_SEGMENTER = TaskPreset("Segmenter", DENSE_OVERRIDES)
_DETECTOR = TaskPreset("OpenVocabularyDetector", READER_OVERRIDES, "from_transformers")

# `{(layout, name): TaskPreset}`: every task checkpoint keras_vit reads.
TASK_PRESETS = {
    **{("transformers", kind): TaskPreset(family.TASK, DENSE_OVERRIDES)
       for family in families.TASK_FAMILIES for kind in family.MODEL_TYPES},
    ("keras_hub", KerasHubDepthAnything.REGISTERED): _DEPTH,
    ("keras_vit", "DepthEstimator"): _DEPTH,
    ("keras_vit", "Segmenter"): _SEGMENTER,
    ("transformers", "owlvit"): _DETECTOR,
    ("transformers", "owlv2"): _DETECTOR,
    ("transformers", "sam"): TaskPreset("PromptableSegmenter", READER_OVERRIDES, "from_transformers"),
    ("keras_hub", KERAS_HUB_SAM): TaskPreset("PromptableSegmenter", READER_OVERRIDES, "from_keras_hub"),
}
# The `config.json` field that names a directory's model, per layout.
NAME_FIELDS = {"transformers": "model_type", "keras_hub": "registered_name", "keras_vit": "class_name"}
ENCODER_CLASSES = {"ViT": ViT, "ViTHybrid": ViTHybrid}
KERAS_WEIGHTS = "model.weights.h5"


def _config(directory):
    path = os.path.join(directory, "config.json")
    return read_json(path) if os.path.isfile(path) else {}


def task_preset(directory, layout):
    """The `TaskPreset` of a preset directory of `layout`, or None for an
    image model's.

    Example:

    >>> import json, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "config.json"), "w") as f:
    ...     json.dump({"model_type": "owlv2"}, f)
    >>> task_preset(folder, "transformers").task_class
    'OpenVocabularyDetector'
    >>> task_preset(folder, "timm") is None
    True
    """
    field = NAME_FIELDS.get(layout)
    if field is None:
        return None
    return TASK_PRESETS.get((layout, _config(directory).get(field)))


def check_readable(directory, layout):
    """Refuses a transformers directory whose `model_type` neither an image
    family nor a task row reads, naming its `config.json`, the model type
    and what keras_vit reads (its image models and task checkpoints)."""
    if layout != "transformers":
        return
    from keras_vit.families.transformers_source import TRANSFORMERS_FAMILIES

    kind = _config(directory).get("model_type")
    if kind in TRANSFORMERS_FAMILIES.names or ("transformers", kind) in TASK_PRESETS:
        return
    tasks = sorted(name for (source, name) in TASK_PRESETS if source == "transformers")
    raise ValueError(
        f"Cannot build {os.path.join(directory, 'config.json')}: `model_type` must be one of the image "
        f"models {TRANSFORMERS_FAMILIES.names} or the task checkpoints {tasks}. Received: model_type={kind!r}"
    )


def load_task(directory, layout, **overrides):
    """The task model of a task preset directory of `layout`, its weights
    loaded (what `keras_vit.from_preset` returns for one).

    Args:
        directory: a local directory `task_preset` finds a row for.
        layout: its layout (`keras_vit.presets.detect_layout`).
        **overrides: the row's `overrides` (see `build_task` for a dense
            task model's); a detector or SAM model takes `dtype` alone.

    Returns:
        The task model.
    """
    row = task_preset(directory, layout)
    _check_overrides(row, overrides)
    if row.reader is None:
        return build_task(task_source(directory, layout), **overrides)
    return getattr(task_class(row.task_class), row.reader)(directory, overrides.get("dtype"))


def _transformers_source(directory):
    config = _config(directory)
    family = families.task_family(config)
    # Read once: some arguments are buffers of the state (EoMT's masking).
    state, path = shards.read_state(directory)
    encoder_class, encoder_args, task_args = family.arguments(config, state)
    processor = os.path.join(directory, "preprocessor_config.json")
    if os.path.isfile(processor):
        task_args["preprocessing"] = family.preprocessing(read_json(processor)).get_config()

    def read(model):
        return family.read(state, config, path)

    return TaskSource("transformers", directory, family.TASK, encoder_class, encoder_args, task_args, read)


def _keras_hub_source(directory):
    family = families.keras_hub_task_family(directory)
    encoder_class, encoder_args, task_args = family.arguments(directory)

    def read(model):
        return family.read(directory, encoder_args["num_heads"])

    return TaskSource("keras_hub", directory, family.TASK, encoder_class, encoder_args, task_args, read)


def task_source(directory, layout):
    """The `TaskSource` of a task preset directory of `layout`."""
    if layout == "transformers":
        return _transformers_source(directory)
    if layout == "keras_hub":
        return _keras_hub_source(directory)
    config = _config(directory)
    args = dict(config["config"])
    encoder = args.pop("encoder")
    return TaskSource("keras_vit", directory, config["class_name"], encoder["class_name"],
                      dict(encoder["config"]), args, None)


def _check_overrides(row, overrides):
    unknown = sorted(set(overrides) - set(row.overrides))
    if unknown:
        raise ValueError(
            f"`from_preset` cannot change {unknown} of a {row.task_class}: the checkpoint fixes them. It "
            f"accepts {list(row.overrides)} for one. Received: {', '.join(unknown)}"
        )


def build_task(source, **overrides):
    """The task model a `TaskSource` describes, with its weights loaded.

    Args:
        source: a `TaskSource`.
        **overrides: `DENSE_OVERRIDES`: `image_size` (the encoder's; its
            position embedding is resized on loading), `dtype`, `name`,
            and for a `Segmenter` `classes` with `class_names` (a new,
            randomly initialised class predictor, for fine-tuning).

    Returns:
        A `DepthEstimator` or `Segmenter`.
    """
    _check_overrides(TaskPreset(source.task_class, DENSE_OVERRIDES), overrides)
    encoder_args = dict(source.encoder_arguments)
    task_args = dict(source.task_arguments)
    if "image_size" in overrides:
        encoder_args["image_size"] = overrides["image_size"]
        encoder_args.pop("input_shape", None)
    if "dtype" in overrides:
        encoder_args["dtype"] = task_args["dtype"] = overrides["dtype"]
    if "name" in overrides:
        task_args["name"] = overrides["name"]
    new_classes = "classes" in overrides or "class_names" in overrides
    if new_classes:
        if source.task_class != "Segmenter":
            raise ValueError("`classes` and `class_names` change a Segmenter's classes; this is a depth model.")
        task_args.update(task_class("Segmenter").new_class_arguments(overrides.get("classes"), overrides.get("class_names")))
    encoder = ENCODER_CLASSES[source.encoder_class].from_config(encoder_args)
    model = task_class(source.task_class)(encoder=encoder, **task_args)
    if source.layout == "keras_vit":
        path = os.path.join(source.directory, KERAS_WEIGHTS)
        if new_classes or "image_size" in overrides:
            _load_keras_vit_into(model, source, path, new_classes)
        else:
            model.load_weights(path)
        return model
    _load(model, source.read(model), new_classes)
    return model


def _load_keras_vit_into(model, source, path, new_classes):
    """A keras_vit task preset loaded into a model with another image size
    or class predictor: the preset's own model reads its file, then the
    loader moves its weights over (resizing the position embedding)."""
    from keras_vit.weights.canonical import Checkpoint
    from keras_vit.weights.mapping import model_state

    own = build_task(source)
    _load(model, Checkpoint(path, "keras_vit", model_state(own), {}), new_classes)


def _load(model, checkpoint, new_classes):
    if new_classes:
        # The new class predictor keeps its initial values, on purpose.
        checkpoint = model.with_own_class_predictor(checkpoint)
    loader.load_checkpoint(model, checkpoint)


def task_class(name):
    """The task model class registered as `keras_vit>{name}`."""
    import keras

    return keras.saving.get_registered_object(f"keras_vit>{name}")


__all__ = ["TASK_PRESETS", "TaskPreset", "build_task", "load_task", "task_class", "task_preset", "task_source"]
