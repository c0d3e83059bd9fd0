"""The portable form of every op: `keras.ops` only, the reference.

Every backend's fast path (`keras_vit.kernels.registry`) computes what these
functions compute, and the tests hold each one to them. They are also what
runs while exporting (`export_mode`), so they keep to what every backend and
exporter expresses: matrix products on the tensors as they are, with no
reshape that merges the symbolic batch axis into another axis.
"""

import math

import keras
import numpy as np
from keras import ops


def dense(x, kernel, bias=None, axes=1, activation=None):
    """`activation(x @ kernel + bias)`, contracting the last `axes` axes of `x`.

    Args:
        x: tensor `(..., *in_dims)`, where `in_dims` are its last `axes` axes.
        kernel: tensor `(*in_dims, *out_dims)` in the dtype of `x`: the layout
            of `Dense` (`(d_in, d_out)`) and of the attention projections'
            `EinsumDense` (`(D, heads, head_dim)`, and `(heads, head_dim, D)`
            with `axes=2`).
        bias: None or a tensor of shape `out_dims`.
        axes: int, how many trailing axes of `x` the product contracts.
        activation: None or the name of an MLP activation (`activation`).

    Returns:
        A tensor `(..., *out_dims)` in the dtype of `x`.

    Example:

    >>> y = dense(np.ones((2, 3, 4), "float32"), np.ones((4, 5), "float32"),
    ...           np.arange(5, dtype="float32"))
    >>> keras.ops.convert_to_numpy(y)[1, 2].tolist()
    [4.0, 5.0, 6.0, 7.0, 8.0]
    >>> tuple(dense(np.ones((2, 3, 2, 3), "float32"), np.ones((2, 3, 4), "float32"), axes=2).shape)
    (2, 3, 4)
    """
    x = ops.convert_to_tensor(x)
    kernel, bias, out_dims = flat_weights(kernel, bias, axes)
    static, dynamic = tuple(x.shape), ops.shape(x)
    leading = [s if s is not None else dynamic[i] for i, s in enumerate(static[:-axes])]
    if axes > 1:
        x = ops.reshape(x, (-1, *leading[1:], kernel.shape[0]))
    y = ops.matmul(x, kernel)
    y = ops.cast(y if bias is None else y + bias, x.dtype)
    if len(out_dims) > 1:
        y = ops.reshape(y, (-1, *leading[1:], *out_dims))
    return _activation(y, activation)


def mlp(x, kernel_0, bias_0, kernel_1, bias_1, activation=None):
    """Two projections with `activation` between: `dense(activation(dense(x, kernel_0, bias_0)), kernel_1, bias_1)`.

    Args:
        x: tensor `(..., d_in)`.
        kernel_0, kernel_1: tensors `(d_in, hidden)` and `(hidden, d_out)`.
        bias_0, bias_1: None or tensors `(hidden,)` and `(d_out,)`.
        activation: None or the name of an MLP activation (`activation`).

    Returns:
        A tensor `(..., d_out)` in the dtype of `x`.

    Example:

    >>> y = mlp(np.ones((2, 3), "float32"), np.ones((3, 4), "float32"), None,
    ...         np.ones((4, 1), "float32"), np.ones((1,), "float32"))
    >>> keras.ops.convert_to_numpy(y)[:, 0].tolist()
    [13.0, 13.0]
    """
    return dense(dense(x, kernel_0, bias_0, activation=activation), kernel_1, bias_1)


def flat_weights(kernel, bias, axes):
    """`(kernel (d_in, width), bias (width,) or None, out_dims)` of a projection."""
    kernel = ops.convert_to_tensor(kernel)
    out_dims = tuple(kernel.shape[axes:])
    width = math.prod(out_dims)
    if len(kernel.shape) != 2:
        kernel = ops.reshape(kernel, (-1, width))
    if bias is not None:
        bias = ops.convert_to_tensor(bias)
        if len(bias.shape) != 1:
            bias = ops.reshape(bias, (width,))
    return kernel, bias, out_dims


