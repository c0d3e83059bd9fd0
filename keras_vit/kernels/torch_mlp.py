"""torch's MLP on many tokens: the two projections a block of rows at a time.

The "row_chunked_mlp" path of `kernels.mlp` (docs/performance.md).
"""

import math

from keras_vit.kernels.registry import register
from keras_vit.kernels.torch_backend import compiling, recording, transforms
from keras_vit.kernels.torch_row_blocks import BLOCK_BYTES, FRESH_PAGES

# An MLP's hidden activation passes `FRESH_PAGES` from about 2,700 tokens at
# a width of 3,072 (OWLv2 at 960 px, SAM at 1024 px).


@register("mlp", "torch", "row_chunked_mlp")
def row_chunked_mlp(x, kernel_0, bias_0, kernel_1, bias_1, activation):
    """`kernels.mlp` a block of rows at a time where its hidden activation
    would pass glibc's largest mmap threshold; NotImplemented elsewhere.

    Each block's projections go through `kernels.dense` (its fast paths),
    into one output. Only where no gradient is recorded, outside torch.compile
    (Inductor plans the graph's buffers itself) and function transforms.

    Example:

    >>> import numpy as np, torch
    >>> from keras_vit.kernels import portable
    >>> rng = np.random.default_rng(0)
    >>> x, k0, k1 = (torch.tensor(rng.normal(size=s), dtype=torch.float32) for s in ((4100, 8), (8, 2048), (2048, 8)))
    >>> y = row_chunked_mlp(x, k0, None, k1, None, "gelu")
    >>> bool(torch.allclose(y, portable.mlp(x, k0, None, k1, None, "gelu"), atol=1e-4))
    True
    >>> row_chunked_mlp(x[:10], k0, None, k1, None, "gelu") is NotImplemented
    True
    """
    import torch

    tensors = [t for t in (x, kernel_0, bias_0, kernel_1, bias_1) if t is not None]
    if any(not isinstance(t, torch.Tensor) for t in tensors) or compiling() or transforms() or recording(*tensors):
        return NotImplemented
    if kernel_0.dim() != 2 or kernel_1.dim() != 2 or x.dim() < 2:
        return NotImplemented
    rows, row_bytes = math.prod(x.shape[:-1]), kernel_0.shape[1] * x.element_size()
    if rows * row_bytes <= FRESH_PAGES:
        return NotImplemented
    from keras_vit.kernels import api

    step = max(1, BLOCK_BYTES // row_bytes)
    flat = x.reshape(rows, x.shape[-1])
    out = None
    for start in range(0, rows, step):
        hidden = api.dense(flat[start:start + step], kernel_0, bias_0, 1, activation)
        block = api.dense(hidden, kernel_1, bias_1, 1, None)
        if out is None:
            out = block.new_empty((rows, block.shape[-1]))
        out[start:start + step] = block
    return out.reshape(*x.shape[:-1], out.shape[-1])
