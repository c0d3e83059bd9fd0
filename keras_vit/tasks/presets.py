"""`keras_vit.from_preset`: task checkpoints to their task models, every
other checkpoint to an image model (`keras_vit.presets.from_preset`).

| directory | recognised by | model |
| --- | --- | --- |
| transformers `OwlViTForObjectDetection`, `Owlv2ForObjectDetection` | `model_type` "owlvit", "owlv2" | `OpenVocabularyDetector` |
| transformers `SamModel` | `model_type` "sam" | `PromptableSegmenter` |
| keras-hub `SAMBackbone` (`SAMImageSegmenter`) | `registered_name` "keras_hub>SAMBackbone" | `PromptableSegmenter` |
| anything else `keras_vit.presets` reads | | `keras_vit.ViT` (`ViTHybrid`) |
"""

import os

from keras_vit import presets
from keras_vit.tasks import detection, prompt_masks
from keras_vit.weights.files import read_json

# `{(layout, name): reader(directory, dtype)}`: the name is a transformers
# `model_type` or a keras-hub `registered_name`.
TASK_READERS = {
    ("transformers", "owlvit"): detection.read_transformers,
    ("transformers", "owlv2"): detection.read_transformers,
    ("transformers", "sam"): prompt_masks.read_transformers,
    ("keras_hub", "keras_hub>SAMBackbone"): prompt_masks.read_keras_hub,
}
# What a task model may be built with.
TASK_OVERRIDES = ("dtype",)


def task_reader(directory):
    """The reader of a task checkpoint directory, or None for an image model's.

    Example:

    >>> import json, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "config.json"), "w") as f:
    ...     json.dump({"model_type": "owlv2"}, f)
    >>> task_reader(folder).__module__
    'keras_vit.tasks.detection'
    """
    layout = presets.detect_layout(directory)
    config = read_json(os.path.join(directory, "config.json"))
    name = config.get("model_type") if layout == "transformers" else config.get("registered_name")
    return TASK_READERS.get((layout, name))


def from_preset(handle, **overrides):
    """A keras_vit model from a whole checkpoint: a task model for a task
    checkpoint (an OWL-ViT / OWLv2 detector, a SAM model), else the image
    model `keras_vit.presets.from_preset` builds (its docstring lists the
    layouts and overrides).

    Args:
        handle: a local directory, a short name (`keras_vit.list_presets()`:
            "dinov3_vits16", "siglip_b16_224", ...), `"hf://org/name[@revision]"` or
            `"kaggle://owner/model/framework/variation[/version]"`.
        **overrides: for an image model, `keras_vit.presets.OVERRIDES`; a
            task model takes `dtype` alone.

    Returns:
        An `OpenVocabularyDetector`, a `PromptableSegmenter` or a
        `keras_vit.ViT` (`ViTHybrid`).

    Raises:
        ValueError: unreadable or unknown layouts, overrides a task model
            cannot take, and strict-loading mismatches.
    """
    directory = presets.preset_directory(handle)
    reader = task_reader(directory)
    if reader is None:
        return presets.from_preset(directory, **overrides)
    unknown = sorted(set(overrides) - set(TASK_OVERRIDES))
    if unknown:
        raise ValueError(
            f"{handle!r} is a task checkpoint, whose model takes {list(TASK_OVERRIDES)} only. Received: "
            f"{', '.join(unknown)}"
        )
    return reader(directory, overrides.get("dtype"))
