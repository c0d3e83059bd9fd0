"""The kernels' public functions: each dispatches to a fast path or the portable form.

For each call the dispatcher takes the first override registered for the
backend (`keras_vit.kernels.registry`) that is enabled (`disabled`,
`portable_only`), pays on this machine (its hardware rule, unless `forced`)
and computes the call (it returns `NotImplemented` for a call it cannot
compute); otherwise the portable form (`keras_vit.kernels.portable`). Inside
`export_mode()` only the exporters' workarounds are tried.
"""

import math

import keras
from keras import ops

from keras_vit.kernels import portable, registry, switches


def _dispatch(op, *args):
    """An override's result for `op(*args)`, or NotImplemented (run the portable form)."""
    overrides = registry.active(
        op, keras.backend.backend(), switches.exporting(), switches._DISABLED.value
    )
    for override in overrides:
        if override.export or switches.is_forced(override.name) or override.pays(*args):
            out = override.function(*args)
            if out is not NotImplemented:
                return out
    return NotImplemented


def dense(x, kernel, bias=None, axes=1, activation=None):
    """`activation(x @ kernel + bias)` through the fastest path that pays here.

    Arguments and result as `keras_vit.kernels.portable.dense`, plus
    `activation`: None or the name of an MLP activation (`activation`).

    Example:

    >>> import numpy as np
    >>> y = dense(np.ones((2, 3, 4), "float32"), np.ones((4, 2, 3), "float32"),
    ...           activation="gelu")
    >>> tuple(y.shape), round(float(keras.ops.convert_to_numpy(y)[0, 0, 0, 0]), 3)
    ((2, 3, 2, 3), 4.0)
    """
    y = _dispatch("dense", x, kernel, bias, axes, activation)
    if y is NotImplemented:
        y = portable.dense(x, kernel, bias, axes)
        y = _activation(y, activation)
    return y


def project(layer, x, activation=None, axes=1):
    """A `Dense` or `EinsumDense` projection of `x`, then `activation`.

    The layer's kernel and bias, cast to its compute dtype, go through
    `dense`; a quantized or LoRA-enabled layer computes more than
    `x @ kernel + bias` and is called as the Keras layer it is.

    Args:
        layer: a built `keras.layers.Dense` or `EinsumDense` whose equation
            contracts the last `axes` axes of `x` (the layouts of `dense`).
        x: its input.
        activation: None or the name of an MLP activation.
        axes: int, how many trailing axes of `x` the product contracts.

    Returns:
        `activation(layer(x))`.

    Example:

    >>> import numpy as np
    >>> layer = keras.layers.EinsumDense("btd,dhk->bthk", output_shape=(None, 2, 3), bias_axes="hk")
    >>> layer.build((1, 5, 4))
    >>> x = np.random.default_rng(0).normal(size=(1, 5, 4)).astype("float32")
    >>> y, expected = (keras.ops.convert_to_numpy(t) for t in (project(layer, x), layer(x)))
    >>> bool(np.allclose(y, expected, atol=1e-6))
    True
    """
    if not runs_plain(layer):
        y = layer(x)
        return _activation(y, activation)
    return dense(x, *_weights(layer), axes=axes, activation=activation)


def _weights(layer):
    """A plain projection's kernel and bias (or None), cast to its compute dtype."""
    dtype = layer.compute_dtype
    return ops.cast(layer.kernel, dtype), None if layer.bias is None else ops.cast(layer.bias, dtype)


def mlp(x, kernel_0, bias_0, kernel_1, bias_1, activation=None):
    """Two projections with `activation` between, through the fastest path that pays here.

    Arguments and result as `keras_vit.kernels.portable.mlp`. Where no path
    takes the pair whole, each projection goes through `dense`.

    Example:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x, k0, k1 = (rng.normal(size=s).astype("float32") for s in ((2, 5, 4), (4, 8), (8, 4)))
    >>> y = mlp(x, k0, None, k1, None, "gelu")
    >>> expected = dense(dense(x, k0, activation="gelu"), k1)
    >>> bool(np.allclose(keras.ops.convert_to_numpy(y), keras.ops.convert_to_numpy(expected), atol=1e-6))
    True
    """
    y = _dispatch("mlp", x, kernel_0, bias_0, kernel_1, bias_1, activation)
    if y is NotImplemented:
        y = dense(dense(x, kernel_0, bias_0, activation=activation), kernel_1, bias_1)
    return y


