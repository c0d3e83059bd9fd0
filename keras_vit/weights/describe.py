"""What a `weights` argument is, and what it says about the model to build."""

import dataclasses
import json
import os
import re
import zipfile

from keras_vit import labels
from keras_vit.architectures import VARIANTS, architecture_name, effective_patch_size
from keras_vit.layers.config import BlockConfig
from keras_vit.weights import canonical as C
from keras_vit.weights import registry
from keras_vit.weights.files import check_file, read_state_dict
from keras_vit.weights.formats import official, timm
from keras_vit.weights.readers import CHECKPOINT_SUFFIXES, checkpoint_format
from keras_vit.weights.posemb import square_grid
from keras_vit.weights.record import Preprocessing


@dataclasses.dataclass(frozen=True)
class WeightsInfo:
    """Facts a checkpoint fixes about its model; None where unknown.

    Attributes:
        image_size: int or `(height, width)`, the resolution it was trained at.
        classes: int, the size of its classifier head.
        gelu_approximate: True (tanh GELU, Google numerics), False (erf).
        representation_size: int, width of its pre-logits layer.
        channels: int, image channels its first layer takes.
        preprocessing: a `Preprocessing` record of its input scaling.
        class_names: the name of its head's class list in
            `keras_vit.labels.LISTS` ("imagenet1k", "imagenet21k").
        activation_unrecorded: the file (the path) when it does not record
            the GELU its weights were trained with (`numerics_unrecorded`),
            else None.
    """

    image_size: object = None
    classes: object = None
    gelu_approximate: object = None
    representation_size: object = None
    channels: object = None
    preprocessing: object = None
    class_names: object = None
    activation_unrecorded: object = None


def registered_names(architecture):
    """Registered weights names for an architecture (empty when none)."""
    if architecture is None:
        return []
    return list(registry.weights_names(architecture))


def _looks_like_path(weights):
    name = weights.lower()
    return (
        os.sep in weights
        or "/" in weights
        or name.endswith(tuple(CHECKPOINT_SUFFIXES))
        or os.path.exists(weights)
    )


class WeightsFileNotFoundError(FileNotFoundError, ValueError):
    """`weights=` names a file that does not exist.

    A `FileNotFoundError`, and a `ValueError` as keras_vit raises for every
    bad argument.
    """


def _existing(path, weights, architecture):
    """`path`, if it exists; else an error naming `weights=`, where it was
    looked for and what `weights` takes."""
    if os.path.exists(path):
        return path
    shown = ", ".join(repr(n) for n in registered_names(architecture)[:4])
    listing = f"keras_vit.weights.weights_names({architecture!r})" if shown else (
        "keras_vit.weights.list_records()"
    )
    shown = f"{shown}; all of them: `{listing}`" if shown else f"`{listing}`"
    raise WeightsFileNotFoundError(
        f"Checkpoint file not found: weights={weights!r} resolves to "
        f"{os.path.abspath(path)!r}, which does not exist (relative paths are read "
        f"from the current working directory, {os.getcwd()!r}). `weights` takes "
        f"None, a registered weights name ({shown}), "
        "or the path of a "
        f"checkpoint file ({', '.join(sorted(CHECKPOINT_SUFFIXES))}); a checkpoint "
        "directory or a hf:// handle loads with `keras_vit.from_preset(handle)`."
    )


def weights_source(weights, architecture):
    """Splits `weights` into `(path or None, registry record or None)`.

    Args:
        weights: a registered weights name or a checkpoint path.
        architecture: the architecture name (e.g. "B/16"), or None for a
            configuration outside the table.

    Returns:
        `(None, record)` for a registered name (not yet downloaded), or
        `(path, None)` for a file.

    Raises:
        ValueError: for a name that is not registered for `architecture`; the
            message lists the valid names.
        WeightsFileNotFoundError: for a path that does not exist.
    """
    if isinstance(weights, os.PathLike):
        return _existing(os.fspath(weights), weights, architecture), None
    if not isinstance(weights, str):
        raise ValueError(
            "`weights` must be None, a registered weights name or a checkpoint "
            f"path. Received: weights={weights!r}"
        )
    names = registered_names(architecture)
    if weights in names:
        return None, registry.get_record(architecture, weights)
    if _looks_like_path(weights):
        return _existing(weights, weights, architecture), None
    valid = ", ".join(repr(n) for n in names) or (
        "none registered" if architecture else "none (registered weights exist "
        "only for the architectures of `keras_vit.models.ARCHITECTURE_CONFIGS`)"
    )
    raise ValueError(
        f"Unknown weights name {weights!r} for architecture {architecture!r}. "
        f"Valid names: {valid}; or give the path of a checkpoint file "
        f"({', '.join(sorted(CHECKPOINT_SUFFIXES))}). Received: weights={weights!r}"
    )


