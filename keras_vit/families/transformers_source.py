"""transformers directories <-> keras_vit, through the table of families.

Each family of transformers ViTs is one `TransformersFamily` subclass in the
family's module (`vit.TransformersViT` for ViT/DeiT, `dinov2`, `dinov3`,
`aimv2`, `clip`, `siglip` (SigLIP and SigLIP 2), `vit_mae`; the protocol in
`keras_vit.weights.formats.transformers_family`). This module holds the
table, `TRANSFORMERS_FAMILIES`: a directory is read by the
family of its `model_type`, and a model is written by the first family that
recognises its shape, the most particular first: DINOv3's rotary
embedding, AIMv2's patch norm, DINOv2's LayerScale, then
SigLIP2's resize before SigLIP's MAP head, which with a fixed sin-cos table
(MAE) goes before a norm ahead of the blocks (CLIP); ViT/DeiT takes every
other model or refuses it. A new family is a module with its subclass and
one entry here.

A directory holds `config.json`, `model.safetensors` (or sharded or
PyTorch files, `keras_vit.weights.shards`) and `preprocessor_config.json`
(`keras_vit.weights.formats.transformers_processor`).
"""

import os

import numpy as np

from keras_vit.weights import canonical as C
from keras_vit.weights import shards
from keras_vit.weights.files import read_json, write_json
from keras_vit.weights.formats.registry import FamilyRegistry
from keras_vit.families.aimv2 import TransformersAimv2
from keras_vit.families.clip import TransformersClip
from keras_vit.families.dinov2 import TransformersDinov2
from keras_vit.families.dinov3 import TransformersDinov3
from keras_vit.weights.formats.transformers_family import refuse
from keras_vit.families.siglip import TransformersSiglip, TransformersSiglip2
from keras_vit.families.vit import TransformersViT
from keras_vit.families.videomae import TransformersVideoMAE
from keras_vit.families.vit_mae import TransformersViTMAE
from keras_vit.families.vivit import TransformersVivit

# In the order a model is offered to them for writing.
TRANSFORMERS_FAMILIES = FamilyRegistry(
    "transformers checkpoint",
    "model_type",
    (TransformersDinov3(), TransformersAimv2(), TransformersDinov2(), TransformersSiglip2(), TransformersSiglip(),
     TransformersViTMAE(), TransformersClip(), TransformersVideoMAE(), TransformersVivit(),
     TransformersViT()),
    lambda family: family.MODEL_TYPES,
    refused={
        "vit-hybrid": "transformers' ViT-hybrid (BiT backbone) layout is not one keras_vit reads; "
        "the R50 hybrids load from the official .npz files",
        **{kind: "a task checkpoint: keras_vit.from_preset builds its task model" for kind in ("owlvit", "owlv2", "sam")},
    },
)


def model_arguments(config):
    """keras_vit `ViT` arguments for a transformers `config.json` dict.

    Raises:
        ValueError: for a model type, architecture, activation or head
            layout keras_vit cannot build.

    Example:

    >>> args = model_arguments({"model_type": "vit", "architectures": ["ViTForImageClassification"],
    ...     "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
    ...     "intermediate_size": 32, "id2label": {"0": "cat", "1": "dog"}})
    >>> args["classes"], args["class_names"], args["patch_size"]
    (2, ['cat', 'dog'], (16, 16))
    """
    return TRANSFORMERS_FAMILIES.find(config).model_arguments(config)


def read(state, config, path):
    """A transformers state dict as a `Checkpoint` (`TransformersFamily.read`)."""
    return TRANSFORMERS_FAMILIES.find(config).read(state, config, path)


def preset_source(directory, state=None):
    """A `PresetSource` for a transformers directory.

    `state`: None, or the directory's `(state dict, path)` already read
    (`shards.read_state`), which its `read` then uses rather than reading
    the files again (a two-tower directory's text and image towers).
    """
    config = read_json(os.path.join(directory, "config.json"))
    family = TRANSFORMERS_FAMILIES.find(config)
    args = family.model_arguments(config)
    prep_path = os.path.join(directory, "preprocessor_config.json")
    if os.path.isfile(prep_path):
        args["preprocessing"] = family.preprocessing(read_json(prep_path), args).get_config()

    def read_weights(model):
        tensors, path = shards.read_state(directory) if state is None else state
        return family.read(tensors, config, path)

    return C.PresetSource("transformers", directory, "ViT", args, read_weights)


def export_family(config):
    """`(family, class)` a flat keras_vit model config is written as: the
    first family that recognises it, its options checked.

    Args:
        config: a flat model config (its option records' fields as top-level keys).

    Raises:
        ValueError: for a model transformers cannot represent.

    Example:

    >>> family, hf_class = export_family({"pre_norm": True, "patch_bias": False, "pooled_norm": True,
    ...                                   "include_top": False, "pooling": "token"})
    >>> family.NAME, hf_class
    ('CLIP vision model', 'CLIPVisionModel')
    """
    if config.get("projection_dim") is not None or config.get("l2_normalize", False):
        raise refuse(
            "an embedding head (projection_dim, l2_normalize: a zero-shot classifier of an "
            "image-text model); save it with format='keras_vit'"
        )
    if config.get("num_frames") is not None:
        raise refuse(
            f"a video model (num_frames={config['num_frames']}): keras_vit reads VideoMAE and ViViT directories but "
            "writes none; save it with format='keras_vit'"
        )
    for family in TRANSFORMERS_FAMILIES:
        hf_class = family.export_class(config)
        if hf_class is not None:
            family.refuse_options(config, hf_class)
            return family, hf_class
    raise AssertionError("the ViT/DeiT family writes every model it does not refuse")


def export_class(config):
    """The transformers class a flat keras_vit model config is written as.

    Raises:
        ValueError: for a model transformers cannot represent.

    Example:

    >>> export_class({"distillation_token": True, "distillation_head": False})
    'DeiTForImageClassification'
    """
    return export_family(config)[1]


def names_classes(config):
    """Whether the transformers model written for a flat model config has
    classes to name (`id2label`): a classifier's head has, a backbone or an
    embedding projection has none."""
    family, hf_class = export_family(config)
    return family.names_classes(hf_class)


def write(directory, config, params, class_names, preprocessing_record, max_shard_size=None):
    """Writes a transformers directory: `config.json`, `model.safetensors`,
    `preprocessor_config.json`.

    Args:
        directory: an existing folder.
        config: the keras_vit model's flat config (record fields as top-level keys).
        params: its weights in the canonical layout (`mapping.model_state`).
        class_names: one name per class, in head order (None for a
            model without a head).
        preprocessing_record: a `Preprocessing` record.
        max_shard_size: None (one `model.safetensors`) or the largest shard
            (`keras_vit.weights.shards.write_state`).

    Raises:
        ValueError: for a model transformers cannot represent, before
            anything is written.
    """
    from keras_vit.weights.shards import write_state

    family, hf_class = export_family(config)
    hf_config = family.export_config(config, hf_class, class_names)
    state = family.export_state(params, hf_class, config)
    preprocessor = family.export_preprocessor(preprocessing_record, config)
    state = {k: np.asarray(v, "float32") for k, v in state.items()}
    write_state(directory, state, max_shard_size)
    write_json(os.path.join(directory, "config.json"), hf_config)
    write_json(os.path.join(directory, "preprocessor_config.json"), preprocessor)