def project_mlp(layer_0, layer_1, x, activation=None):
    """`layer_1(activation(layer_0(x)))` for two `Dense` layers: an MLP's projections.

    Their kernels and biases, cast to each layer's compute dtype, go through
    `mlp`; where either layer computes more than its product (quantized,
    LoRA), each is taken by `project`.

    Args:
        layer_0, layer_1: built `keras.layers.Dense` layers, the second
            taking the first's output.
        x: the input of `layer_0`.
        activation: None or the name of an MLP activation.

    Returns:
        `layer_1(activation(layer_0(x)))`.

    Example:

    >>> import numpy as np
    >>> layers = [keras.layers.Dense(8), keras.layers.Dense(4)]
    >>> layers[0].build((None, 4)); layers[1].build((None, 8))
    >>> x = np.random.default_rng(0).normal(size=(3, 4)).astype("float32")
    >>> y = keras.ops.convert_to_numpy(project_mlp(*layers, x, "gelu"))
    >>> expected = keras.ops.convert_to_numpy(layers[1](keras.activations.gelu(layers[0](x), approximate=False)))
    >>> bool(np.allclose(y, expected, atol=1e-5))
    True
    """
    if not (runs_plain(layer_0) and runs_plain(layer_1)):
        return project(layer_1, project(layer_0, x, activation))
    return mlp(x, *_weights(layer_0), *_weights(layer_1), activation)


def runs_plain(layer):
    """Whether a `Dense`/`EinsumDense` layer's call is just its matrix product.

    Quantized and LoRA-enabled layers compute more than `x @ kernel + bias`,
    so `project` calls them as they are.

    Example:

    >>> layer = keras.layers.Dense(2)
    >>> layer.build((None, 3))
    >>> runs_plain(layer), layer.enable_lora(1), runs_plain(layer)
    (True, None, False)
    """
    return layer.quantization_mode is None and not getattr(layer, "lora_enabled", False)