def _tensor_shapes(path, kind):
    """`{key: shape}` of a checkpoint's tensors, reading headers only where possible."""
    if kind == "npz":
        shapes = {key: shape for key, (shape, _) in official.npz_headers(path).items()}
        return official.strip_prefix(shapes)[0]
    if not path.lower().endswith(".safetensors"):
        return {k: v.shape for k, v in read_state_dict(path).items()}
    from safetensors import safe_open

    try:
        with safe_open(path, framework="numpy") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as error:  # safetensors raises its own types
        raise ValueError(
            f"Cannot read checkpoint {path!r}: {type(error).__name__}: {error}"
        ) from None


# Where each file kind keeps what `WeightsInfo` reports: (position
# embedding, the prefix tokens with a position row (class, distillation),
# head bias, pre-logits bias, first-layer kernels with the axis of their
# input channels).
# The timm names are those its table gives the canonical keys.
_timm = timm.TABLE.source_key
_KEYS = {
    "npz": (C.POSEMB, C.POSITION_PREFIX_KEYS, C.HEAD + "bias", C.PRE_LOGITS + "bias",
            ((C.EMBEDDING + "kernel", 2), ("conv_root/kernel", 2))),
    "timm": (_timm(C.POSEMB), tuple(map(_timm, C.POSITION_PREFIX_KEYS)), _timm(C.HEAD + "bias"),
             _timm(C.PRE_LOGITS + "bias"), ((_timm(C.EMBEDDING + "kernel"), 1),)),
}


def _facts(shapes, kind):
    """`(patch rows of the position embedding, classes, pre-logits width, channels)`."""
    posemb, prefix, head, pre, first = _KEYS[kind]
    if kind == "npz" and posemb not in shapes and official.BIG_VISION_POSEMB in shapes:
        # big_vision: the embedding has no class-token row.
        rows = shapes[official.BIG_VISION_POSEMB][1]
    else:
        rows = shapes[posemb][1] - sum(k in shapes for k in prefix) if posemb in shapes else None
    # A hybrid's `embedding/kernel` takes feature maps: the root conv wins.
    channels = None
    for key, axis in first:
        if key in shapes and len(shapes[key]) == 4:
            channels = shapes[key][axis]
    width = lambda key: shapes[key][0] if key in shapes else None  # noqa: E731
    return rows, width(head), width(pre), channels


def _keras_archive_info(path):
    """What a `.keras` archive's own `config.json` says: everything."""
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json")).get("config", {})
    activation = BlockConfig.from_arguments(config.get("block_config"), **config).mlp_activation
    image_size = config.get("image_size")
    if isinstance(image_size, list):
        image_size = image_size[0] if image_size[0] == image_size[1] else tuple(image_size)
    shape = config.get("input_shape")
    return WeightsInfo(
        image_size=image_size,
        classes=config.get("classes") if config.get("include_top", True) else None,
        gelu_approximate={"gelu_tanh": True, "gelu": False}.get(activation),
        representation_size=config.get("representation_size"),
        channels=shape[-1] if shape else None,
        preprocessing=config.get("preprocessing"),
        class_names=config.get("class_names"),
    )


def _weights_h5_classes(path):
    """The class count of a `.weights.h5` file's head, read from its bias.

    Keras stores a functional model's top-level layers by class name in
    model order (`dense`, `dense_1`, ...): the pre-logits layer comes first,
    then the head and DeiT's second head (same width), so the last one is a
    head.
    """
    import h5py

    with h5py.File(path, "r") as f:
        layers = f.get("layers", {})
        dense = [n for n in layers if re.fullmatch(r"dense(_\d+)?", n) and "1" in layers[n].get("vars", {})]
        if not dense:
            return None
        last = max(dense, key=lambda n: int(n.rpartition("_")[2]) if "_" in n else 0)
        return int(layers[last]["vars"]["1"].shape[0])