def attention(q, k, v, scale, mask=None):
    """Softmax attention as `(batch, heads, tokens, dim)` batched products.

    Args:
        q, k, v: tensors `(batch, tokens, heads, head_dim)`.
        scale: float.
        mask: None or a boolean tensor of rank 4 broadcastable to
            `(batch, heads, queries, keys)` (`keras_vit.kernels.attention`
            takes other ranks).

    Returns:
        A tensor `(batch, queries, heads, head_dim)` in the dtype of `v`.

    Example:

    >>> q = np.ones((1, 3, 1, 2), "float32")
    >>> v = np.arange(6, dtype="float32").reshape(1, 3, 1, 2)
    >>> keras.ops.convert_to_numpy(attention(q, q, v, 0.5))[0, :, 0].tolist()
    [[2.0, 3.0], [2.0, 3.0], [2.0, 3.0]]
    """
    # k to (batch, heads, tokens, dim), then its last two axes swapped: the
    # form Inductor's attention fusion reads correctly (a single transpose
    # to (batch, heads, dim, tokens) made it call its fused kernel on
    # `(batch, tokens, ...)` keys under torch.compile and fail).
    keys = ops.swapaxes(ops.transpose(k, (0, 2, 1, 3)), -2, -1)
    logits = ops.matmul(ops.transpose(q, (0, 2, 1, 3)), keys)
    probs = masked_softmax(ops.cast(logits, "float32") * scale, mask)
    context = ops.matmul(ops.cast(probs, v.dtype), ops.transpose(v, (0, 2, 1, 3)))
    return ops.transpose(context, (0, 2, 1, 3))


def decomposed_attention(q, k, v, scale, rows, columns):
    """Softmax attention with a per-axis bias of keys on a grid (MViTv2's
    decomposed relative positions): the logit of query `i` and the key at row
    `y`, column `x` of the keys' `(h, w)` grid is
    `scale * q_i . k_(y, x) + rows[i, y] + columns[i, x]`.

    Args:
        q: `(batch, queries, heads, head_dim)`.
        k, v: `(batch, h * w, heads, head_dim)`, the keys' grid row-major.
        scale: float.
        rows: `(batch, heads, queries, h)`, float32.
        columns: `(batch, heads, queries, w)`, float32.

    Returns:
        A tensor `(batch, queries, heads, head_dim)` in the dtype of `v`.

    Example:

    >>> q = np.zeros((1, 1, 1, 2), "float32")
    >>> v = np.arange(8, dtype="float32").reshape(1, 4, 1, 2)  # a 2 x 2 grid of keys
    >>> rows = np.array([[[[0.0, -1e9]]]], "float32")  # only the first row
    >>> columns = np.zeros((1, 1, 1, 2), "float32")
    >>> keras.ops.convert_to_numpy(decomposed_attention(q, q, v, 1.0, rows, columns))[0, 0, 0].tolist()
    [1.0, 2.0]
    """
    shape = ops.shape(rows)
    bias = ops.reshape(rows[..., :, None] + columns[..., None, :],
                       (shape[0], shape[1], shape[2], rows.shape[-1] * columns.shape[-1]))
    logits = ops.einsum("bqhd,bthd->bhqt", q, k)
    probs = ops.softmax(ops.cast(logits, "float32") * scale + bias, axis=-1)
    return ops.einsum("bhqt,bthk->bqhk", ops.cast(probs, v.dtype), v)


def attention_probs(q, k, scale, mask=None):
    """`softmax(q k^T * scale)` `(batch, heads, queries, keys)` in float32.

    Example:

    >>> q = np.ones((1, 3, 1, 4), "float32")
    >>> p = attention_probs(q, q, 0.5, mask=np.tril(np.ones((1, 1, 3, 3), bool)))
    >>> keras.ops.convert_to_numpy(p)[0, 0, :2].tolist()  # queries 0 and 1
    [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]
    """
    logits = ops.einsum("bqhd,bthd->bhqt", q, k)
    return masked_softmax(ops.cast(logits, "float32") * scale, mask)