def attention(q, k, v, scale=None, mask=None):
    """Softmax attention, `softmax(q k^T * scale) v`, per head.

    The softmax is taken in float32 whatever the dtype of `q`, `k` and `v`.

    Args:
        q, k, v: tensors `(batch, tokens, heads, head_dim)`; `k` and `v` may
            have another number of tokens than `q`.
        scale: float, default `1 / sqrt(head_dim)`.
        mask: None (default: every query attends to every key) or a boolean
            tensor broadcastable to `(batch, heads, queries, keys)`: True
            where a query may attend to a key. A query that may attend to no
            key gets zeros.

    Returns:
        A tensor `(batch, tokens, heads, head_dim)` in the dtype of `v`.

    Example:

    >>> import numpy as np
    >>> q = np.random.default_rng(0).normal(size=(1, 5, 2, 4)).astype("float32")
    >>> tuple(attention(q, q, q).shape)
    (1, 5, 2, 4)
    >>> causal = np.tril(np.ones((5, 5), bool))
    >>> y = keras.ops.convert_to_numpy(attention(q, q, q, mask=causal))
    >>> bool(np.allclose(y[0, 0], q[0, 0], atol=1e-6))  # the first query sees only itself
    True
    """
    q, k, v = (ops.convert_to_tensor(t) for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    mask = _rank4_mask(mask)
    out = _dispatch("attention", q, k, v, scale, mask)
    return portable.attention(q, k, v, scale, mask) if out is NotImplemented else out


def decomposed_attention(q, k, v, rows, columns, scale=None):
    """Softmax attention with MViTv2's decomposed relative position bias.

    The keys lie on an `(h, w)` grid (row-major); the logit of query `i` and
    the key at row `y`, column `x` is `scale * q_i . k_(y, x) + rows[i, y] +
    columns[i, x]` (ViTDet's and Segment Anything's attention, whose per-axis
    terms come from the queries: `DecomposedRelativePosition.terms`). The
    softmax is taken in float32.

    Args:
        q: a tensor `(batch, queries, heads, head_dim)`.
        k, v: tensors `(batch, h * w, heads, head_dim)`.
        rows: `(batch, heads, queries, h)`, the bias of each key row.
        columns: `(batch, heads, queries, w)`, the bias of each key column.
        scale: float, default `1 / sqrt(head_dim)`.

    Returns:
        A tensor `(batch, queries, heads, head_dim)` in the dtype of `v`.

    Example:

    >>> import numpy as np
    >>> q = np.random.default_rng(0).normal(size=(1, 6, 2, 4)).astype("float32")
    >>> rows, columns = np.zeros((1, 2, 6, 2), "float32"), np.zeros((1, 2, 6, 3), "float32")
    >>> y = decomposed_attention(q, q, q, rows, columns)  # zero terms: plain attention
    >>> bool(np.allclose(keras.ops.convert_to_numpy(y), keras.ops.convert_to_numpy(attention(q, q, q)), atol=1e-6))
    True
    """
    q, k, v = (ops.convert_to_tensor(t) for t in (q, k, v))
    rows, columns = (ops.cast(t, "float32") for t in (rows, columns))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if rows.shape[-1] is not None and columns.shape[-1] is not None and k.shape[1] is not None and (
            rows.shape[-1] * columns.shape[-1] != k.shape[1]):
        raise ValueError(
            "`rows` and `columns` must index the keys' grid: h * w keys. Received: "
            f"{k.shape[1]} keys, rows of shape {tuple(rows.shape)}, columns of shape {tuple(columns.shape)}"
        )
    out = _dispatch("decomposed_attention", q, k, v, scale, rows, columns)
    return portable.decomposed_attention(q, k, v, scale, rows, columns) if out is NotImplemented else out


def attention_probs(q, k, scale=None, mask=None):
    """The attention probabilities `softmax(q k^T * scale)`, float32.

    What `attention` multiplies the values by, for inspection and for
    attention dropout, with the same masking.

    Args:
        q, k: tensors `(batch, tokens, heads, head_dim)`.
        scale: float, default `1 / sqrt(head_dim)`.
        mask: None or a boolean tensor broadcastable to
            `(batch, heads, queries, keys)`, as in `attention`.

    Returns:
        A float32 tensor `(batch, heads, queries, keys)`.

    Example:

    >>> import numpy as np
    >>> q = np.ones((1, 3, 1, 4), "float32")
    >>> p = attention_probs(q, q, mask=np.tril(np.ones((3, 3), bool)))
    >>> keras.ops.convert_to_numpy(p)[0, 0, :2].tolist()  # queries 0 and 1
    [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]
    """
    q, k = ops.convert_to_tensor(q), ops.convert_to_tensor(k)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return portable.attention_probs(q, k, scale, _rank4_mask(mask))


def _rank4_mask(mask):
    """`mask` as a boolean tensor of rank 4 (leading axes added), or None."""
    if mask is None:
        return None
    mask = ops.convert_to_tensor(mask)
    dtype = keras.backend.standardize_dtype(mask.dtype)
    if dtype != "bool" or len(mask.shape) > 4:
        raise ValueError(
            "`mask` must be a boolean tensor broadcastable to (batch, heads, queries, keys). "
            f"Received: mask with dtype={dtype}, shape={tuple(mask.shape)}"
        )
    while len(mask.shape) < 4:
        mask = ops.expand_dims(mask, 0)
    return mask


def take(x, indices, axis):
    """`x`'s entries at the int `indices` (a vector) along `axis`.

    Example:

    >>> import numpy as np
    >>> x = np.arange(6, dtype="float32").reshape(1, 3, 2)
    >>> keras.ops.convert_to_numpy(take(x, np.array([2, 0]), axis=1))[0].tolist()
    [[4.0, 5.0], [0.0, 1.0]]
    """
    y = _dispatch("take", x, indices, axis)
    return portable.take(x, indices, axis) if y is NotImplemented else y


def pad(x, pad_width, constant_values=0.0):
    """`keras.ops.pad(x, pad_width, constant_values=...)` (constant mode),
    by concatenation. Keras' `pad` makes an operation object at each call,
    and torch.compile takes the naming of that object for a change of
    Keras' state that ends its graph at the next layer call.

    Args:
        x: a tensor.
        pad_width: one `(before, after)` pair of ints per axis.
        constant_values: the value of the added entries.

    Example:

    >>> import numpy as np
    >>> x = np.ones((1, 2), "float32")
    >>> keras.ops.convert_to_numpy(pad(x, ((0, 1), (1, 0)), constant_values=-1.0)).tolist()
    [[-1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]
    """
    if len(pad_width) != len(x.shape):
        raise ValueError(f"`pad_width` must hold one (before, after) pair per axis of x ({len(x.shape)}). "
                         f"Received: pad_width={pad_width!r}")
    for axis, (before, after) in enumerate(pad_width):
        if not before and not after:
            continue
        # The blocks from a slice of `x` (`full_like`, repeated): no shape
        # is spelled out, so symbolic sizes (an exporter's batch) pass through.
        edge = ops.full_like(x[(slice(None),) * axis + (slice(0, 1),)], constant_values)
        parts = [x]
        if before:
            parts.insert(0, ops.repeat(edge, before, axis=axis) if before > 1 else edge)
        if after:
            parts.append(ops.repeat(edge, after, axis=axis) if after > 1 else edge)
        x = ops.concatenate(parts, axis=axis)
    return x


def resize_bilinear(images, size, align_corners=False, scale=None):
    """Bilinear resize of `(batch, height, width, channels)` maps, torch's way.

    Arguments and result as `keras_vit.kernels.portable.resize_bilinear`.

    Example:

    >>> import numpy as np
    >>> x = np.arange(4, dtype="float32").reshape(1, 2, 2, 1)
    >>> keras.ops.convert_to_numpy(resize_bilinear(x, (2, 4)))[0, 0, :, 0].tolist()
    [0.0, 0.25, 0.75, 1.0]
    """
    y = _dispatch("resize_bilinear", images, size, align_corners, scale)
    if y is NotImplemented:
        y = portable.resize_bilinear(images, size, align_corners, scale, take_function=take)
    return y


def gelu(x, approximate=True):
    """GELU: the tanh approximation, or the exact form with `approximate=False`.

    Example:

    >>> round(float(gelu(keras.ops.ones(()), approximate=False)), 4)
    0.8413
    """
    y = _dispatch("gelu", x, approximate)
    return portable.gelu(x, approximate) if y is NotImplemented else y


def activation(x, name):
    """The MLP activation `name` (one of `keras_vit.layers.config.MLP_ACTIVATIONS`).

    Example:

    >>> float(activation(keras.ops.ones(()), "quick_gelu")) == float(keras.ops.sigmoid(1.702))
    True
    """
    return portable.activation(x, name, gelu_function=gelu)


def _activation(x, name):
    return x if name is None else activation(x, name)


def call_sublayer(layer, x, *args, **kwargs):
    """`layer(x, *args, **kwargs)`, by a faster call where it computes the same.

    On torch's eager path Keras' `__call__` bookkeeping (dtype conversion,
    masks, autocast and name scopes, torch's module hooks) costs more than a
    small layer's computation; there a sublayer's `call` runs directly where
    `__call__` would add nothing. Pass `training` explicitly where the layer
    takes it.

    Args:
        layer: a built Keras layer.
        x: its first input.
        *args, **kwargs: the rest of its call arguments.

    Returns:
        What `layer(x, *args, **kwargs)` returns.

    Example:

    >>> import numpy as np
    >>> norm = keras.layers.LayerNormalization()
    >>> norm.build((1, 3, 4))
    >>> x = keras.ops.convert_to_tensor(np.arange(12, dtype="float32").reshape(1, 3, 4))
    >>> bool(keras.ops.all(call_sublayer(norm, x) == norm(x)))
    True
    """
    y = _dispatch("call_sublayer", layer, x, args, kwargs)
    return portable.call_sublayer(layer, x, args, kwargs) if y is NotImplemented else y


def conv_relu_conv(x, first, second, size=None):
    """`second(relu(first(x)))` for two convolution layers, through the fastest path that pays here.

    Where no path takes the pair whole, the resize goes through
    `resize_bilinear` and each convolution through `call_sublayer`.

    Args:
        x: NHWC maps.
        first, second: convolution layers, `second` taking `first`'s output.
        size: None (default) or `(height, width)`: `x` is resized there
            first, bilinear with corners aligned (DPT's head).

    Returns:
        `second(relu(first(x)))` of the (resized) maps.

    Example:

    >>> import numpy as np
    >>> first, second = keras.layers.Conv2D(4, 3, padding="same"), keras.layers.Conv2D(1, 1)
    >>> x = np.random.default_rng(0).normal(size=(1, 5, 6, 2)).astype("float32")
    >>> y = keras.ops.convert_to_numpy(conv_relu_conv(x, first, second))
    >>> bool(np.allclose(y, keras.ops.convert_to_numpy(second(keras.ops.relu(first(x)))), atol=1e-6))
    True
    """
    size = None if size is None else tuple(size)
    y = _dispatch("conv_relu_conv", x, first, second, size)
    if y is NotImplemented:
        if size is not None:
            x = resize_bilinear(x, size, align_corners=True)
        y = call_sublayer(second, ops.relu(call_sublayer(first, x)))
    return y


def pack_for_inference(variables):
    """Lets the projections keep these kernels in the layout their GEMM reads.

    On torch, where the projections run on oneDNN, each marked kernel is
    reordered to oneDNN's blocked layout once, on first use, and again only
    after it changes, instead of on every call; it holds a second copy of
    the weights, which is why only `ViT.for_inference` asks for it.
    Elsewhere nothing happens.

    Args:
        variables: Keras variables; those of rank 2 or more are marked.

    Example:

    >>> layer = keras.layers.Dense(4)
    >>> layer.build((None, 3))
    >>> pack_for_inference(layer.weights)
    """
    _dispatch("pack_for_inference", variables)