def keras_file_info(path):
    """`WeightsInfo` of a keras_vit `.keras` or `.weights.h5` file.

    A `.keras` archive holds the model's configuration (classes, resolution,
    GELU, class names, preprocessing); a `.weights.h5` file only its arrays,
    of which the head's width is the class count. Unreadable files give an
    empty `WeightsInfo` (the reader reports them).
    """
    try:
        if path.lower().endswith(".keras"):
            return _keras_archive_info(path)
        return WeightsInfo(classes=_weights_h5_classes(path))
    except (OSError, KeyError, ValueError, TypeError, AttributeError, IndexError, zipfile.BadZipFile):
        return WeightsInfo()


def numerics_unrecorded(path):
    """What a checkpoint file leaves open about its numerics.

    Args:
        path: a checkpoint file.

    Returns:
        A tuple of what the file does not record, among "mlp_activation" (an
        `.npz` does not say which GELU it was trained with: Google's use the
        tanh GELU, DeiT's the exact one; a `.weights.h5` holds arrays only)
        and "preprocessing" (no weights file but a `.keras` archive records
        it); empty for a `.keras` archive that records both. A constructor
        given such a file without `mlp_activation` refuses it, as the
        commands refuse it without `--gelu`.

    Example:

    >>> numerics_unrecorded("deit_tiny_patch16_224.npz")
    ('mlp_activation', 'preprocessing')
    """
    name = os.fspath(path).lower()
    kind = checkpoint_format(name)
    if name.endswith(".keras"):
        info = keras_file_info(os.fspath(path))
        return tuple(
            what for what, known in (("mlp_activation", True), ("preprocessing", info.preprocessing))
            if not known
        )
    # timm files fix the erf GELU by their format; `.npz` and Keras weights do not.
    gelu = () if kind == "timm" else ("mlp_activation",)
    return gelu + ("preprocessing",)


def describe_weights(weights, architecture_config):
    """What `weights` fixes about the model: resolution, classes, GELU, channels.

    Reads as little as possible: a registry record, or only the array
    headers of an `.npz` / `.safetensors` file.

    Args:
        weights: a registered weights name or a checkpoint path.
        architecture_config: dict with `patch_size`, `hidden_size`,
            `num_layers`, `num_heads`, `mlp_dim` (and `resnet_layers`,
            `resnet_width` for hybrids).

    Returns:
        A `WeightsInfo`. Files: `.npz` -> resolution from a square
        position-embedding grid, classes from the head, the GELU unrecorded;
        timm files -> erf GELU; `.weights.h5` -> classes from the head, the
        GELU unrecorded; `.keras` -> what its saved configuration says.

    Example:

    >>> import numpy as np, os, tempfile
    >>> file = os.path.join(tempfile.mkdtemp(), "tiny.npz")
    >>> np.savez(file, **{"cls": np.zeros((1, 1, 8)),
    ...     "Transformer/posembed_input/pos_embedding": np.zeros((1, 17, 8)),
    ...     "embedding/kernel": np.zeros((8, 8, 3, 8)),
    ...     "head/bias": np.zeros(10)})
    >>> info = describe_weights(file, dict(patch_size=8))
    >>> info.image_size, info.classes, info.channels, info.activation_unrecorded == file
    (32, 10, 3, True)
    """
    path, record = weights_source(weights, architecture_name(architecture_config))
    if record is not None:
        lists = {size: name for name, size in labels.LISTS.items()}
        return WeightsInfo(
            image_size=record.image_size,
            classes=record.classes,
            gelu_approximate=record.gelu_approximate,
            representation_size=record.representation_size,
            channels=3,
            # The official evaluation resizes straight to the input size.
            preprocessing=Preprocessing.from_mode(record.preprocessing_mode, image_size=record.image_size),
            class_names=lists.get(record.classes),
        )
    path = check_file(path)
    kind = checkpoint_format(path)
    if kind == "keras":
        info = keras_file_info(path)
        unrecorded = "mlp_activation" in numerics_unrecorded(path)
        return dataclasses.replace(info, activation_unrecorded=path) if unrecorded else info
    shapes = _tensor_shapes(path, kind)
    rows, classes, pre, channels = _facts(shapes, kind)
    side = square_grid(rows) if rows else None
    image_size = None
    if side:
        # The checkpoint's own patch size: loaded at another one (FlexiViT
        # resampling), the model keeps the resolution it was trained at.
        patch = _checkpoint_patch_size(shapes, kind) or architecture_config.get("patch_size", 16)
        cell = effective_patch_size(patch, architecture_config.get("resnet_layers"))
        height, width = (side * c for c in cell)
        image_size = height if height == width else (height, width)
    return WeightsInfo(
        image_size=image_size,
        classes=classes,
        # timm files hold the exact GELU by their format; an `.npz` says nothing.
        gelu_approximate=False if kind == "timm" else None,
        representation_size=pre,
        channels=channels,
        activation_unrecorded=path if kind == "npz" else None,
    )


