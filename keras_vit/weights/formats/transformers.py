"""transformers ViT and DeiT directories <-> the canonical layout, read and written.

The other ViT families (DINOv2, CLIP, SigLIP, SigLIP2, ViTMAE) are one module each
beside this one (`transformers_*.py`), read by `model_type` (`FAMILIES`) and
written by the first that recognises a model's shape (`EXPORT_FAMILIES`);
this module dispatches to them and writes the files.

Facts about the files (`save_pretrained` of transformers 4 and 5 writes the
first naming; transformers 5 names the modules the second way in memory and
renames on load, so both are read):

- `config.json`: `model_type` "vit" or "deit"; `architectures`; `image_size`,
  `patch_size`, `num_channels`, `hidden_size`, `num_hidden_layers`,
  `num_attention_heads`, `intermediate_size`, `hidden_act` ("gelu" is the
  exact erf GELU; "gelu_new", "gelu_pytorch_tanh", ... the tanh one),
  `layer_norm_eps`, `qkv_bias`, `id2label`; DeiT models always have a
  distillation token (a second prefix token with its own position row).
- Tensors: PyTorch layouts: `Linear` weights `(out, in)`, the patch
  embedding an OIHW convolution; q, k, v and the attention output are
  separate `Linear`s; the body sits under `vit.`/`deit.` in the task models
  (`ViTForImageClassification`, `DeiTForImageClassification`,
  `DeiTForImageClassificationWithTeacher`) and at the root in the base
  models (`ViTModel`/`DeiTModel`, which add a tanh `pooler`: the pre-logits
  layer of the original ImageNet-21k files).
- `preprocessor_config.json`: `image_mean`/`image_std`, `do_rescale` with
  `rescale_factor`, `size` (`{"height", "width"}`, `{"shortest_edge"}` or an
  int, which the ViT/DeiT processors read as a square), optional centre crop
  (`do_center_crop`, `crop_size`) and `resample` (a PIL filter number).
"""

import os

import numpy as np

from keras_vit.layers.config import RECORDS
from keras_vit.weights import canonical as C
from keras_vit.weights import shards
from keras_vit.weights.files import read_json, write_json
from keras_vit.weights.formats import (
    transformers_clip,
    transformers_dinov2,
    transformers_siglip,
    transformers_siglip2,
    transformers_vit_mae,
)
from keras_vit.weights.formats.transformers_common import class_names
from keras_vit.weights.record import MODE_STATISTICS, Preprocessing
from keras_vit.weights.rules import RuleTable

# Body rules, relative to the `vit.`/`deit.` prefix. Rules for the same
# canonical key are listed with the name `save_pretrained` writes first:
# `from_canonical` uses the first.
_EMBEDDINGS = (
    ("embeddings.cls_token", C.CLS),
    ("embeddings.distillation_token", C.DIST),
    ("embeddings.position_embeddings", C.POSEMB),
    ("embeddings.patch_embeddings.projection.weight", C.EMBEDDING + "kernel", "conv"),
    ("embeddings.patch_embeddings.projection.bias", C.EMBEDDING + "bias"),
)


def _block_rules(layer, query, key, value, out, fc1, fc2):
    rules = [
        (f"{layer}.layernorm_before.weight", C.NORM_1 + "scale"),
        (f"{layer}.layernorm_before.bias", C.NORM_1 + "bias"),
        (f"{layer}.layernorm_after.weight", C.NORM_2 + "scale"),
        (f"{layer}.layernorm_after.bias", C.NORM_2 + "bias"),
        (f"{layer}.{out}.weight", C.ATTENTION + "out/kernel", "heads_out"),
        (f"{layer}.{out}.bias", C.ATTENTION + "out/bias"),
        (f"{layer}.{fc1}.weight", C.MLP_IN + "kernel", "linear"),
        (f"{layer}.{fc1}.bias", C.MLP_IN + "bias"),
        (f"{layer}.{fc2}.weight", C.MLP_OUT + "kernel", "linear"),
        (f"{layer}.{fc2}.bias", C.MLP_OUT + "bias"),
    ]
    for source, name in ((query, "query"), (key, "key"), (value, "value")):
        rules.append((f"{layer}.{source}.weight", C.ATTENTION + f"{name}/kernel", "heads_in"))
        rules.append((f"{layer}.{source}.bias", C.ATTENTION + f"{name}/bias", "heads_bias"))
    return rules


