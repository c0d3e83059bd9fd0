"""Reading checkpoint files safely: existence checks and PyTorch-style state
dicts (`.safetensors`, or `.pth`/`.pt`/`.bin` with `weights_only=True`) as
NumPy. Nothing is unpickled."""

import os


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


def _read_safetensors(path):
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


def read_state_dict(path):
    """A PyTorch-style state dict from `.safetensors` or `.pth` as NumPy."""
    path = check_file(path)
    if path.lower().endswith(".safetensors"):
        return _read_safetensors(path)
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


def read_json(path):
    """The JSON value in `path`; a ValueError naming the file if unreadable."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        raise ValueError(f"Cannot read {path!r}: {type(error).__name__}: {error}") from None


def write_json(path, value):
    """Writes `value` as indented JSON with a final newline.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "config.json")
    >>> write_json(path, {"model_type": "vit"})
    >>> read_json(path)
    {'model_type': 'vit'}
    """
    import json

    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
