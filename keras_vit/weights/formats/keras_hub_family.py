"""The base class of the keras-hub families, and what every keras-hub preset shares.

A keras-hub preset directory (`save_to_preset` of a keras-hub backbone or
task) holds:

- `config.json`: the serialised backbone (`registered_name`, e.g.
  "keras_hub>ViTBackbone", and its `config`), `model.weights.h5` and
  `metadata.json`;
- for a task also `task.json` and `task.weights.h5`;
- `preprocessor.json` / `image_converter.json`: `image_size`, `scale`,
  `offset` (`x * scale + offset` on [0, 255] pixels), `interpolation`,
  `crop_to_aspect_ratio`.

keras-hub reads its own files (`keras_hub.models.Backbone.from_preset`);
keras_vit renames the variables. Each backbone keras_vit builds is one
`KerasHubFamily` subclass (`keras_hub_vit`, `keras_hub_dinov2`,
`keras_hub_siglip`), registered in
`keras_vit.families.keras_hub_source.KERAS_HUB_FAMILIES`; it declares
`NAME`, `REGISTERED` (the backbones' `registered_name`s), `TASKS` (the
tasks on them it reads), `TABLE` (variable names -> canonical keys) and
`IGNORED` (variable names that are not weights of the image encoder), and
implements `encoder_arguments`.
"""

import abc
import os
import warnings

from keras_vit.weights import canonical as C
from keras_vit.weights.files import read_json as _read_json
from keras_vit.weights.record import Preprocessing
from keras_vit.weights.rules import RuleTable

WEIGHTS_FILE = "model.weights.h5"


def read_json(directory, name):
    """The JSON file `name` of `directory`, or None when there is none.

    Example:

    >>> import tempfile
    >>> read_json(tempfile.mkdtemp(), "task.json") is None
    True
    """
    path = os.path.join(directory, name)
    return _read_json(path) if os.path.isfile(path) else None


def input_shape(config):
    """`(height, width, channels)` of a backbone config's `image_shape`.

    Example:

    >>> input_shape({"image_shape": [3, 32, 32], "data_format": "channels_first"})
    (32, 32, 3)
    """
    shape = tuple(config["image_shape"])
    if config.get("data_format") == "channels_first":
        shape = shape[1:] + shape[:1]
    return shape


def preprocessing(directory):
    """A `Preprocessing` record from the preset's image converter, or None.

    Example:

    >>> import tempfile
    >>> preprocessing(tempfile.mkdtemp()) is None
    True
    """
    converter = read_json(directory, "image_converter.json")
    if converter is None:
        preprocessor = read_json(directory, "preprocessor.json") or {}
        converter = preprocessor.get("config", {}).get("image_converter")
    if not converter:
        return None
    config = converter["config"]
    # x * scale + offset == (x / 255 - mean) / std
    scale = config.get("scale")
    offset = config.get("offset")
    scales = scale if isinstance(scale, (list, tuple)) else [1.0 if scale is None else scale]
    offsets = offset if isinstance(offset, (list, tuple)) else [0.0 if offset is None else offset]
    if len(scales) != len(offsets):
        scales, offsets = scales * len(offsets), offsets * len(scales)
    std = [1.0 / (255.0 * s) for s in scales]
    mean = [-o * d for o, d in zip(offsets, std)]
    size = config.get("image_size")
    size = tuple(size) if size else None
    square = size is not None and size[0] == size[1]
    interpolation = str(config.get("interpolation", "bilinear"))
    return Preprocessing(
        mean=mean,
        std=std,
        image_size=size,
        # Cropping the centre to the aspect ratio, then resizing, equals a
        # shorter-side resize and a centre crop.
        resize=size[0] if square and config.get("crop_to_aspect_ratio", True) else None,
        interpolation="lanczos" if interpolation.startswith("lanczos") else interpolation,
    )


def warn_unknown_preprocessing(directory, how):
    """Warns that a preset without an image converter (a backbone saved with
    `backbone.save_to_preset`) loads with no preprocessing record; `how`
    says how to give one."""
    warnings.warn(
        f"The keras-hub preset {directory!r} has no image converter (no image_converter.json or "
        "preprocessor.json: `backbone.save_to_preset` writes none), so its preprocessing is unknown and the "
        f"model carries no preprocessing record. {how} Saving the preset from its keras-hub task "
        "(`task.save_to_preset`) writes the converter.",
        UserWarning,
        stacklevel=3,
    )


def read_variables(directory, with_task):
    """`{variable path: NumPy array}` of a preset, loaded by keras-hub itself."""
    try:
        import keras_hub
    except ImportError:
        raise ImportError(
            f"Reading the keras-hub preset {directory!r} needs keras-hub "
            "(`pip install keras-hub`)."
        ) from None
    import keras

    loader = keras_hub.models.ImageClassifier if with_task else keras_hub.models.Backbone
    model = loader.from_preset(directory)
    return {variable.path: keras.ops.convert_to_numpy(variable) for variable in model.weights}