BODY = (
    _EMBEDDINGS
    + tuple(
        _block_rules(
            "encoder.layer.{i}",
            "attention.attention.query",
            "attention.attention.key",
            "attention.attention.value",
            "attention.output.dense",
            "intermediate.dense",
            "output.dense",
        )
    )
    + tuple(
        _block_rules(
            "layers.{i}", "attention.q_proj", "attention.k_proj", "attention.v_proj",
            "attention.o_proj", "mlp.fc1", "mlp.fc2",
        )
    )
    + (
        ("layernorm.weight", C.ENCODER_NORM + "scale"),
        ("layernorm.bias", C.ENCODER_NORM + "bias"),
        ("pooler.dense.weight", C.PRE_LOGITS + "kernel", "linear"),
        ("pooler.dense.bias", C.PRE_LOGITS + "bias"),
    )
)

# Classifier rules per task model, at the root of the state dict.
HEADS = {
    "classifier": (
        ("classifier.weight", C.HEAD + "kernel", "linear"),
        ("classifier.bias", C.HEAD + "bias"),
    ),
    "teacher": (
        ("cls_classifier.weight", C.HEAD + "kernel", "linear"),
        ("cls_classifier.bias", C.HEAD + "bias"),
        ("distillation_classifier.weight", C.HEAD_DIST + "kernel", "linear"),
        ("distillation_classifier.bias", C.HEAD_DIST + "bias"),
    ),
    None: (),
}

# architectures[0] -> (model_type, body prefix, head rules in HEADS)
ARCHITECTURES = {
    "ViTForImageClassification": ("vit", "vit.", "classifier"),
    "ViTModel": ("vit", "", None),
    "ViTForMaskedImageModeling": ("vit", "vit.", None),
    "DeiTForImageClassification": ("deit", "deit.", "classifier"),
    "DeiTForImageClassificationWithTeacher": ("deit", "deit.", "teacher"),
    "DeiTModel": ("deit", "", None),
    "DeiTForMaskedImageModeling": ("deit", "deit.", None),
}
# The other ViT families transformers holds, by `model_type`: each a module
# with `MODEL_TYPES`, `model_arguments(config)`, `table(state)` and `IGNORED`
# (and optionally `complete(params)`, for weights the format leaves implicit).
# Each is also written back: `export_architecture(config)` (the class of a
# model shaped like the family, else None), `EXPORTED_OPTIONS`,
# `export_config(config, architecture, class_names)`,
# `export_state(params, architecture)` (and
# optionally `export_fixed(config)`, for tensors transformers stores that
# keras_vit computes, `adjust_preprocessor(out, record, config)` and
# `read_preprocessor(file, record, args)`, for the family's own processor
# class). A model is written by the first that recognises it, the most
# particular first: SigLIP2's resize before SigLIP's MAP head, which with a
# fixed sin-cos table (MAE) goes before a norm ahead of the blocks (CLIP).
EXPORT_FAMILIES = (transformers_dinov2, transformers_siglip2, transformers_siglip, transformers_vit_mae,
                   transformers_clip)
FAMILIES = {t: family for family in EXPORT_FAMILIES for t in family.MODEL_TYPES}
# Entries that are not inference weights of the encoder/classifier.
IGNORED = {
    "embeddings.mask_token": "the mask token of masked-image-modelling pre-training",
    "decoder.": "the masked-image-modelling decoder",
}