def masked_softmax(logits, mask):
    """The softmax of float32 `logits` over the last axis, where `mask` allows.

    A query that may attend to no key gets zeros. Masked logits take a finite
    floor rather than -inf: a row with no allowed key would otherwise be NaN,
    and so would every gradient flowing through it.

    Example:

    >>> p = masked_softmax(np.zeros((2, 2), "float32"), np.array([[True, False], [False, False]]))
    >>> keras.ops.convert_to_numpy(p).tolist()
    [[1.0, 0.0], [0.0, 0.0]]
    """
    if mask is None:
        return ops.softmax(logits, axis=-1)
    floor = float(np.finfo("float32").min)
    probs = ops.softmax(ops.where(mask, logits, floor), axis=-1)
    return ops.where(mask, probs, 0.0)


def take(x, indices, axis):
    """`x`'s entries at `indices` along `axis` (`keras.ops.take`).

    Example:

    >>> x = np.arange(6, dtype="float32").reshape(1, 3, 2)
    >>> keras.ops.convert_to_numpy(take(x, np.array([2, 0]), axis=1))[0].tolist()
    [[4.0, 5.0], [0.0, 1.0]]
    """
    return ops.take(x, indices, axis=axis)


def resize_bilinear(images, size, align_corners=False, scale=None, take_function=take):
    """Bilinear resize of `(batch, height, width, channels)` maps, as torch's
    `interpolate(mode="bilinear")` computes it (no antialiasing).

    For each axis the two source rows of every output row are gathered and
    blended (a lerp): a few multiply-adds per output value, where a `(new,
    old)` matrix product would cost `old` of them.

    Args:
        images: tensor `(batch, height, width, channels)`.
        size: `(new_height, new_width)`, ints or scalar int tensors.
        align_corners: bool: source position `i * (old - 1) / (new - 1)`;
            else half-pixel, `(i + 0.5) * old / new - 0.5` clamped at 0.
        scale: None or a number: the `scale_factor` `size` came from (the
            half-pixel source then steps by `1 / scale`, not `old / new`).
        take_function: `take(x, indices, axis)` of the gathers (the
            dispatcher passes its own, which takes the exporters' form
            while exporting).

    Returns:
        A tensor `(batch, new_height, new_width, channels)` in the dtype of
        `images`.

    Example:

    >>> x = np.arange(4, dtype="float32").reshape(1, 2, 2, 1)
    >>> y = resize_bilinear(x, (3, 3), align_corners=True)
    >>> keras.ops.convert_to_numpy(y)[0, :, :, 0].tolist()
    [[0.0, 0.5, 1.0], [1.0, 1.5, 2.0], [2.0, 2.5, 3.0]]
    """
    images = ops.convert_to_tensor(images)
    x = _resize_axis(images, size[0], 1, align_corners, scale, take_function)
    return _resize_axis(x, size[1], 2, align_corners, scale, take_function)


def _resize_axis(x, new, axis, align_corners, scale, take_function):
    old = x.shape[axis] if x.shape[axis] is not None else ops.shape(x)[axis]
    if isinstance(old, int) and isinstance(new, int) and old == new and (scale is None or scale == 1):
        return x
    low, high, weight = _taps(new, old, align_corners, scale)
    shape = [1] * len(x.shape)
    shape[axis] = -1
    weight = ops.cast(ops.reshape(weight, shape), x.dtype)
    first = take_function(x, low, axis)
    second = take_function(x, high, axis)
    return first + (second - first) * weight


