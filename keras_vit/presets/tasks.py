"""Task presets in: a transformers, keras-hub or keras_vit directory that
holds a task model (depth, segmentation), built and loaded.

`keras_vit.from_preset` hands a directory here when its files describe a
task model (`is_task_preset`): the family of the checkpoint
(`keras_vit.families`) says what encoder and head it holds and reads the
weights; the encoder (`ViT` or `ViTHybrid`) is built from its arguments,
the task model around it, and everything is loaded by the one strict loader
(`keras_vit.weights.loader`).
"""

import os

from keras_vit.families import task_source as families
from keras_vit.models import ViT, ViTHybrid
from keras_vit.weights import loader, shards
from keras_vit.weights.files import read_json
from keras_vit.weights.formats.task_family import TaskSource

# The task models by name. The classes are Keras' registered ones, not
# imported here: the task modules' one-call functions resolve handles
# through `keras_vit.presets`, which reads task presets through this module
# (importing `keras_vit` registers them).
TASK_CLASSES = ("DepthEstimator", "Segmenter")
ENCODER_CLASSES = {"ViT": ViT, "ViTHybrid": ViTHybrid}
# What `from_preset` may change about a task checkpoint's model.
TASK_OVERRIDES = ("image_size", "dtype", "name", "classes", "class_names")
KERAS_WEIGHTS = "model.weights.h5"


def _config(directory):
    path = os.path.join(directory, "config.json")
    return read_json(path) if os.path.isfile(path) else {}


def is_task_preset(directory, layout):
    """Whether a preset directory of `layout` holds a task model."""
    config = _config(directory)
    if layout == "transformers":
        return families.task_family(config) is not None
    if layout == "keras_vit":
        return config.get("class_name") in TASK_CLASSES
    if layout == "keras_hub":
        return families.keras_hub_task_family(directory) is not None
    return False


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


def _check_overrides(overrides):
    unknown = sorted(set(overrides) - set(TASK_OVERRIDES))
    if unknown:
        raise ValueError(
            f"`from_preset` cannot change {unknown} of a task model: the checkpoint fixes them. It "
            f"accepts {list(TASK_OVERRIDES)} for one. Received: {', '.join(unknown)}"
        )


def build_task(source, **overrides):
    """The task model a `TaskSource` describes, with its weights loaded.

    Args:
        source: a `TaskSource`.
        **overrides: `TASK_OVERRIDES`: `image_size` (the encoder's; its
            position embedding is resized on loading), `dtype`, `name`,
            and for a `Segmenter` `classes` with `class_names` (a new,
            randomly initialised class predictor, for fine-tuning).

    Returns:
        A `DepthEstimator` or `Segmenter`.
    """
    _check_overrides(overrides)
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


__all__ = ["TASK_CLASSES", "TASK_OVERRIDES", "build_task", "is_task_preset", "task_class", "task_source"]
