"""keras-hub ViT presets <-> the canonical layout.

A keras-hub preset directory (`save_to_preset` of `keras_hub.models.ViTBackbone`
or `ViTImageClassifier`) holds:

- `config.json`: the serialised backbone (`registered_name`
  "keras_hub>ViTBackbone"; `image_shape`, `patch_size`, `num_layers`,
  `num_heads`, `hidden_dim`, `mlp_dim`, `layer_norm_epsilon`,
  `use_class_token`, `use_mha_bias`, `use_mlp_bias`, `use_patch_bias`),
  `model.weights.h5` and `metadata.json`;
- for a classifier also `task.json` ("keras_hub>ViTImageClassifier":
  `num_classes`, `pooling` "token"/"gap", `intermediate_dim` (a Dense+tanh
  pre-logits layer), `activation`) and `task.weights.h5`;
- `preprocessor.json` / `image_converter.json`: `image_size`, `scale`,
  `offset` (`x * scale + offset` on [0, 255] pixels), `interpolation`,
  `crop_to_aspect_ratio`.

keras-hub reads its own files (`keras_hub.models.Backbone.from_preset`); this
module renames the variables. keras-hub's kernels already have keras_vit's
layouts (`(D, heads, head_dim)` attention, HWIO patch convolution); its MLP
uses Keras' "gelu" activation, the exact erf GELU.

The DINOv2 and SigLIP families have their own tables
(`keras_hub_dinov2`, `keras_hub_siglip`), chosen here by the backbone's
`registered_name`; the image converter and the reading are shared.
"""

import os

from keras_vit.weights import canonical as C
from keras_vit.weights.files import read_json as _read_json
from keras_vit.weights.formats import keras_hub_dinov2, keras_hub_siglip
from keras_vit.weights.record import Preprocessing
from keras_vit.weights.rules import RuleTable

_BLOCK = "vit_encoder/transformer_block_{i}/"
_EMBED = "vit_patching_and_embedding/"

RULES = (
    (_EMBED + "class_token", C.CLS),
    (_EMBED + "patch_embedding/kernel", C.EMBEDDING + "kernel"),
    (_EMBED + "patch_embedding/bias", C.EMBEDDING + "bias"),
    (_EMBED + "position_embedding/embeddings", C.POSEMB, "batch"),
    (_BLOCK + "ln_1/gamma", C.NORM_1 + "scale"),
    (_BLOCK + "ln_1/beta", C.NORM_1 + "bias"),
    *(
        (_BLOCK + f"mha/{source}/{leaf}", C.ATTENTION + f"{name}/{leaf}")
        for source, name in (("query", "query"), ("key", "key"), ("value", "value"),
                             ("attention_output", "out"))
        for leaf in ("kernel", "bias")
    ),
    (_BLOCK + "ln_2/gamma", C.NORM_2 + "scale"),
    (_BLOCK + "ln_2/beta", C.NORM_2 + "bias"),
    (_BLOCK + "mlp/dense_1/kernel", C.MLP_IN + "kernel"),
    (_BLOCK + "mlp/dense_1/bias", C.MLP_IN + "bias"),
    (_BLOCK + "mlp/dense_2/kernel", C.MLP_OUT + "kernel"),
    (_BLOCK + "mlp/dense_2/bias", C.MLP_OUT + "bias"),
    ("vit_encoder/ln/gamma", C.ENCODER_NORM + "scale"),
    ("vit_encoder/ln/beta", C.ENCODER_NORM + "bias"),
    ("pre_logits/kernel", C.PRE_LOGITS + "kernel"),
    ("pre_logits/bias", C.PRE_LOGITS + "bias"),
    ("predictions/kernel", C.HEAD + "kernel"),
    ("predictions/bias", C.HEAD + "bias"),
)
# keras-hub numbers its blocks from 1.
TABLE = RuleTable(RULES, index_offset=1)
_ROOTS = (_EMBED, "vit_encoder/")
WEIGHTS_FILE = "model.weights.h5"


def read_json(directory, name):
    """The JSON file `name` of `directory`, or None when there is none.

    Example:

    >>> import json, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "config.json"), "w") as f:
    ...     json.dump({"registered_name": "keras_hub>ViTBackbone"}, f)
    >>> read_json(folder, "config.json")["registered_name"], read_json(folder, "absent.json")
    ('keras_hub>ViTBackbone', None)
    """
    path = os.path.join(directory, name)
    return _read_json(path) if os.path.isfile(path) else None


def _unsupported(message):
    return ValueError(f"Cannot build this keras-hub preset: {message}")


# The families beside ViT, each a module with `REGISTERED`, `TABLE`,
# `IGNORED`, `encoder_config`, `model_arguments`, `variable_prefixes` and
# `source_name`.
FAMILIES = {name: family for family in (keras_hub_dinov2, keras_hub_siglip) for name in family.REGISTERED}
VIT = "keras_hub>ViTBackbone"
# Backbones keras-hub ships that keras_vit cannot build, and why.
REFUSED = {"keras_hub>DINOV3Backbone": "DINOv3 adds rotary position embeddings (RoPE), which keras_vit has not"}