def _taps(new, old, align_corners, scale=None):
    """`(low, high, weight of high)` of each of `new` output rows over `old`."""
    new_f = ops.cast(new, "float32")
    old_f = ops.cast(old, "float32")
    # `arange(0, n)`: jax2onnx traces only the form with a stop.
    position = ops.cast(ops.arange(0, new), "float32")
    if align_corners:
        step = (old_f - 1.0) / ops.maximum(new_f - 1.0, 1.0)
        source = position * step
    else:
        step = old_f / new_f if scale is None else 1.0 / float(scale)
        source = ops.maximum((position + 0.5) * step - 0.5, 0.0)
    low = ops.minimum(ops.floor(source), old_f - 1.0)
    weight = source - low
    low = ops.cast(low, "int32")
    high = ops.minimum(low + 1, ops.cast(old, "int32") - 1)
    return low, high, weight


def gelu(x, approximate=True):
    """GELU: the tanh approximation, or the exact form with `approximate=False`.

    Example:

    >>> round(float(gelu(keras.ops.ones(()), approximate=False)), 4)
    0.8413
    """
    return ops.gelu(x, approximate=approximate)


def activation(x, name, gelu_function=gelu):
    """The MLP activation `name`: "gelu_tanh", "gelu" or "quick_gelu".

    `gelu_function(x, approximate)` computes the GELUs (the dispatcher passes
    its own, which takes the exporters' form while exporting).

    Example:

    >>> float(activation(keras.ops.ones(()), "quick_gelu")) == float(keras.ops.sigmoid(1.702))
    True
    """
    if name == "quick_gelu":
        # OpenAI CLIP's sigmoid approximation of GELU.
        return x * ops.sigmoid(1.702 * x)
    return gelu_function(x, approximate=name == "gelu_tanh")


def _activation(x, name):
    return x if name is None else activation(x, name)


def call_sublayer(layer, x, args, kwargs):
    """`layer(x, *args, **kwargs)`: the layer's call through Keras' `__call__`.

    Example:

    >>> norm = keras.layers.LayerNormalization()
    >>> tuple(call_sublayer(norm, np.ones((1, 3, 4), "float32"), (), {}).shape)
    (1, 3, 4)
    """
    return layer(x, *args, **kwargs)


def conv_relu_conv(x, first, second, size=None):
    """`second(relu(first(x)))` for two convolution layers: a dense head's last
    convolutions; with `size`, on `x` resized to `size` first (bilinear,
    corners aligned: DPT's head).

    Example:

    >>> first, second = keras.layers.Conv2D(4, 3, padding="same"), keras.layers.Conv2D(1, 1)
    >>> tuple(conv_relu_conv(np.ones((1, 5, 6, 2), "float32"), first, second).shape)
    (1, 5, 6, 1)
    >>> tuple(conv_relu_conv(np.ones((1, 5, 6, 2), "float32"), first, second, (9, 11)).shape)
    (1, 9, 11, 1)
    """
    if size is not None:
        x = resize_bilinear(x, size, align_corners=True)
    return second(ops.relu(first(x)))


def call_adds_nothing(layer, x):
    """Whether Keras' `__call__` of `layer` on the tensor `x` adds nothing to
    `layer.call(x)` that a backend's sublayer path would have to repeat.

    For a built layer that is not quantized or rematerialised by Keras, has
    no activity regularizer, and an input without a mask. The backends'
    paths add their own conditions (the tensor's type and dtype, hooks, the
    autocast scope).

    Example:

    >>> norm = keras.layers.LayerNormalization()
    >>> call_adds_nothing(norm, keras.ops.ones((1, 2)))  # not built
    False
    """
    from keras.src.backend import get_keras_mask

    if not layer.built:
        return False
    if getattr(layer, "quantization_mode", None) is not None or getattr(layer, "_remat_mode", None):
        return False
    return getattr(layer, "activity_regularizer", None) is None and get_keras_mask(x) is None


def pack_for_inference(variables):
    """Nothing: the portable products read the kernels as they are.

    Example:

    >>> pack_for_inference([])
    """
    return None