# transformers `hidden_act` -> gelu_approximate. "gelu_fast" and
# "gelu_accurate" compute the same tanh formula with other constants' order.
ACTIVATIONS = {
    "gelu": False,
    "gelu_python": False,
    "gelu_new": True,
    "gelu_pytorch_tanh": True,
    "gelu_python_tanh": True,
    "gelu_fast": True,
    "gelu_accurate": True,
}
# The block and encoder options (`keras_vit.layers.config.RECORDS`) a
# transformers ViT/DeiT config holds, with the values it can hold (None: any).
# Every other option must keep its default to be written, so an option added
# to the records later is refused here until this table learns it.
EXPORTED_OPTIONS = {
    "layer_norm_epsilon": None,
    "mlp_activation": ("gelu_tanh", "gelu"),
    "qkv_bias": None,
    "dropout_rate": None,
    "attention_dropout_rate": None,
}
# PIL filter numbers of `resample`.
RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def table(prefix="", head=None):
    """The `RuleTable` of a task model: body under `prefix`, then its head."""
    return RuleTable(BODY).prefixed(prefix) + RuleTable(HEADS[head])


def split_state(state, architecture):
    """Splits a state dict into `(known part, ignored {key: reason})`."""
    _, prefix, _ = ARCHITECTURES[architecture]
    kept, ignored = {}, {}
    for key, value in state.items():
        rest = key[len(prefix):] if key.startswith(prefix) else key
        reason = next((r for p, r in IGNORED.items() if rest.startswith(p)), None)
        if reason:
            ignored[key] = reason
        else:
            kept[key] = value
    return kept, ignored


def _unsupported(message):
    return ValueError(f"Cannot build this transformers checkpoint: {message}")


def _architecture(config):
    model_type = config.get("model_type")
    if model_type not in ("vit", "deit"):
        known = ["vit", "deit", *FAMILIES]
        hint = (
            " transformers' ViT-hybrid (BiT backbone) layout is not one keras_vit reads; "
            "the R50 hybrids load from the official .npz files."
            if model_type == "vit-hybrid"
            else ""
        )
        raise _unsupported(
            f"`model_type` must be one of {known}. Received: model_type={model_type!r}.{hint}"
        )
    names = config.get("architectures") or [
        "ViTModel" if model_type == "vit" else "DeiTModel"
    ]
    architecture = names[0]
    if architecture not in ARCHITECTURES or ARCHITECTURES[architecture][0] != model_type:
        known = sorted(a for a, row in ARCHITECTURES.items() if row[0] == model_type)
        raise _unsupported(
            f"architecture {architecture!r} is not one of {known} (model_type={model_type!r})."
        )
    return architecture


