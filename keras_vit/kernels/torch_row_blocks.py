"""torch's last convolutions of a dense head on large maps, a block of rows at a time.

The "row_blocked_convs" path of `kernels.conv_relu_conv` (docs/performance.md).
"""

import keras

from keras_vit.kernels.registry import register
from keras_vit.kernels.torch_backend import compiling, conv2d_weights, direct_call_applies, recording, transforms
from keras_vit.kernels.torch_resize import interpolate

# glibc serves an allocation above its largest mmap threshold (32 MiB on
# 64-bit systems, whatever the tunables say) with fresh pages from the
# kernel at every call, each faulted in on first write. The paths that take
# large activations in blocks ("row_chunked_mlp", "row_blocked_convs") do so
# only above `FRESH_PAGES`, in blocks of `BLOCK_BYTES`: a size the heap
# reuses from call to call.
FRESH_PAGES = 32 << 20
BLOCK_BYTES = 16 << 20
# A resized block holds its rows at the output's width and the hidden map,
# each about this size: smaller blocks stay in cache (Depth Anything's head
# at 518 px: 64 rows a block).
RESIZED_BLOCK_BYTES = 4 << 20


def _plain(layer, x):
    """Whether `layer` is a `Conv2D` of stride and dilation 1, odd "same" (or
    "valid" 1x1) kernel, no activation or constraint, called directly on `x`."""
    if type(layer) is not keras.layers.Conv2D or layer.data_format != "channels_last" or layer.groups != 1:
        return False
    if set(layer.strides) != {1} or set(layer.dilation_rate) != {1}:
        return False
    if layer.kernel_constraint is not None or layer.bias_constraint is not None:
        return False
    if layer.activation is not keras.activations.linear:
        return False
    if layer.padding == "valid" and tuple(layer.kernel_size) != (1, 1):
        return False
    return all(size % 2 for size in layer.kernel_size) and direct_call_applies(layer, x)


@register("conv_relu_conv", "torch", "row_blocked_convs")
def row_blocked_convs(x, first, second, size=None):
    """`second(relu(first(x)))`, with `size` on `x` resized there first
    (bilinear, corners aligned), a block of output rows at a time where the
    first convolution's output would pass glibc's largest mmap threshold
    (Depth Anything's head at 518 px: 518 x 518 x 32 floats); NotImplemented
    elsewhere.

    Each block reads its rows of the (resized) map and `first`'s halo (half
    its kernel's height) on either side; the rows the map's zero padding
    would change are computed and dropped, so its values are those of the
    whole map's convolutions. With `size` the map's height is resized
    first, whole (at the source's width), and each block's width as the
    block is made, both by torch's resize (`interpolate`). The ReLU is taken in place. For
    `Conv2D` layers that `_plain` accepts, `second` 1x1, and only where no
    gradient is recorded, outside torch.compile and function transforms.

    Example:

    >>> import numpy as np, torch
    >>> from keras_vit.kernels import portable
    >>> first, second = keras.layers.Conv2D(128, 3, padding="same"), keras.layers.Conv2D(1, 1)
    >>> x = keras.ops.convert_to_tensor(np.random.default_rng(0).normal(size=(1, 130, 130, 4)), "float32")
    >>> first.build((1, 260, 260, 4)); second.build((1, 260, 260, 128))
    >>> with torch.no_grad():
    ...     y = row_blocked_convs(x, first, second, (260, 261))
    ...     expected = portable.conv_relu_conv(x, first, second, (260, 261))
    >>> bool(torch.allclose(y, expected, atol=1e-4))
    True
    """
    import torch
    import torch.nn.functional as F

    if not isinstance(x, torch.Tensor) or x.dim() != 4 or not x.is_floating_point():
        return NotImplemented
    if compiling() or transforms() or not (first.built and second.built):
        return NotImplemented
    if not (_plain(first, x) and _plain(second, x)) or tuple(second.kernel_size) != (1, 1):
        return NotImplemented
    (k1, b1), (k2, b2) = conv2d_weights(first), conv2d_weights(second)
    if recording(x, *(t for t in (k1, b1, k2, b2) if t is not None)):
        return NotImplemented
    batch, height, width, _ = x.shape
    if size is not None:
        height, width = (int(n) for n in size)
    row_bytes = batch * width * first.filters * x.element_size()
    if height * row_bytes <= FRESH_PAGES:
        return NotImplemented
    # "valid" only 1x1 (`_plain`): no halo, no side padding.
    halo, side = (0, 0) if first.padding == "valid" else (first.kernel_size[0] // 2, first.kernel_size[1] // 2)
    if size is None:
        step = max(1, BLOCK_BYTES // row_bytes)
        rows_of = lambda low, high: x[:, low:high]  # noqa: E731
    else:
        step = max(1, RESIZED_BLOCK_BYTES // row_bytes)
        rows_of = _resized_rows(x, height, width)
    out = x.new_empty((batch, height, width, second.filters))
    for start in range(0, height, step):
        stop = min(height, start + step)
        low, high = max(0, start - halo), min(height, stop + halo)
        rows = rows_of(low, high).permute(0, 3, 1, 2)  # the channels-last view of those rows
        hidden = F.conv2d(rows, k1, b1, padding=(halo, side))[:, :, start - low:stop - low]
        torch.relu_(hidden)
        out[:, start:stop] = F.conv2d(hidden, k2, b2).permute(0, 2, 3, 1)
    return out


def _resized_rows(x, height, width):
    """`rows(low, high)`: rows `low:high` of the NHWC maps `x` resized to
    `(height, width)`, bilinear with corners aligned (torch's "interpolate"
    path): the height resized once for the whole map (at the source's
    width), each block's width when it is asked for (a block keeps its
    height, so the resize is the identity along it)."""
    tall = interpolate(x, (height, x.shape[2]), True, None)
    return lambda low, high: interpolate(tall[:, low:high], (high - low, width), True, None)
