"""keras-hub presets -> keras_vit, through the table of families.

Each backbone keras_vit builds is one `KerasHubFamily` subclass in the
family's module (`vit.KerasHubViT` for ViT and its image classifier,
`dinov2`, `dinov3`, `siglip`, `clip`; the protocol and the files every
preset shares in `keras_vit.weights.formats.keras_hub_family`). A preset is read by the family of its
backbone's `registered_name` (`KERAS_HUB_FAMILIES`); a new family is a
module with its subclass and one entry here.
"""

import os

from keras_vit.weights import canonical as C
from keras_vit.weights.formats import keras_hub_family
from keras_vit.weights.formats.registry import FamilyRegistry
from keras_vit.families.clip import KerasHubClip
from keras_vit.families.dinov2 import KerasHubDinov2
from keras_vit.families.dinov3 import KerasHubDinov3
from keras_vit.families.siglip import KerasHubSiglip
from keras_vit.families.vit import KerasHubViT

KERAS_HUB_FAMILIES = FamilyRegistry(
    "keras-hub preset",
    "registered_name",
    (KerasHubViT(), KerasHubDinov2(), KerasHubDinov3(), KerasHubSiglip(), KerasHubClip()),
    lambda family: family.REGISTERED,
    refused={"keras_hub>SAMBackbone": "a task checkpoint (SAM): keras_vit.from_preset builds its task model"},
)


def model_arguments(directory):
    """keras_vit `ViT` arguments for a keras-hub preset directory.

    Example:

    >>> import json, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "config.json"), "w") as f:
    ...     json.dump({"registered_name": "keras_hub>ViTBackbone", "config": {
    ...         "image_shape": [32, 32, 3], "patch_size": 8, "num_layers": 1, "num_heads": 2,
    ...         "hidden_dim": 16, "mlp_dim": 32}}, f)
    >>> model_arguments(folder)["include_top"]
    False
    """
    backbone = keras_hub_family.read_json(directory, "config.json")
    task = keras_hub_family.read_json(directory, "task.json")
    return KERAS_HUB_FAMILIES.find(backbone).model_arguments(backbone, task)


def preset_source(directory, variables=None):
    """A `PresetSource` for a keras-hub preset directory.

    `variables`: None, or the preset's variables already loaded
    (`keras_hub_family.read_variables`), which its `read` then uses rather
    than loading the preset again (a two-tower preset's text and image towers).
    """
    args = model_arguments(directory)
    prep = keras_hub_family.preprocessing(directory)
    if prep is not None:
        args["preprocessing"] = prep.get_config()
    else:
        keras_hub_family.warn_unknown_preprocessing(
            directory, "Give it before predicting on images: `model.preprocessing = "
            "keras_vit.preprocessing.Preprocessing.from_mode('imagenet', image_size=...)` (or the checkpoint's own mean and "
            "std), or `preprocessing=` to keras_vit.classify.")
    with_task = os.path.isfile(os.path.join(directory, "task.json"))
    backbone = keras_hub_family.read_json(directory, "config.json")
    family = KERAS_HUB_FAMILIES.find(backbone)

    def read_weights(model):
        loaded = keras_hub_family.read_variables(directory, with_task) if variables is None else variables
        path = os.path.join(directory, keras_hub_family.WEIGHTS_FILE)
        return family.read(loaded, backbone, args["num_heads"], path)

    return C.PresetSource("keras_hub", directory, "ViT", args, read_weights)
