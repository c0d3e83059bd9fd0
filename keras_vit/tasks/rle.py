"""COCO's run-length encoding of masks, in NumPy: what the `keras-vit`
commands write in their JSON files (`keras-vit segment`, `keras-vit masks`).

A mask `(height, width)` is read column by column (Fortran order, as COCO
defines it: down the first column, then the second), and its pixels become
alternating runs of 0 and 1, starting with 0 (a mask whose first pixel is
in starts with a run of no pixels). `mask_to_rle` writes the runs as a list
(`compressed=False`: COCO's "uncompressed RLE", as transformers'
mask-generation pipeline writes it) or as COCO's compressed string
(`compressed=True`: what `pycocotools.mask.encode` returns, as ASCII text,
the form of COCO's result files); `rle_to_mask` reads either.

The string form (pycocotools' `rleToString`): each count, from the third
on less the count two before it, is written as a signed number in 5-bit
groups, least significant first, each group plus 48 as one character,
0x20 set in every group but the last, the sign in bit 0x10 of the last.

Reference: Lin et al., arXiv:1405.0312 (COCO); cocodataset/cocoapi,
`common/maskApi.c` (`rleEncode`, `rleToString`, `rleFrString`).
"""

import numpy as np


def _runs(mask):
    """The run lengths of a boolean mask, column by column, from a run of 0s."""
    flat = np.asarray(mask, bool).reshape(-1, order="F")
    if not flat.size:
        return []
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    counts = np.diff(np.concatenate([[0], changes, [flat.size]])).tolist()
    return ([0] if flat[0] else []) + [int(c) for c in counts]


def _to_string(counts):
    """pycocotools' `rleToString`: counts as its ASCII string."""
    out = []
    for i, count in enumerate(counts):
        x = count - counts[i - 2] if i > 2 else count
        more = True
        while more:
            c = x & 0x1F
            x >>= 5  # arithmetic: a negative difference keeps its sign
            more = x != -1 if c & 0x10 else x != 0
            out.append(chr((c | 0x20 if more else c) + 48))
    return "".join(out)


def _from_string(text):
    """pycocotools' `rleFrString`: the counts of its ASCII string."""
    counts, p = [], 0
    while p < len(text):
        x, k, more = 0, 0, True
        while more:
            c = ord(text[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def mask_to_rle(mask, compressed=False):
    """COCO's run-length encoding of one mask.

    Args:
        mask: a `(height, width)` mask: booleans, or numbers (non-zero: in).
        compressed: bool, default False: the counts as a list of ints
            (COCO's uncompressed RLE); True: as COCO's compressed string
            (`pycocotools.mask.encode`'s counts, decoded as ASCII).

    Returns:
        A dict `{"size": [height, width], "counts": [...] or "..."}`,
        which `json.dump` writes as it is.

    Raises:
        ValueError: a mask that is not two-dimensional.

    Example:

    >>> mask = np.array([[0, 1, 1], [1, 1, 0]], bool)
    >>> mask_to_rle(mask)
    {'size': [2, 3], 'counts': [1, 4, 1]}
    >>> mask_to_rle(mask, compressed=True)
    {'size': [2, 3], 'counts': '141'}
    >>> bool((rle_to_mask(mask_to_rle(mask, compressed=True)) == mask).all())
    True
    """
    if not isinstance(compressed, bool):
        raise ValueError(f"`compressed` must be True or False. Received: compressed={compressed!r}")
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"`mask` must be one (height, width) mask. Received: mask.shape={mask.shape}")
    counts = _runs(mask != 0)
    return {"size": [int(s) for s in mask.shape], "counts": _to_string(counts) if compressed else counts}


def rle_to_mask(rle):
    """The boolean `(height, width)` mask of a COCO run-length encoding.

    Args:
        rle: a dict with "size" `[height, width]` and "counts": a list of
            ints or COCO's compressed string (str or bytes).

    Returns:
        A `(height, width)` bool array.

    Raises:
        ValueError: counts that do not add up to the size, or negative.

    Example:

    >>> rle_to_mask({"size": [2, 2], "counts": [1, 2, 1]}).tolist()
    [[False, True], [True, False]]
    """
    height, width = (int(s) for s in rle["size"])
    counts = rle["counts"]
    if isinstance(counts, bytes):
        counts = counts.decode("ascii")
    if isinstance(counts, str):
        counts = _from_string(counts)
    counts = np.asarray(counts, "int64")
    if (counts < 0).any() or counts.sum() != height * width:
        raise ValueError(
            f"The run lengths must be counts that add up to height * width = {height * width}. "
            f"Received: {len(counts)} counts adding up to {int(counts.sum())}"
        )
    values = np.arange(len(counts)) % 2 == 1
    return np.repeat(values, counts).reshape((height, width), order="F")


__all__ = ["mask_to_rle", "rle_to_mask"]
