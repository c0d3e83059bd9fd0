"""The PyTorch state dict of a Hub directory: one file, or shards with an index.

transformers and timm write `model.safetensors` (preferred) or
`pytorch_model.bin`; transformers splits large models into shards listed in
`model.safetensors.index.json` / `pytorch_model.bin.index.json`
(`{"weight_map": {tensor name: shard file}}`). Files are read by
`files.read_state_dict` (safetensors, or `torch.load(weights_only=True)`).
"""

import json
import os

from keras_vit.weights.files import read_state_dict

# In order of preference: safetensors, never unpickled, first.
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def weights_file(directory):
    """The weights file or shard index of a directory, or None."""
    for name in WEIGHT_FILES:
        for candidate in (name, name + ".index.json"):
            path = os.path.join(directory, candidate)
            if os.path.isfile(path):
                return path
    return None


def _read_index(path):
    try:
        with open(path, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"Cannot read the shard index {path!r}: {type(error).__name__}: {error}"
        ) from None
    return weight_map


def read_state(directory):
    """`(state dict as NumPy, file or index path)` of a Hub directory.

    Raises:
        FileNotFoundError: when the directory has no weights file; the
            message lists the names looked for.
        ValueError: for an unreadable file, index or missing shard.

    Example:

    >>> import numpy as np, os, tempfile
    >>> from safetensors.numpy import save_file
    >>> folder = tempfile.mkdtemp()
    >>> save_file({"w": np.ones(2, "float32")}, os.path.join(folder, "model.safetensors"))
    >>> state, path = read_state(folder)
    >>> list(state), os.path.basename(path)
    (['w'], 'model.safetensors')
    """
    path = weights_file(directory)
    if path is None:
        names = [n for name in WEIGHT_FILES for n in (name, name + ".index.json")]
        raise FileNotFoundError(
            f"No weights in {directory!r}: looked for {', '.join(names)}."
        )
    if not path.endswith(".index.json"):
        return read_state_dict(path), path
    weight_map = _read_index(path)
    state = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = os.path.join(directory, shard)
        if not os.path.isfile(shard_path):
            raise ValueError(f"Shard {shard!r} listed in {path!r} is missing.")
        part = read_state_dict(shard_path)
        state.update({k: v for k, v in part.items() if weight_map.get(k) == shard})
    missing = sorted(set(weight_map) - set(state))
    if missing:
        raise ValueError(
            f"Tensors listed in {path!r} are not in their shards: {', '.join(missing[:10])}"
        )
    return state, path
