"""Official vit_jax and big_vision `.npz` files <-> the canonical layout.

The canonical layout is the official vit_jax one, so the table is mostly
the identity. What it adds:

- Linen module numbering (big_vision, newer vit_jax: `LayerNorm_1`,
  `MultiHeadDotProductAttention_0`, `MlpBlock_0`) renamed to the pre-Linen
  one of the files (`LayerNorm_2`, `..._1`, `MlpBlock_3`): the two never
  share a name, so the renames need no detection;
- GroupNorm parameters of the hybrids stored `(1, 1, 1, C)` flattened;
- an optional `params/` or `opt/target/` prefix (the rest is training
  state, ignored), scanned blocks (`Transformer/encoderblock/...` with a
  leading depth axis), and big_vision's `pos_embedding`, added before the
  class token is prepended: the canonical embedding with a zero class row.

Nothing is unpickled: files are opened with `allow_pickle=False`, and
object arrays are refused from their headers.
"""

import zipfile

import numpy as np

from keras_vit.weights import canonical as C
from keras_vit.weights.files import check_file
from keras_vit.weights.rules import RuleTable

TABLE = RuleTable(
    (
        (C.BLOCK + "MultiHeadDotProductAttention_0/{path}", C.ATTENTION + "{path}"),
        (C.BLOCK + "LayerNorm_1/{path}", C.NORM_2 + "{path}"),
        (C.BLOCK + "MlpBlock_0/{path}", C.BLOCK + "MlpBlock_3/{path}"),
        ("{dir}gn{unit}/{leaf}", "{dir}gn{unit}/{leaf}", "flatten"),
        ("{path}", "{path}"),
    )
)
# big_vision's position embedding: no class-token row.
BIG_VISION_POSEMB = "pos_embedding"
SCANNED_BLOCK = "Transformer/encoderblock/"
_PREFIXES = ("params/", "opt/target/")


def _open_zip(path):
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"Checkpoint file {path!r} is not a valid .npz archive (no zip "
            "directory found): the file is truncated, corrupt or of another "
            "format."
        )
    return zipfile.ZipFile(path)


def _read_headers(archive):
    out = {}
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
    return out


def npz_headers(path):
    """`{key: (shape, dtype)}` from the `.npy` headers, without the data.

    Raises:
        ValueError: for a file that is not a readable `.npz`, or one holding
            pickled object arrays (nothing is unpickled).
    """
    with _open_zip(path) as archive:
        try:
            out = _read_headers(archive)
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
            raise ValueError(
                f"Cannot read checkpoint {path!r} (truncated or corrupt): "
                f"{type(error).__name__}: {error}"
            ) from None
    for key, (_, dtype) in out.items():
        if dtype.hasobject:
            raise ValueError(
                f"Checkpoint {path!r} holds a pickled Python object array under key "
                f"{key!r}. Only plain numeric arrays are accepted; pickled data is "
                "never loaded (allow_pickle=False), since unpickling can run code."
            )
    return out


def strip_prefix(raw):
    """Removes a `params/` or `opt/target/` prefix; the rest is ignored.

    Example:

    >>> kept, ignored = strip_prefix({"params/cls": 1, "opt/state/step": 2})
    >>> kept, list(ignored)
    ({'cls': 1}, ['opt/state/step'])
    """
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
        if key.startswith(SCANNED_BLOCK):
            rest = key[len(SCANNED_BLOCK) :]
            for i in range(value.shape[0]):
                out[C.block(C.BLOCK, i) + rest] = value[i]
        else:
            out[key] = value
    return out


def to_canonical(raw):
    """`(params, ignored)`: official or big_vision `.npz` arrays in the canonical layout.

    Example:

    >>> import numpy as np
    >>> params, _ = to_canonical({"params/cls": np.zeros((1, 1, 4)),
    ...                           "params/pos_embedding": np.ones((1, 9, 4))})
    >>> params["Transformer/posembed_input/pos_embedding"][0, :2, 0].tolist()
    [0.0, 1.0]
    """
    params, ignored = strip_prefix(raw)
    params, _ = TABLE.to_canonical(_unscan(params))
    if BIG_VISION_POSEMB in params:
        # Added before the class token is prepended: a zero class-token row.
        posemb = params.pop(BIG_VISION_POSEMB)
        if C.CLS in params:
            posemb = np.concatenate([np.zeros_like(posemb[:, :1]), posemb], axis=1)
        params[C.POSEMB] = posemb
    return params, ignored


def read(path):
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
    params, ignored = to_canonical(raw)
    return C.Checkpoint(path, "npz", params, ignored)
