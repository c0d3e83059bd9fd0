"""The PyTorch state dict of a Hub directory: one file, or shards with an index.

transformers and timm write `model.safetensors` (preferred) or
`pytorch_model.bin`; transformers splits large models into shards listed in
`model.safetensors.index.json` / `pytorch_model.bin.index.json`
(`{"weight_map": {tensor name: shard file}}`). Files are read by
`files.read_state_dict` (safetensors, or `torch.load(weights_only=True)`).
"""

import json
import os
import re

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


def check_shards(directory):
    """Raises a ValueError if the shard index of `directory` lists a missing file.

    A directory without an index (one weights file, or none) passes: the
    readers report those.

    Example:

    >>> import json, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
    ...     json.dump({"weight_map": {"w": "model-00001-of-00001.safetensors"}}, f)
    >>> check_shards(folder)
    Traceback (most recent call last):
    ...
    ValueError: Shard 'model-00001-of-00001.safetensors' listed in ...
    """
    path = weights_file(directory)
    if path is None or not path.endswith(".index.json"):
        return
    weight_map = _read_index(path)
    for shard in sorted(set(weight_map.values())):
        if not os.path.isfile(os.path.join(directory, shard)):
            tensors = sorted(k for k, v in weight_map.items() if v == shard)
            raise ValueError(
                f"Shard {shard!r} listed in {path!r} is missing: {len(tensors)} tensors "
                f"({', '.join(tensors[:3])}{', ...' if len(tensors) > 3 else ''}) have no file. "
                f"Received: directory={directory!r}"
            )


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
    check_shards(directory)
    weight_map = _read_index(path)
    state = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = os.path.join(directory, shard)
        part = read_state_dict(shard_path)
        state.update({k: v for k, v in part.items() if weight_map.get(k) == shard})
    missing = sorted(set(weight_map) - set(state))
    if missing:
        raise ValueError(
            f"Tensors listed in {path!r} are not in their shards: {', '.join(missing[:10])}"
        )
    return state, path


_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def shard_bytes(max_shard_size):
    """Bytes of a shard size given as an int or a string ("5GB", "500MiB").

    Example:

    >>> shard_bytes("5GB"), shard_bytes("2MiB"), shard_bytes(1000)
    (5000000000, 2097152, 1000)
    """
    if isinstance(max_shard_size, bool):
        max_shard_size = None
    if isinstance(max_shard_size, int) and max_shard_size > 0:
        return max_shard_size
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)\s*", str(max_shard_size), re.IGNORECASE)
    if isinstance(max_shard_size, str) and match and float(match.group(1)) > 0:
        return int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    raise ValueError(
        "max_shard_size must be a positive number of bytes or a size such as '5GB' or '500MiB'. "
        f"Received: max_shard_size={max_shard_size!r}")


def write_state(directory, state, max_shard_size=None):
    """Writes a state dict as `model.safetensors`, or as shards with an index.

    With `max_shard_size`, tensors go in order into `model-00001-of-0000N.safetensors`
    files of at most that size (a larger tensor has a file of its own), listed in
    `model.safetensors.index.json` as transformers writes them. The weights
    files of an earlier write in the folder are removed, so that the folder
    holds one state dict.

    Args:
        directory: an existing folder.
        state: `{name: NumPy array}`.
        max_shard_size: None (one file), bytes, or a size such as "5GB".

    Returns:
        The path of the file, or of the index.

    Example:

    >>> import numpy as np, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> state = {f"w{i}": np.ones(256, "float32") for i in range(3)}
    >>> os.path.basename(write_state(folder, state, max_shard_size=2048))
    'model.safetensors.index.json'
    >>> sorted(os.listdir(folder))[:2]
    ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']
    >>> sorted(read_state(folder)[0]) == sorted(state)
    True
    """
    from safetensors.numpy import save_file

    limit = None if max_shard_size is None else shard_bytes(max_shard_size)
    shards, current, size = [], {}, 0
    for name, value in state.items():
        if limit is not None and current and size + value.nbytes > limit:
            shards.append(current)
            current, size = {}, 0
        current[name] = value
        size += value.nbytes
    shards.append(current)
    index = os.path.join(directory, WEIGHT_FILES[0] + ".index.json")
    for old in os.listdir(directory):
        if old == WEIGHT_FILES[0] or old == os.path.basename(index) or re.fullmatch(
                r"model-\d{5}-of-\d{5}\.safetensors", old):
            os.remove(os.path.join(directory, old))
    if len(shards) == 1 and limit is None:
        path = os.path.join(directory, WEIGHT_FILES[0])
        save_file(state, path, metadata={"format": "pt"})
        return path
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, os.path.join(directory, file), metadata={"format": "pt"})
        weight_map.update({name: file for name in shard})
    total = sum(int(v.nbytes) for v in state.values())
    with open(index, "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return index
