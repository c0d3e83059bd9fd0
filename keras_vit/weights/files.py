"""Reading checkpoint files safely: existence checks and PyTorch-style state
dicts (`.safetensors`, or `.pth`/`.pt`/`.bin` with `weights_only=True`) as
NumPy. Nothing is unpickled; a `.safetensors` file's tensors are read one at
a time, when their values are needed (`LazyTensor`)."""

import contextlib
import json
import os
import struct

import numpy as np


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


class LazyTensor:
    """One tensor of a `.safetensors` file, read from it when its values are needed.

    Its `shape` and `dtype` are known from the file's header; `np.asarray`
    (and any array operation or attribute) reads it (bfloat16 widened to
    float32), then applies the views a layout's rules take of it (`view`).
    Nothing is kept, so a loader that assigns tensors one at a time holds
    one at a time (`keras_vit.weights.loader.load_checkpoint`). Every read
    goes through `read_tensor`.

    Example:

    >>> import numpy as np, os, tempfile
    >>> from safetensors.numpy import save_file
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> save_file({"w": np.arange(6, dtype="float32").reshape(2, 3)}, path)
    >>> lazy = read_state_dict(path)["w"]
    >>> lazy.shape, lazy.view(lambda a: a.T).shape
    ((2, 3), (3, 2))
    >>> np.asarray(lazy.view(lambda a: a.T))[0].tolist()
    [0.0, 3.0]
    """

    def __init__(self, path, key, shape, dtype, views=(), stored=None):
        self.path, self.key = path, key
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.views = tuple(views)
        # (dtype in the file, shape in the file, byte offset), for `mapped`.
        self.stored = stored

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape))

    def __len__(self):
        return self.shape[0]

    def stand_in(self):
        """An array of this shape and dtype that occupies no memory (every stride 0)."""
        return np.lib.stride_tricks.as_strided(np.zeros(1, self.dtype), self.shape, (0,) * len(self.shape))

    def view(self, function):
        """This tensor through `function`, a view of an array (a transpose, reshape, slice)."""
        shape = function(self.stand_in()).shape
        return LazyTensor(self.path, self.key, shape, self.dtype, self.views + (function,), self.stored)

    @contextlib.contextmanager
    def mapped(self):
        """A context giving this tensor as a read-only memory map of its file.

        The values stay in the file's dtype (bfloat16 is not widened) and the
        views are applied to the map, so indexing it reads only the bytes of
        the slice taken; copy what is kept before the context ends, when the
        map is released. A tensor whose views are not views (they compute)
        is read whole.
        """
        if self.stored is None or 0 in self.stored[1]:
            yield np.asarray(self)
            return
        dtype, shape, offset = self.stored
        array = np.memmap(self.path, dtype=dtype, mode="r", offset=offset, shape=shape)
        for function in self.views:
            array = function(array)
        try:
            yield array
        finally:
            del array

    def __array__(self, dtype=None, copy=None):
        array = read_tensor(self.path, self.key)
        for function in self.views:
            array = function(array)
        return array if dtype is None else array.astype(dtype, copy=False)

    def __getattr__(self, name):
        # Anything else an array has: read it. Other names are absent without
        # a read (libraries probe tensors for attributes of their own).
        if name.startswith("_") or not hasattr(np.ndarray, name):
            raise AttributeError(name)
        return getattr(np.asarray(self), name)

    def __getitem__(self, index):
        return np.asarray(self)[index]

    def __repr__(self):
        return f"LazyTensor({self.key!r} of {os.path.basename(self.path)!r}, shape={self.shape}, dtype={self.dtype})"


def _delegate(name):
    def method(self, *args):
        return getattr(np.asarray(self), name)(*args)

    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__neg__", "__abs__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
              "__ge__", "__matmul__", "__rmatmul__", "__pow__", "__float__", "__int__", "__bool__", "__iter__"):
    setattr(LazyTensor, _name, _delegate(_name))
LazyTensor.__hash__ = object.__hash__


def _safetensors_error(path, error):
    return ValueError(f"Cannot read checkpoint {path!r}: {type(error).__name__}: {error}")


def read_tensor(path, key):
    """One tensor of a `.safetensors` file as NumPy, bfloat16 widened to float32."""
    # Registers bfloat16 with NumPy (a Keras dependency), so safetensors
    # can hand out bfloat16 tensors, which are widened here.
    import ml_dtypes  # noqa: F401
    from safetensors import safe_open

    try:
        with safe_open(path, framework="numpy") as handle:
            array = handle.get_tensor(key)
    except Exception as error:  # safetensors raises its own error types
        raise _safetensors_error(path, error) from None
    return array.astype("float32") if array.dtype.kind == "V" or array.dtype.name == "bfloat16" else array


# safetensors' dtype names, as NumPy reads them (bfloat16 is widened on reading).
_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "float32",
                       "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
                       "BOOL": "bool"}


def _stored_dtype(name):
    if name == "BF16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(_SAFETENSORS_DTYPES[name]).newbyteorder("<") if name in _SAFETENSORS_DTYPES else None


def _data_offsets(path):
    """`{key: (stored dtype or None, shape, byte offset)}` from a `.safetensors` header."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return {key: (_stored_dtype(entry["dtype"]), tuple(entry["shape"]), 8 + size + entry["data_offsets"][0])
            for key, entry in header.items()}


def _read_safetensors(path):
    """`{key: LazyTensor}` of a `.safetensors` file: its header is read, not its tensors."""
    from safetensors import safe_open

    try:
        with safe_open(path, framework="numpy") as handle:
            header = {key: handle.get_slice(key) for key in handle.keys()}
            offsets = _data_offsets(path)
            state = {
                key: LazyTensor(path, key, part.get_shape(), _SAFETENSORS_DTYPES.get(part.get_dtype(), "float32"),
                                stored=offsets[key] if offsets[key][0] is not None else None)
                for key, part in header.items()
            }
    except Exception as error:  # safetensors raises its own error types
        raise _safetensors_error(path, error) from None
    return state


def read_state_dict(path):
    """A PyTorch-style state dict from `.safetensors` (as `LazyTensor`s) or `.pth` (as NumPy)."""
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
