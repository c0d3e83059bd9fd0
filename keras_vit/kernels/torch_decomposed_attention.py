"""torch's attention with ViTDet's decomposed relative positions: the fused
kernel with the bias as its float mask, built a chunk of queries at a time.

The "chunked_decomposed_attention" path of `kernels.decomposed_attention`
(docs/performance.md).
"""

from keras_vit.kernels.registry import register
from keras_vit.kernels.torch_backend import compiling, recording, transforms

# Floats of the logit bias one chunk of `chunked_decomposed_attention` holds:
# 16 MiB, under glibc's largest mmap threshold (32 MiB), so each chunk reuses
# heap memory instead of mapping (and faulting in) fresh pages.
_BIAS_CHUNK = 1 << 22


@register("decomposed_attention", "torch", "chunked_decomposed_attention")
def chunked_decomposed_attention(q, k, v, scale, rows, columns):
    """The fused kernel with the decomposed bias as its float mask, made for
    one chunk of queries at a time (a global block of SAM at 1024 px would
    otherwise hold 805 MB of bias per call). float32 only.

    Example:

    >>> import numpy as np, torch
    >>> from keras_vit.kernels import portable
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (torch.tensor(rng.normal(size=(1, 6, 2, 4)), dtype=torch.float32) for _ in range(3))
    >>> rows, columns = (torch.tensor(rng.normal(size=(1, 2, 6, n)), dtype=torch.float32) for n in (2, 3))
    >>> y = chunked_decomposed_attention(q, k, v, 0.5, rows, columns)
    >>> bool(torch.allclose(y, portable.decomposed_attention(q, k, v, 0.5, rows, columns), atol=1e-6))
    True
    """
    import torch
    import torch.nn.functional as F

    tensors = (q, k, v, rows, columns)
    if compiling() or transforms() or any(not isinstance(t, torch.Tensor) or t.dtype != torch.float32
                                          for t in tensors):
        return NotImplemented
    batch, heads, queries, height = rows.shape
    width = columns.shape[-1]
    step = max(1, _BIAS_CHUNK // (batch * heads * height * width))
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    # The terms come as views of einsum results; their broadcast sum ran 8x slower strided.
    rows, columns = rows.contiguous(), columns.contiguous()
    out = q.new_empty((batch, heads, queries, v.shape[-1]))
    buffer = None if recording(*tensors) else q.new_empty((batch, heads, min(step, queries), height, width))
    for start in range(0, queries, step):
        stop = min(start + step, queries)
        pair = rows[:, :, start:stop, :, None], columns[:, :, start:stop, None, :]
        bias = torch.add(*pair) if buffer is None else torch.add(*pair, out=buffer[:, :, :stop - start])
        bias = bias.flatten(-2)
        out[:, :, start:stop] = F.scaled_dot_product_attention(q[:, :, start:stop], k, v, attn_mask=bias, scale=scale)
    return out.transpose(1, 2)