class KerasHubFamily(abc.ABC):
    """One keras-hub backbone family, read into keras_vit.

    Subclasses fill in the class attributes (see the module docstring) and
    implement `encoder_arguments`.

    Example:

    >>> from keras_vit.families.dinov2 import KerasHubDinov2
    >>> family = KerasHubDinov2()
    >>> family.variable_prefixes({"config": {"name": "dinov2"}})
    {'dinov2_': None}
    """

    NAME = "preset"
    REGISTERED = ()
    TASKS = ()
    TABLE = RuleTable(())
    IGNORED = {}

    def unsupported(self, message):
        """The error of a preset keras_vit cannot build."""
        return ValueError(f"Cannot build this keras-hub {self.NAME}: {message}")

    # An image-text family's vision encoder `registered_name`: its presets
    # are that encoder alone or a backbone holding it as `vision_encoder`.
    VISION = None

    def encoder_config(self, backbone):
        """The image encoder's `config` dict in a preset's `config.json` dict:
        the preset's own, or its backbone's `vision_encoder`'s."""
        if self.VISION is None or backbone.get("registered_name") == self.VISION:
            return backbone["config"]
        vision = backbone.get("config", {}).get("vision_encoder") or {}
        if vision.get("registered_name") != self.VISION:
            raise self.unsupported(
                f"its vision_encoder must be a {self.VISION}. Received: "
                f"registered_name={vision.get('registered_name')!r}"
            )
        return vision["config"]

    def mlp_activation(self, config, default, activations):
        """keras_vit's `mlp_activation` for a config's `intermediate_activation`
        (`default` when unset), through `{keras-hub name: keras_vit name}`.

        Example:

        >>> from keras_vit.families.dinov2 import KerasHubDinov2
        >>> KerasHubDinov2().mlp_activation({}, "gelu", {"gelu": "gelu"})
        'gelu'
        """
        activation = config.get("intermediate_activation", default)
        if activation not in activations:
            raise self.unsupported(
                f"`intermediate_activation` must be one of {sorted(activations)}. "
                f"Received: intermediate_activation={activation!r}"
            )
        return activations[activation]

    @staticmethod
    def backbone_arguments(config, shape):
        """The arguments every keras-hub backbone names alike: its input
        shape, patch size, width, depth and heads; no head.

        Example:

        >>> KerasHubFamily.backbone_arguments({"patch_size": [8, 8], "hidden_dim": 16,
        ...     "num_layers": 2, "num_heads": 2}, (32, 32, 3))["patch_size"]
        (8, 8)
        """
        patch = config["patch_size"]
        return dict(
            input_shape=tuple(shape),
            patch_size=tuple(patch) if isinstance(patch, (list, tuple)) else int(patch),
            hidden_size=config["hidden_dim"],
            num_layers=config["num_layers"],
            num_heads=config["num_heads"],
            include_top=False,
        )

    @abc.abstractmethod
    def encoder_arguments(self, config, shape):
        """keras_vit `ViT` arguments for the image encoder's `config`, whose
        input is `shape` (height, width, channels)."""

    def task_arguments(self, task, args):
        """The arguments a task's `config` (`task.json["config"]`) changes,
        on a backbone of `args`."""
        return {}

    def model_arguments(self, backbone, task=None):
        """keras_vit `ViT` arguments for a preset's `config.json` dict and its
        `task.json` dict (None: a backbone alone).

        Raises:
            ValueError: for a task the family does not read, or an encoder
                keras_vit cannot build.
        """
        if task is not None and task.get("registered_name") not in self.TASKS:
            received = f"registered_name={task.get('registered_name')!r}"
            if not self.TASKS:
                raise self.unsupported(
                    f"keras_vit reads the {backbone.get('registered_name')} backbone alone, not a task "
                    f"on it. Received: task.json with {received}"
                )
            raise self.unsupported(f"task.json must describe one of {self.TASKS}. Received: {received}")
        config = self.encoder_config(backbone)
        args = self.encoder_arguments(config, input_shape(config))
        if task is not None:
            args.update(self.task_arguments(task["config"], args))
        return args

    def variable_prefixes(self, backbone):
        """`{prefix: None for the image encoder, else why it is ignored}` of
        the variables of a preset: keras-hub names a model's layers
        `<name>_...` once it has read the preset."""
        name = self.encoder_config(backbone).get("name")
        return {f"{name}_" if name else "": None}

    def table(self, backbone):
        """The `RuleTable` of a preset's `config.json` dict: `TABLE`, unless
        the family's variable names depend on the config."""
        return self.TABLE

    def source_name(self, name):
        """A variable's name (after its prefix) in `TABLE`."""
        return name

    def read(self, variables, backbone, num_heads, path):
        """A preset's variables as a `Checkpoint`: the image encoder's in the
        canonical layout (with any variable no rule knows under its own
        name, for the loader to report), the rest ignored, each with why."""
        prefixes = sorted(self.variable_prefixes(backbone).items(), key=lambda item: -len(item[0]))
        state, ignored = {}, {}
        for variable, array in variables.items():
            prefix, reason = next(((p, r) for p, r in prefixes if variable.startswith(p)), (None, None))
            name = variable if prefix is None else self.source_name(variable[len(prefix):])
            if reason is not None:
                ignored[variable] = reason
            elif name in self.IGNORED:
                ignored[variable] = self.IGNORED[name]
            else:
                state[name] = array
        params, unknown = self.table(backbone).to_canonical(state, num_heads)
        params.update({k: state[k] for k in unknown})
        return C.Checkpoint(path, "keras_hub", params, ignored)
