"""Checkpoint readers: every supported file becomes one canonical flat dict.

The canonical layout is the official vit_jax `.npz`: keys such as
`Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel`
(pre-Linen numbering), `Transformer/posembed_input/pos_embedding` with the
class-token row first, `cls`, `embedding`, `pre_logits`, `head`, and the
ResNet keys of the hybrids. Supported files:

- official vit_jax `.npz` (the `gs://vit_models` files);
- big_vision `.npz` (Linen numbering, position embedding added before the
  class token is prepended, optional `params/` or `opt/target/` prefix,
  optionally scanned blocks), detected from the keys;
- timm state dicts, `.safetensors` or `.pth`/`.pt`/`.bin` (see `timm_layout`);
- Keras weights written by keras_vit (`model.save_weights`, `.weights.h5`,
  or the weights inside a `.keras` archive).

Nothing is unpickled: `.npz` files are opened with `allow_pickle=False` and
PyTorch files with `weights_only=True`.
"""

import os
import re
import zipfile
from dataclasses import dataclass, field

import numpy as np

from keras_vit.weights import timm_layout
from keras_vit.weights.mapping import CLS_KEY, POSEMB_KEY, checkpoint_key

FORMATS = {
    ".npz": "npz",
    ".safetensors": "timm",
    ".pth": "timm",
    ".pt": "timm",
    ".bin": "timm",
    ".h5": "keras",
    ".keras": "keras",
}

_PREFIXES = ("params/", "opt/target/")
# Linen module numbering (big_vision, newer vit_jax) -> pre-Linen (the files).
_LINEN = (
    ("MultiHeadDotProductAttention_0", "MultiHeadDotProductAttention_1"),
    ("LayerNorm_1", "LayerNorm_2"),
    ("MlpBlock_0", "MlpBlock_3"),
)
_BLOCK = re.compile(r"^Transformer/encoderblock_\d+/")
_GROUPNORM = re.compile(r"(^|/)gn(\d+|_root|_proj)/(scale|bias)$")


@dataclass
class Checkpoint:
    """A checkpoint read into the canonical layout.

    Attributes:
        path: the file it was read from.
        format: "npz", "timm" or "keras".
        params: `{canonical key: NumPy array}`.
        ignored: `{source key: reason}` for entries that are not weights.
    """

    path: str
    format: str
    params: dict
    ignored: dict = field(default_factory=dict)


def checkpoint_format(path):
    """The reader for `path` from its name ("npz", "timm" or "keras")."""
    name = os.fspath(path).lower()
    for suffix, kind in FORMATS.items():
        if name.endswith(suffix):
            return kind
    raise ValueError(
        f"Unsupported checkpoint file {os.fspath(path)!r}: the name must end "
        f"with one of {sorted(FORMATS)}."
    )


def _check_file(path):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Checkpoint file not found: {path!r}")
    if not os.path.isfile(path):
        raise ValueError(f"Checkpoint {path!r} is not a file.")
    if os.path.getsize(path) == 0:
        raise ValueError(f"Checkpoint file {path!r} is empty (0 bytes).")
    return path


def _open_zip(path):
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"Checkpoint file {path!r} is not a valid .npz archive (no zip "
            "directory found): the file is truncated, corrupt or of another "
            "format."
        )
    return zipfile.ZipFile(path)


def npz_headers(path):
    """`{key: (shape, dtype)}` from the `.npy` headers, without the data.

    Raises:
        ValueError: for a file that is not a readable `.npz`, or one holding
            pickled object arrays (nothing is unpickled).
    """
    out = {}
    with _open_zip(path) as archive:
        try:
            for member in archive.namelist():
                if not member.endswith(".npy"):
                    continue
                with archive.open(member) as stream:
                    version = np.lib.format.read_magic(stream)
                    read = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape, _, dtype = read(stream)
                out[member[: -len(".npy")]] = (shape, dtype)
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
            raise ValueError(
                f"Cannot read checkpoint {path!r} (truncated or corrupt): "
                f"{type(error).__name__}: {error}"
            ) from None
    for key, (_, dtype) in out.items():
        if dtype.hasobject:
            raise _pickle_error(path, key)
    return out