def model_arguments(config):
    """keras_vit `ViT` arguments for a transformers `config.json` dict.

    Returns:
        `(arguments, architecture)`.

    Raises:
        ValueError: for a model type, architecture, activation or head
            layout keras_vit cannot build.

    Example:

    >>> args, architecture = model_arguments({
    ...     "model_type": "deit", "architectures": ["DeiTForImageClassificationWithTeacher"],
    ...     "hidden_size": 192, "num_hidden_layers": 12, "num_attention_heads": 3,
    ...     "intermediate_size": 768, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
    ...     "id2label": {"0": "cat", "1": "dog"}})
    >>> args["distillation_head"], args["gelu_approximate"], args["class_names"]
    (True, False, ['cat', 'dog'])
    """
    architecture = _architecture(config)
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise _unsupported(
            f"`hidden_act` must be one of {sorted(ACTIVATIONS)} (GELU flavours). "
            f"Received: hidden_act={act!r}"
        )
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    if config.get("head_dim") not in (None, hidden // heads):
        raise _unsupported(
            f"`head_dim` must be hidden_size / num_attention_heads = {hidden // heads}. "
            f"Received: head_dim={config['head_dim']!r}"
        )
    _, _, head = ARCHITECTURES[architecture]
    distilled = config["model_type"] == "deit"
    size = config.get("image_size", 224)
    size = tuple(size) if isinstance(size, (list, tuple)) else (size, size)
    args = dict(
        image_size=size,
        patch_size=config.get("patch_size", 16),
        hidden_size=hidden,
        num_layers=config["num_hidden_layers"],
        num_heads=heads,
        mlp_dim=config["intermediate_size"],
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
        gelu_approximate=ACTIVATIONS[act],
        qkv_bias=bool(config.get("qkv_bias", True)),
        dropout_rate=float(config.get("hidden_dropout_prob", 0.0)),
        attention_dropout_rate=float(config.get("attention_probs_dropout_prob", 0.0)),
        distillation_token=distilled,
        distillation_head=head == "teacher",
        include_top=head is not None,
        classifier_activation=None,
    )
    channels = config.get("num_channels", 3)
    if channels != 3:
        args["input_shape"] = size + (channels,)
    if head is not None:
        args["classes"] = len(config.get("id2label") or {}) or config.get("num_labels", 2)
        args["class_names"] = class_names(config)
    if isinstance(args["patch_size"], list):
        args["patch_size"] = tuple(args["patch_size"])
    return args, architecture


def _size_of(value):
    if isinstance(value, int):
        return (value, value)
    if isinstance(value, dict) and "height" in value and "width" in value:
        return (value["height"], value["width"])
    return None


def preprocessing(config):
    """A `Preprocessing` record from a `preprocessor_config.json` dict.

    Fields a file leaves out take the processor class's defaults (the DeiT
    processor: ImageNet statistics and a centre crop; the ViT one: 0.5 and
    no crop).

    Example:

    >>> record = preprocessing({"image_processor_type": "DeiTImageProcessor",
    ...     "size": {"height": 256, "width": 256}, "crop_size": 224, "resample": 3})
    >>> record.mode, record.image_size, record.resize, record.interpolation
    ('imagenet', (224, 224), (256, 256), 'bicubic')
    """
    kind = str(config.get("image_processor_type") or config.get("feature_extractor_type") or "")
    deit = kind.startswith("DeiT")
    # Model input = (x * rescale - mean) / std for x in [0, 255]; in [0, 1]
    # units the statistics are divided by 255 * rescale.
    rescale = config.get("rescale_factor", 1 / 255) if config.get("do_rescale", True) else 1.0
    unit = 255.0 * rescale
    if config.get("do_normalize", True):
        mean, std = MODE_STATISTICS["imagenet" if deit else "inception"]
        mean = config.get("image_mean", mean)
        std = config.get("image_std", std)
    else:
        mean, std = (0.0,), (1.0,)
    mean = [m / unit for m in (mean if isinstance(mean, (list, tuple)) else [mean])]
    std = [s / unit for s in (std if isinstance(std, (list, tuple)) else [std])]
    size = config.get("size")
    resize = _size_of(size)
    if isinstance(size, dict) and "shortest_edge" in size:
        resize = size["shortest_edge"]
    crop = _size_of(config.get("crop_size")) if config.get("do_center_crop", deit) else None
    image_size = crop or (resize if isinstance(resize, tuple) else None)
    if not config.get("do_resize", True):
        resize = None
    return Preprocessing(
        mean=mean,
        std=std,
        image_size=image_size,
        resize=None if resize == image_size else resize,
        interpolation=RESAMPLE.get(config.get("resample", 2), "bilinear"),
    )


def _refuse(reason):
    return ValueError(f"transformers has no ViT that represents this model: {reason}.")


def _refuse_options(config, exported=EXPORTED_OPTIONS, holder="it"):
    """Refuses block and encoder options a transformers config cannot hold."""
    for record in RECORDS.values():
        # Training-only fields (dropout, remat, patch dropout) leave the weights as they are.
        training = record.training_fields()
        for name, default in record.defaults().items():
            if name in training:
                continue
            value = config.get(name, default)
            allowed = exported[name] if name in exported else (default,)
            if allowed is not None and value not in allowed:
                raise _refuse(f"{name}={value!r} ({holder} holds {name} in {list(allowed)})")


def _export_family(config):
    """`(family module, architecture)` of the first family that recognises the
    model config (its options checked), or `(None, None)`."""
    if config.get("projection_dim") is not None or config.get("l2_normalize", False):
        raise _refuse(
            "an embedding head (projection_dim, l2_normalize: a zero-shot classifier of an "
            "image-text model); save it with format='keras_vit'"
        )
    for family in EXPORT_FAMILIES:
        architecture = family.export_architecture(config)
        if architecture is not None:
            _refuse_options(config, family.EXPORTED_OPTIONS, architecture)
            return family, architecture
    return None, None


def export_architecture(config):
    """The transformers task class of a keras_vit model config.

    Args:
        config: a flat model config (`keras_vit.layers.config.flatten_config`).

    Raises:
        ValueError: for a model transformers' ViT/DeiT cannot represent.
    """
    family, architecture = _export_family(config)
    if family is not None:
        return architecture
    if "resnet_layers" in config:
        raise _refuse("a ResNet (hybrid) stem; transformers has no ViT-hybrid layout")
    checks = (
        (config.get("num_register_tokens", 0), "register tokens (num_register_tokens > 0)"),
        (config.get("classifier", "token") != "token", f"classifier={config.get('classifier')!r} (transformers classifies the class token)"),
        (config.get("pooled_norm", False), "a final norm after pooling (pooled_norm=True)"),
        (config.get("representation_size") is not None, "a pre-logits layer (representation_size); transformers' classifiers have none"),
        (not config.get("include_top", True), "no classifier head (include_top=False); AutoModelForImageClassification needs one"),
    )
    for failed, reason in checks:
        if failed:
            raise _refuse(reason)
    _refuse_options(config)
    if not config.get("distillation_token", False):
        return "ViTForImageClassification"
    if config.get("distillation_head", True):
        return "DeiTForImageClassificationWithTeacher"
    return "DeiTForImageClassification"


def names_classes(config):
    """Whether the transformers model written for a model config has classes
    to name (`id2label`): the ViT/DeiT classifiers and a family's
    architectures listed in its optional `CLASSIFIERS`; a family's backbone
    or embedding projection has none."""
    family, architecture = _export_family(config)
    if family is None:
        return bool(config.get("include_top", True))
    return architecture in getattr(family, "CLASSIFIERS", ())


def export_config(config, class_names=None):
    """A transformers `config.json` dict for a keras_vit model config."""
    architecture = export_architecture(config)
    model_type, _, _ = ARCHITECTURES[architecture]
    height, width = config["image_size"]
    ph, pw = config["patch_size"]
    classes = config["classes"]
    names = list(class_names) if class_names else [f"LABEL_{i}" for i in range(classes)]
    return {
        "architectures": [architecture],
        "model_type": model_type,
        "image_size": height if height == width else [height, width],
        "patch_size": ph if ph == pw else [ph, pw],
        "num_channels": config["input_shape"][-1],
        "hidden_size": config["hidden_size"],
        "num_hidden_layers": config["num_layers"],
        "num_attention_heads": config["num_heads"],
        "intermediate_size": config["mlp_dim"],
        "hidden_act": "gelu_pytorch_tanh" if config["gelu_approximate"] else "gelu",
        "layer_norm_eps": config["layer_norm_epsilon"],
        "qkv_bias": config.get("qkv_bias", True),
        "hidden_dropout_prob": config.get("dropout_rate", 0.0),
        "attention_probs_dropout_prob": config.get("attention_dropout_rate", 0.0),
        "initializer_range": 0.02,
        "encoder_stride": ph,
        "id2label": {str(i): n for i, n in enumerate(names)},
        "label2id": {n: i for i, n in enumerate(names)},
        "dtype": "float32",
    }


def export_preprocessor(record):
    """A `preprocessor_config.json` dict for a `Preprocessing` record.

    transformers' ViT/DeiT processors resize to an exact height and width,
    so a shorter-side resize becomes a square one of that side; a centre
    crop needs the DeiT processor (the ViT one has none).
    """
    names = {v: k for k, v in RESAMPLE.items()}
    crop = record.image_size
    resize = record.resize
    if isinstance(resize, int):
        resize = (resize, resize)
    out = {
        "do_resize": True,
        "resample": names.get(record.interpolation, 3),
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(record.mean),
        "image_std": list(record.std),
    }
    if resize is None or crop is None:
        size = resize or crop or (224, 224)
        out.update(image_processor_type="ViTImageProcessor", size={"height": size[0], "width": size[1]})
    else:
        out.update(
            image_processor_type="DeiTImageProcessor",
            size={"height": resize[0], "width": resize[1]},
            do_center_crop=True,
            crop_size={"height": crop[0], "width": crop[1]},
        )
    return out


def read(state, config, path):
    """A transformers state dict as a `Checkpoint`.

    Args:
        state: `{key: NumPy array}` as `save_pretrained` wrote it (or as
            transformers names the modules in memory).
        config: the `config.json` dict.
        path: the file it came from, for messages.
    """
    if config.get("model_type") in FAMILIES:
        return _read_family(FAMILIES[config["model_type"]], state, config, path)
    architecture = _architecture(config)
    kept, ignored = split_state(state, architecture)
    _, prefix, head = ARCHITECTURES[architecture]
    if not any(k.startswith(prefix) for k in kept):
        prefix = ""  # a base model saved on its own
    params, unknown = table(prefix, head).to_canonical(kept, config["num_attention_heads"])
    params.update({k: kept[k] for k in unknown})  # reported as unexpected
    if config.get("pooler_act", "tanh") != "tanh":
        for key in [k for k in params if k.startswith(C.PRE_LOGITS)]:
            params.pop(key)
            ignored[key] = f"a pooler with {config['pooler_act']!r}, not a tanh pre-logits layer"
    return C.Checkpoint(path, "transformers", params, ignored)


def _read_family(family, state, config, path):
    kept, ignored = {}, {}
    for key, value in state.items():
        # By its end (a buffer under any prefix) or its start (a two-tower
        # model's text tower).
        reason = next((r for p, r in family.IGNORED.items() if key.endswith(p) or key.startswith(p)), None)
        if reason:
            ignored[key] = reason
        else:
            kept[key] = value
    # The family's own reading of the config (a two-tower one nests it).
    heads = family.model_arguments(config)["num_heads"]
    params, unknown = family.table(kept).to_canonical(kept, heads)
    params.update({k: kept[k] for k in unknown})  # reported as unexpected
    if hasattr(family, "complete"):
        params = family.complete(params)
    return C.Checkpoint(path, "transformers", params, ignored)


def preset_source(directory):
    """A `PresetSource` for a transformers directory."""
    config = read_json(os.path.join(directory, "config.json"))
    family = FAMILIES.get(config.get("model_type"))
    args = family.model_arguments(config) if family else model_arguments(config)[0]
    prep_path = os.path.join(directory, "preprocessor_config.json")
    if os.path.isfile(prep_path):
        file = read_json(prep_path)
        record = preprocessing(file)
        if hasattr(family, "read_preprocessor"):  # the family's own processor class
            record = family.read_preprocessor(file, record, args)
        args["preprocessing"] = record.get_config()

    def read_weights(model):
        state, path = shards.read_state(directory)
        return read(state, config, path)

    return C.PresetSource("transformers", directory, "ViT", args, read_weights)


def write(directory, config, params, class_names, preprocessing_record):
    """Writes a transformers directory: `config.json`, `model.safetensors`,
    `preprocessor_config.json`.

    Args:
        directory: an existing folder.
        config: the keras_vit model's `get_config()`.
        params: its weights in the canonical layout (`mapping.model_state`).
        class_names: one name per class, in head order (None for a
            model without a head).
        preprocessing_record: a `Preprocessing` record.

    Raises:
        ValueError: for a model transformers cannot represent, before
            anything is written.
    """
    from safetensors.numpy import save_file

    family, architecture = _export_family(config)
    if family is not None:
        hf_config = family.export_config(config, architecture, class_names)
        state = family.export_state(params, architecture)
        if hasattr(family, "export_fixed"):
            state.update(family.export_fixed(config))
    else:
        architecture = export_architecture(config)
        hf_config = export_config(config, class_names)
        _, prefix, head = ARCHITECTURES[architecture]
        state = table(prefix, head).from_canonical(params)
    state = {k: np.asarray(v, "float32") for k, v in state.items()}
    save_file(state, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    write_json(os.path.join(directory, "config.json"), hf_config)
    preprocessor = export_preprocessor(preprocessing_record)
    if hasattr(family, "adjust_preprocessor"):  # the family's own processor class
        preprocessor = family.adjust_preprocessor(preprocessor, preprocessing_record, config)
    write_json(os.path.join(directory, "preprocessor_config.json"), preprocessor)
