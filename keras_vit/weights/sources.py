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


def check_file(path):
    """`path` as a string, if it is an existing, non-empty file; else an error naming it."""
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
    path = check_file(path)
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
    path = check_file(path)
    if path.lower().endswith(".safetensors"):
        # Registers bfloat16 with NumPy (a Keras dependency), so safetensors
        # can hand out bfloat16 tensors, which are widened below.
        import ml_dtypes  # noqa: F401
        from safetensors.numpy import load_file

        try:
            state = load_file(path)
        except Exception as error:  # safetensors raises its own error types
            raise ValueError(
                f"Cannot read checkpoint {path!r}: {type(error).__name__}: {error}"
            ) from None
        return {
            k: v.astype("float32") if v.dtype.kind == "V" or v.dtype.name == "bfloat16" else v
            for k, v in state.items()
        }
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


def _structure_template(model, pre_logits):
    """A model with `model`'s layer tree and tiny shapes, to read files with.

    Keras' weight loader walks a model's layers and hands each the arrays
    stored for it; shapes do not matter for reading, so the template is small
    (one token, one unit per attention head). It has a head, and a
    pre-logits layer when `pre_logits`, so that a file's classifier is read
    whether or not `model` keeps it.
    """
    config = model.get_config()
    cell = tuple(model.effective_patch_size)
    config.update(
        weights=None,
        include_top=True,
        classes=1,
        # The names belong to the target's head, not to the one-class copy.
        class_names=None,
        representation_size=1 if pre_logits else None,
        hidden_size=model.num_heads,
        mlp_dim=1,
        image_size=cell,
        input_shape=cell + (model.num_channels,),
        dtype="float32",
        name=model.name,
    )
    return model.__class__.from_config(config)


def _read_weights_h5(path, model):
    """`{variable path: array}` of a `.weights.h5`, read by Keras' loader."""
    for pre_logits in (True, False):
        template, raw = _structure_template(model, pre_logits), {}
        for layer in template._flatten_layers(include_self=True):
            layer.load_own_variables = _capture(layer, raw)
        template.load_weights(path)
        # Keras tells layers of one class apart by their order in the model:
        # a file without a pre-logits layer hands its head to the
        # template's pre-logits layer and nothing to its head.
        if "head/kernel" in raw or "pre_logits/kernel" not in raw:
            return raw
    return raw


def _capture(layer, out):
    """A `load_own_variables` for `layer` that records the stored arrays."""

    def load_own_variables(store):
        own = {}
        layer.save_own_variables(own)  # index -> the layer's own variable
        for index in store.keys():
            variable = own.get(index)
            path = getattr(variable, "path", None) or f"{layer.path}/{index}"
            out[path] = np.asarray(store[index])

    return load_own_variables


def read_keras(path, model=None):
    """Reads keras_vit weights (`.weights.h5` or `.keras`) into a `Checkpoint`.

    Keras reads its own files: a `.keras` archive is loaded as the model it
    holds (`safe_mode=True`); a `.weights.h5` file is read by Keras' weight
    loader walking a template with `model`'s layer tree, each layer
    recording the arrays stored for it instead of assigning them (so a file
    saved at another image size or class count is read as it is).

    Args:
        path: the file.
        model: for `.weights.h5`, a keras_vit model of the family the file
            was saved from (the target model).
    """
    import keras

    path = check_file(path)
    try:
        if path.lower().endswith(".keras"):
            saved = keras.saving.load_model(path, compile=False, safe_mode=True)
            params = {
                checkpoint_key(v.path): keras.ops.convert_to_numpy(v) for v in saved.weights
            }
        else:
            if model is None:
                raise ValueError(f"Reading the Keras weights file {path!r} needs `model`.")
            raw = _read_weights_h5(path, model)
            params = {checkpoint_key(key): value for key, value in raw.items()}
    except (OSError, KeyError, TypeError, zipfile.BadZipFile) as error:
        raise ValueError(
            f"Cannot read checkpoint {path!r} as Keras weights: "
            f"{type(error).__name__}: {error}"
        ) from None
    if not params:
        raise ValueError(f"Checkpoint {path!r} holds no Keras layer weights.")
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