def _input_shape(config):
    shape = tuple(config["image_shape"])
    if config.get("data_format") == "channels_first":
        shape = shape[1:] + shape[:1]
    return shape


def model_arguments(directory):
    """keras_vit `ViT` arguments for a keras-hub preset directory."""
    backbone = read_json(directory, "config.json")
    registered = backbone.get("registered_name")
    family = FAMILIES.get(registered)
    if family is None and registered != VIT:
        why = f" ({REFUSED[registered]})" if registered in REFUSED else ""
        raise _unsupported(
            f"config.json must describe one of {[VIT, *FAMILIES]}{why}. Received: "
            f"registered_name={registered!r}"
        )
    task = read_json(directory, "task.json")
    if family is not None:
        if task is not None:
            raise _unsupported(
                f"keras_vit reads the {registered} backbone alone, not a task on it. "
                f"Received: task.json with registered_name={task.get('registered_name')!r}"
            )
        config = family.encoder_config(backbone)
        return family.model_arguments(config, _input_shape(config))
    config = backbone["config"]
    for flag in ("use_mha_bias", "use_mlp_bias"):
        if not config.get(flag, True):
            raise _unsupported(f"keras_vit layers always have these biases. Received: {flag}=False")
    args = dict(
        input_shape=_input_shape(config),
        patch_size=tuple(config["patch_size"]) if isinstance(config["patch_size"], list) else config["patch_size"],
        hidden_size=config["hidden_dim"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        mlp_dim=config["mlp_dim"],
        layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-6),
        mlp_activation="gelu",
        classifier="token" if config.get("use_class_token", True) else "gap",
        dropout_rate=config.get("dropout_rate", 0.0),
        attention_dropout_rate=config.get("attention_dropout", 0.0),
        include_top=False,
        patch_bias=bool(config.get("use_patch_bias", True)),
    )
    if task is not None:
        args.update(_task_arguments(task, args["classifier"]))
    return args


def _task_arguments(task, classifier):
    if task.get("registered_name") != "keras_hub>ViTImageClassifier":
        raise _unsupported(
            "task.json must describe a keras_hub>ViTImageClassifier. Received: "
            f"registered_name={task.get('registered_name')!r}"
        )
    config = task["config"]
    pooling = config.get("pooling", "token")
    if pooling == "gap" and classifier == "token":
        raise _unsupported(
            "pooling='gap' averages the class token with the patches, which "
            "no keras_vit classifier does."
        )
    if pooling not in ("token", "gap"):
        raise _unsupported(f"pooling must be 'token' or 'gap'. Received: pooling={pooling!r}")
    return dict(
        include_top=True,
        classes=config["num_classes"],
        representation_size=config.get("intermediate_dim"),
        classifier_activation=config.get("activation"),
    )


def preprocessing(directory):
    """A `Preprocessing` record from the preset's image converter, or None."""
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


def _vit_params(variables, num_heads):
    state = {}
    for path, array in variables.items():
        for root in _ROOTS:
            if root in path:
                path = path[path.index(root):]
        state[path] = array
    params, unknown = TABLE.to_canonical(state, num_heads)
    params.update({k: state[k] for k in unknown})
    return params, {}


def family_params(variables, family, backbone, num_heads):
    """`(params, ignored)` of a family's variables: the image encoder's in the
    canonical layout (with any variable no rule knows under its own name, for
    the loader to report), the rest `{path: why it is ignored}`."""
    prefixes = sorted(family.variable_prefixes(backbone).items(), key=lambda item: -len(item[0]))
    state, ignored = {}, {}
    for path, array in variables.items():
        prefix, reason = next(((p, r) for p, r in prefixes if path.startswith(p)), (None, None))
        name = path if prefix is None else family.source_name(path[len(prefix):])
        if reason is not None:
            ignored[path] = reason
        elif name in family.IGNORED:
            ignored[path] = family.IGNORED[name]
        else:
            state[name] = array
    params, unknown = family.TABLE.to_canonical(state, num_heads)
    params.update({k: state[k] for k in unknown})
    return params, ignored


def preset_source(directory):
    """A `PresetSource` for a keras-hub ViT, DINOv2 or SigLIP preset directory."""
    args = model_arguments(directory)
    prep = preprocessing(directory)
    if prep is not None:
        args["preprocessing"] = prep.get_config()
    with_task = os.path.isfile(os.path.join(directory, "task.json"))
    backbone = read_json(directory, "config.json")
    family = FAMILIES.get(backbone.get("registered_name"))

    def read_weights(model):
        variables = read_variables(directory, with_task)
        if family is None:
            params, ignored = _vit_params(variables, args["num_heads"])
        else:
            params, ignored = family_params(variables, family, backbone, args["num_heads"])
        return C.Checkpoint(os.path.join(directory, WEIGHTS_FILE), "keras_hub", params, ignored)

    return C.PresetSource("keras_hub", directory, "ViT", args, read_weights)
