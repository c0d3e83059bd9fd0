"""Presets: whole checkpoints in, and keras_vit, transformers or timm directories out.

- `keras_vit.presets.loading`: `from_preset` and `describe_preset` (the
  layout of a directory, `hf://` or `kaggle://` handle, and the model it
  describes);
- `keras_vit.presets.image_text`: the two-tower directories of
  `keras_vit.ImageTextModel`;
- `keras_vit.presets.catalogue`: every checkpoint keras_vit loads, by name
  (`list_presets`, `get_preset`, `PRESETS`; the rows generated into
  `keras_vit.presets.catalogue_data`);
- `keras_vit.presets.named`: keras_vit's short names of the families'
  published checkpoints (`NAMED_PRESETS`);
- `keras_vit.presets.tasks`: the directories of task models (depth,
  segmentation: transformers', keras-hub's, keras_vit's);
- `keras_vit.presets.resolver`: `load_model`, a model from whatever names one
  (a constructor, a checkpoint file, a `.keras` file, a preset).
"""

from keras_vit.presets.loading import (
    HANDLE_SCHEMES,
    KERAS_WEIGHTS,
    LAYOUTS,
    OVERRIDES,
    PRESET_FORMATS,
    PresetDownloadError,
    describe_preset,
    detect_layout,
    from_preset,
    preset_directory,
    save_to_preset,
)
from keras_vit.presets.catalogue import PRESETS, Preset, get_preset, list_presets
from keras_vit.presets.named import NAMED_PRESETS, NamedPreset, get_named_preset
from keras_vit.presets.resolver import load_model
