"""Checkpoint files -> the canonical layout: the reader is picked by the file name.

Supported files, each read by its format module (`keras_vit.weights.formats`):

- official vit_jax and big_vision `.npz` (`formats.official`);
- timm state dicts, `.safetensors` or `.pth`/`.pt`/`.bin` (`formats.timm`);
- Keras weights written by keras_vit (`model.save_weights`, `.weights.h5`,
  or the weights inside a `.keras` archive; `formats.keras_vit`).

Nothing is unpickled: `.npz` files are opened with `allow_pickle=False` and
PyTorch files with `weights_only=True`. Preset directories (whole
checkpoints with their configuration) are read by `keras_vit.presets`.
"""

import os

from keras_vit.weights.formats import keras_vit, official, timm

# File name endings -> the reader of `read_checkpoint`.
CHECKPOINT_SUFFIXES = {
    ".npz": "npz",
    ".safetensors": "timm",
    ".pth": "timm",
    ".pt": "timm",
    ".bin": "timm",
    ".h5": "keras",
    ".keras": "keras",
}


def checkpoint_format(path):
    """The reader for `path` from its name ("npz", "timm" or "keras")."""
    name = os.fspath(path).lower()
    for suffix, kind in CHECKPOINT_SUFFIXES.items():
        if name.endswith(suffix):
            return kind
    raise ValueError(
        f"Unsupported checkpoint file {os.fspath(path)!r}: the name must end "
        f"with one of {sorted(CHECKPOINT_SUFFIXES)}."
    )


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
        return official.read(path)
    if kind == "timm":
        if model is None:
            raise ValueError(f"Reading the timm checkpoint {os.fspath(path)!r} needs `model`.")
        return timm.read_file(path, model.num_heads)
    return keras_vit.read(path, model)
