"""Checkpoints that hold a task model (encoder and head): the table of
their families (`TASK_FAMILIES`, found by a transformers `config.json`'s
`model_type`) and how a directory of one is read or written.

The families' modules (`dpt`, `eomt`) hold their transformers (and
keras-hub) tables, on `keras_vit.weights.formats.task_family`.
"""

from keras_vit.families.chmv2 import TransformersChmv2
from keras_vit.families.dpt import TRANSFORMERS_DPT_FAMILIES
from keras_vit.families.eomt import TRANSFORMERS_EOMT_FAMILIES
from keras_vit.weights.formats.registry import FamilyRegistry

TASK_FAMILIES = FamilyRegistry(
    "transformers task checkpoint",
    "model_type",
    TRANSFORMERS_DPT_FAMILIES + (TransformersChmv2(),) + TRANSFORMERS_EOMT_FAMILIES,
    lambda family: family.MODEL_TYPES,
)


def task_family(config):
    """The task family of a transformers `config.json` dict, or None for
    a model of another kind (an encoder or classifier)."""
    if config.get("model_type") in {t for f in TASK_FAMILIES for t in f.MODEL_TYPES}:
        return TASK_FAMILIES.find(config)
    return None


def keras_hub_task_family(directory):
    """The keras-hub task family of a preset directory, or None."""
    from keras_vit.families.dpt import keras_hub_family

    return keras_hub_family(directory)


def save_task_preset(model, directory, format="keras_vit"):
    """Writes a task model as a preset directory (`DepthEstimator.save_to_preset`).

    "keras_vit": Keras' serialisation of the model (`config.json`), its
    weights (`model.weights.h5`) and `metadata.json`, as a keras_vit
    `ViT` preset; "transformers": the family's transformers class, refused
    before anything is written where none holds the model.
    """
    import os

    from keras_vit.families import writers

    writers._check_format(format)
    if format == "transformers":
        family = transformers_writer(model)
        family.check_export(model)  # refuse before writing
        os.makedirs(directory, exist_ok=True)
        family.write(model, directory)
        return
    os.makedirs(directory, exist_ok=True)
    writers._save_keras_vit(model, directory, {})


def transformers_writer(model):
    """The task family that writes `model` as a transformers directory."""
    for family in TASK_FAMILIES:
        if family.writes(model):
            return family
    raise ValueError(
        f"transformers has no class that holds this {type(model).__name__} (style, head or encoder); "
        "save it with format='keras_vit'."
    )