# Where each checkpoint layout keeps what identifies an architecture:
# (patch embedding kernel, its width axis and patch axis, block key, first
# MLP kernel and its width axis, ResNet root, ResNet unit key).
def _block_pattern(template):
    return re.escape(template).replace(r"\{i\}", r"(\d+)")


_LAYOUT_KEYS = {
    "npz": (C.EMBEDDING + "kernel", -1, 0, _block_pattern(C.BLOCK),
            C.block(C.MLP_IN + "kernel", 0), 1, "conv_root/kernel", r"block(\d+)/unit(\d+)/"),
    "timm": (_timm(C.EMBEDDING + "kernel"), 0, 2, _block_pattern(timm.BLOCK),
             _timm(C.block(C.MLP_IN + "kernel", 0)), 0,
             "patch_embed.backbone.stem.conv.weight",
             r"patch_embed\.backbone\.stages\.(\d+)\.blocks\.(\d+)\."),
}


def _checkpoint_patch_size(shapes, kind):
    """`(ph, pw)` of a checkpoint's patch-embedding kernel, or None."""
    key, _, axis = _LAYOUT_KEYS[kind][:3]
    shape = shapes.get(key)
    return tuple(shape[axis:axis + 2]) if shape is not None and len(shape) == 4 else None


def _architecture_facts(shapes, kind):
    embedding, width_axis, patch_axis, block, mlp, mlp_axis, root, unit = _LAYOUT_KEYS[kind]
    if embedding not in shapes or mlp not in shapes:
        return None
    units = {}
    for key in shapes:
        found = re.match(unit, key)
        if found:
            units.setdefault(int(found.group(1)), set()).add(int(found.group(2)))
    return dict(
        patch_size=shapes[embedding][patch_axis],
        hidden_size=shapes[embedding][width_axis],
        num_layers=len({m.group(1) for m in map(re.compile(block).match, shapes) if m}),
        mlp_dim=shapes[mlp][mlp_axis],
        resnet_layers=tuple(len(units[s]) for s in sorted(units)) if root in shapes else None,
    )


def checkpoint_constructor(path):
    """The named constructor of the architecture a checkpoint file holds.

    Read from the tensor shapes (headers only where the format allows):
    patch size, width, depth, MLP width and the ResNet stages of a hybrid,
    matched against `keras_vit.architectures.VARIANTS`.

    Args:
        path: an official/big_vision `.npz` or a timm checkpoint file.

    Returns:
        A constructor name such as "ViTTi16", or None when the file is a
        Keras file (which holds no architecture keras_vit can read) or its
        architecture is not a row of the table.

    Example:

    >>> import numpy as np, os, tempfile
    >>> file = os.path.join(tempfile.mkdtemp(), "ti16.npz")
    >>> np.savez(file, **{"embedding/kernel": np.zeros((16, 16, 3, 192)),
    ...     **{f"Transformer/encoderblock_{i}/MlpBlock_3/Dense_0/kernel":
    ...        np.zeros((192, 768)) for i in range(12)}})
    >>> checkpoint_constructor(file)
    'ViTTi16'
    """
    path = check_file(path)
    kind = checkpoint_format(path)
    facts = None if kind == "keras" else _architecture_facts(_tensor_shapes(path, kind), kind)
    if facts is None:
        return None
    matches = [
        v.constructor for v in VARIANTS
        if all(v.config.get(k) == value for k, value in facts.items())
    ]
    return matches[0] if len(matches) == 1 else None