def _pickle_error(path, key):
    return ValueError(
        f"Checkpoint {path!r} holds a pickled Python object array under key "
        f"{key!r}. Only plain numeric arrays are accepted; pickled data is "
        "never loaded (allow_pickle=False), since unpickling can run code."
    )


def strip_prefix(raw):
    """Removes a `params/` or `opt/target/` prefix; the rest is ignored."""
    for prefix in _PREFIXES:
        if any(key.startswith(prefix) for key in raw):
            kept = {k[len(prefix) :]: v for k, v in raw.items() if k.startswith(prefix)}
            ignored = {
                k: f"outside the {prefix!r} parameters (optimizer or training state)"
                for k in raw
                if not k.startswith(prefix)
            }
            return kept, ignored
    return dict(raw), {}


def _unscan(params):
    """Splits scanned blocks (`Transformer/encoderblock/...`, leading depth)."""
    out = {}
    for key, value in params.items():
        if key.startswith("Transformer/encoderblock/"):
            rest = key[len("Transformer/encoderblock/") :]
            for i in range(value.shape[0]):
                out[f"Transformer/encoderblock_{i}/{rest}"] = value[i]
        else:
            out[key] = value
    return out


def _flax_to_canonical(raw):
    """Official or big_vision `.npz` keys/arrays -> canonical layout."""
    params, ignored = strip_prefix(raw)
    params = _unscan(params)
    linen = any("MultiHeadDotProductAttention_0" in k or "MlpBlock_0" in k for k in params)
    out = {}
    for key, value in params.items():
        if linen and _BLOCK.match(key):
            for old, new in _LINEN:
                key = key.replace(f"/{old}/", f"/{new}/")
        if _GROUPNORM.search(key) and value.ndim == 4:
            value = value.reshape(-1)
        out[key] = value
    if "pos_embedding" in out:
        # big_vision adds the position embedding before prepending the class
        # token, which is the canonical layout with a zero class-token row.
        posemb = out.pop("pos_embedding")
        if CLS_KEY in out:
            zero = np.zeros_like(posemb[:, :1])
            posemb = np.concatenate([zero, posemb], axis=1)
        out[POSEMB_KEY] = posemb
    return out, ignored


def read_npz(path):
    """Reads an official or big_vision `.npz` into a `Checkpoint`."""
    path = _check_file(path)
    headers = npz_headers(path)
    raw = {}
    try:
        with np.load(path, allow_pickle=False) as archive:
            for key in headers:
                raw[key] = archive[key]
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
        raise ValueError(
            f"Cannot read checkpoint {path!r} (truncated or corrupt): "
            f"{type(error).__name__}: {error}"
        ) from None
    params, ignored = _flax_to_canonical(raw)
    return Checkpoint(path, "npz", params, ignored)


def read_state_dict(path):
    """A PyTorch-style state dict from `.safetensors` or `.pth` as NumPy."""
    path = _check_file(path)
    if path.lower().endswith(".safetensors"):
        from safetensors.numpy import load_file

        try:
            return load_file(path)
        except Exception as error:  # safetensors raises its own error types
            raise ValueError(
                f"Cannot read checkpoint {path!r}: {type(error).__name__}: {error}"
            ) from None
    try:
        import torch
    except ImportError:
        raise ImportError(
            f"Reading {path!r} needs PyTorch (`pip install torch`); a "
            ".safetensors copy of the same weights needs no PyTorch."
        ) from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # pickle, zip and weights_only refusals
        raise ValueError(
            f"Cannot read checkpoint {path!r} as a PyTorch state dict "
            f"(weights_only=True): {type(error).__name__}: {error}"
        ) from None
    for wrapper in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
    if not isinstance(state, dict):
        raise ValueError(f"Checkpoint {path!r} does not hold a state dict.")
    return {
        key: (value.float() if value.dtype == torch.bfloat16 else value).numpy()
        for key, value in state.items()
        if hasattr(value, "numpy")
    }


def read_timm(path, num_heads):
    """Reads a timm ViT state dict into a `Checkpoint`.

    Args:
        path: `.safetensors` or `.pth`/`.pt`/`.bin` file.
        num_heads: int, attention heads (the fused qkv weight does not say).
    """
    state = read_state_dict(path)
    try:
        params = timm_layout.to_canonical(state, num_heads)
    except ValueError as error:
        raise ValueError(f"Cannot read checkpoint {os.fspath(path)!r}: {error}") from None
    return Checkpoint(os.fspath(path), "timm", params, {})


def _h5_names(model):
    """`{layer path: [variable names in save order]}` of a template model."""
    table = {}
    for variable in model.weights:
        layer, _, name = variable.path.rpartition("/")
        table.setdefault(layer, []).append(name)
    return table


# Variable names of common Keras layers, for layers the template lacks
# (such as a `pre_logits` layer that the target model drops).
_CLASS_VARIABLES = {
    "dense": ("kernel", "bias"),
    "einsum_dense": ("kernel", "bias"),
    "conv2d": ("kernel", "bias"),
    "layer_normalization": ("gamma", "beta"),
    "group_normalization": ("gamma", "beta"),
}


def _read_h5_groups(root, template):
    import h5py

    names = _h5_names(template) if template is not None else {}
    out = {}

    def visit(group, chain):
        own = group.get("vars")
        if isinstance(own, h5py.Group):
            name = own.attrs.get("name")
            if group is not root and name is not None:
                chain = chain + (name.decode() if isinstance(name, bytes) else str(name),)
            indices = sorted((k for k in own if k.isdigit()), key=int)
            if indices:
                layer = "/".join(chain)
                known = names.get(layer)
                if known is None or len(known) != len(indices):
                    cls = re.sub(r"_\d+$", "", group.name.rsplit("/", 1)[-1])
                    fallback = _CLASS_VARIABLES.get(cls, ())
                    known = list(fallback) if len(fallback) == len(indices) else indices
                for index, var_name in zip(indices, known):
                    out[f"{layer}/{var_name}"] = np.asarray(own[index])
        for key in sorted(group):
            child = group[key]
            if key != "vars" and isinstance(child, h5py.Group):
                visit(child, chain)

    visit(root, ())
    return out


def read_keras(path, model=None):
    """Reads keras_vit weights (`.weights.h5` or `.keras`) into a `Checkpoint`.

    Keras stores variables by index, under the names of their layers; the
    variable names come from `model` (a model of the same family), or from
    the usual Keras layer classes for layers it lacks.
    """
    import h5py

    path = _check_file(path)
    try:
        if path.lower().endswith(".keras"):
            with zipfile.ZipFile(path) as archive, archive.open("model.weights.h5") as f:
                with h5py.File(f, "r") as root:
                    raw = _read_h5_groups(root, model)
        else:
            with h5py.File(path, "r") as root:
                raw = _read_h5_groups(root, model)
    except (OSError, KeyError, zipfile.BadZipFile) as error:
        raise ValueError(
            f"Cannot read checkpoint {path!r} as Keras weights: "
            f"{type(error).__name__}: {error}"
        ) from None
    if not raw:
        raise ValueError(f"Checkpoint {path!r} holds no Keras layer weights.")
    params = {checkpoint_key(key): value for key, value in raw.items()}
    return Checkpoint(path, "keras", params, {})


def read_checkpoint(path, model=None):
    """Reads any supported checkpoint file into the canonical layout.

    Args:
        path: a `.npz`, `.safetensors`, `.pth`/`.pt`/`.bin`, `.weights.h5` or
            `.keras` file.
        model: optional keras_vit model the weights are meant for; needed for
            timm files (number of heads) and used to name Keras weights.

    Returns:
        A `Checkpoint` (`.params`: `{canonical key: NumPy array}`).

    Example:

    >>> import numpy as np, os, tempfile
    >>> file = os.path.join(tempfile.mkdtemp(), "tiny.npz")
    >>> np.savez(file, **{"params/cls": np.zeros((1, 1, 8), "float32")})
    >>> sorted(read_checkpoint(file).params)
    ['cls']
    """
    kind = checkpoint_format(path)
    if kind == "npz":
        return read_npz(path)
    if kind == "timm":
        if model is None:
            raise ValueError(f"Reading the timm checkpoint {os.fspath(path)!r} needs `model`.")
        return read_timm(path, model.num_heads)
    return read_keras(path, model)
