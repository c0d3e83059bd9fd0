"""The forms XLA's CPU backend runs fastest, shared by jax and tensorflow.

`keras.ops` code with the product as a parameter (jax passes its bfloat16
products with float32 accumulation, `jax_backend.matmul`):

- `dense_rows`: a projection as one `(rows, features)` matrix product, so
  that the product and both its gradients are plain 2D GEMMs (XLA's CPU
  backend runs the kernel gradient of a 3D product, which contracts two
  axes, at about half the speed of the 2D one).
- `attention`: batched matrix products on `(batch * heads, tokens, dim)`
  tensors, where `keras.ops.dot_product_attention` is a pair of einsums
  with the batch axes in the middle on these CPUs; the scale multiplies the
  queries rather than the logits where that adds no rounding
  (`fold_scale`), and once the logits of all heads outgrow the caches the
  products and the softmax take a group of heads at a time (`head_group`),
  on jax a chunk of one head's queries at a time once a single head's
  logits do (`query_chunks`).
- `decomposed_attention`: the same with ViTDet's per-axis bias added to the
  logits, summed in the loop XLA fuses with the softmax.
- `convolution`: the two convolutions of the dense heads' upsampling that
  XLA's CPU backend runs slowly as convolutions: a `Conv2DTranspose` whose
  windows do not overlap (kernel size = strides) as one matrix product and
  a depth-to-space shuffle, and a `DepthwiseConv2D` of stride 1 as one
  multiply-add per kernel tap on shifted views, which XLA fuses into one
  loop. Only where XLA compiles the call (`convolution_pays`): tensorflow's
  graph runtime runs its own depthwise kernel faster than this form.

The measurements behind each choice: docs/performance.md.
"""

import math

import keras
from keras import ops

from keras_vit.kernels import hardware, portable
from keras_vit.kernels.switches import compiled_by_xla


def dense_rows(x, kernel, bias, axes, activation, matmul=ops.matmul, epilogue=None):
    """`portable.dense` as one 2D product over the flattened leading axes.

    Args:
        x, kernel, bias, axes, activation: as `portable.dense`.
        matmul: the 2D product `(a, b) -> a @ b` (its result may be wider
            than `x`'s dtype; it is cast back after the bias).
        epilogue: None or `(y, bias, activation, dtype) -> activation(y + bias)`
            in `dtype`, on the 2D product.

    Example:

    >>> import numpy as np
    >>> y = dense_rows(np.ones((2, 3, 4), "float32"), np.ones((4, 2, 5), "float32"), None, 1, None)
    >>> tuple(y.shape)
    (2, 3, 2, 5)
    """
    x = ops.convert_to_tensor(x)
    kernel, bias, out_dims = portable.flat_weights(kernel, bias, axes)
    epilogue = epilogue or bias_and_activation
    static, dynamic = tuple(x.shape), ops.shape(x)
    if len(static) == 2 and axes == 1:
        return epilogue(matmul(x, kernel), bias, activation, x.dtype)
    leading = [s if s is not None else dynamic[i] for i, s in enumerate(static[:-axes])]
    y = matmul(ops.reshape(x, (-1, kernel.shape[0])), kernel)
    y = epilogue(y, bias, activation, x.dtype)
    return ops.reshape(y, (*leading, *out_dims))


def bias_and_activation(y, bias, activation, dtype):
    """`activation(y + bias)` in `dtype`."""
    y = y if bias is None else y + bias
    y = ops.cast(y, dtype)
    return y if activation is None else portable.activation(y, activation)


def attention(q, k, v, scale, mask=None, matmul=ops.matmul):
    """`portable.attention` as batched products over `(batch * heads)`.

    Args:
        q, k, v, scale, mask: as `portable.attention`.
        matmul: the batched product (its result may be wider than its
            operands' dtype).

    Example:

    >>> import numpy as np
    >>> q = keras.ops.convert_to_tensor(np.random.default_rng(0).normal(size=(2, 5, 3, 4)), "float32")
    >>> y, expected = attention(q, q, q, 0.5), portable.attention(q, q, q, 0.5)
    >>> bool(np.allclose(keras.ops.convert_to_numpy(y), keras.ops.convert_to_numpy(expected), atol=1e-6))
    True
    """
    if fold_scale(q, scale):
        q, scale = q * ops.cast(scale, q.dtype), 1.0
    static, dynamic = tuple(q.shape), ops.shape(q)
    tokens = static[1] if static[1] is not None else dynamic[1]
    heads = (_heads_first(q), _heads_first(k, tokens_last=True), _heads_first(v))
    # Groups of heads would split the logits along an axis the mask may broadcast over.
    group = head_group(q, k) if mask is None else None
    if group:
        context = _grouped_attention(*heads, scale, group, matmul)
    else:
        context = _attention_heads(*heads, scale, matmul, mask, static[2])
    context = ops.reshape(context, (-1, static[2], tokens, static[3]))
    return ops.transpose(context, (0, 2, 1, 3))


def _heads_first(x, tokens_last=False):
    """`(batch, tokens, heads, dim)` -> `(batch * heads, tokens, dim)`
    (or `(batch * heads, dim, tokens)`)."""
    static, dynamic = tuple(x.shape), ops.shape(x)
    tokens = static[1] if static[1] is not None else dynamic[1]
    x = ops.transpose(x, (0, 2, 3, 1) if tokens_last else (0, 2, 1, 3))
    shape = (static[3], tokens) if tokens_last else (tokens, static[3])
    return ops.reshape(x, (-1, *shape))


def fold_scale(q, scale):
    """Whether `q * scale` replaces `logits * scale` without rounding more.

    The logits hold `tokens` times as many values as the queries, so the
    queries take the scale where the compiler does not fuse it into the
    product (tensorflow's). Exact when the scale is a power of two
    (`1 / sqrt(64)`); otherwise only in float32, where the product rounds as
    the scaled logits do, not in bfloat16's 8 bits.

    Example:

    >>> import numpy as np
    >>> fold_scale(np.ones(1, "float32"), 0.3), fold_scale(keras.ops.ones(1, "bfloat16"), 0.3)
    (True, False)
    """
    return keras.backend.standardize_dtype(q.dtype) == "float32" or math.frexp(scale)[0] == 0.5


def _attention_heads(q, k, v, scale, matmul, mask=None, num_heads=None, terms=None):
    """`(heads, tokens, dim)`, `(heads, dim, tokens)`, `(heads, tokens, dim)` -> context;
    `mask` applies to the logits seen as `(batch, num_heads, queries, keys)`;
    `terms`, `(rows, columns)` of `(heads, queries, h)` and `(heads, queries,
    w)`, add the decomposed bias of keys on an `(h, w)` grid."""
    probs = ops.cast(matmul(q, k), "float32")
    if scale != 1.0:
        probs = probs * scale
    if terms is not None:
        rows, columns = terms
        probs = probs + ops.reshape(rows[..., :, None] + columns[..., None, :], ops.shape(probs))
    if mask is None:
        probs = ops.softmax(probs, axis=-1)
    else:
        shape = ops.shape(probs)
        probs = ops.reshape(probs, (-1, num_heads, shape[1], shape[2]))
        probs = ops.reshape(portable.masked_softmax(probs, mask), shape)
    return ops.cast(matmul(ops.cast(probs, v.dtype), v), v.dtype)


# The float32 logits of all heads together above which XLA's CPU path takes
# the heads a group at a time, and the most one group's logits may take: XLA
# runs the products and the softmax of all heads as separate passes over the
# whole logits tensor, and once that outgrows the caches each pass reads it
# back from memory (docs/performance.md, "grouped heads").
GROUPED_ATTENTION_BYTES = 32 * 2**20
ATTENTION_GROUP_BYTES = 16 * 2**20


def head_group(q, k):
    """How many heads the CPU path computes at a time under XLA, or None for all.

    Only where XLA compiles the call (`compiled_by_xla`): tensorflow's graph
    runtime ran its loop over the groups slower than all heads at once.

    Example:

    >>> import types
    >>> q = types.SimpleNamespace(shape=(1, 1370, 12, 64))  # B/14 at 518 px
    >>> from keras_vit.kernels.switches import xla_compiled
    >>> with xla_compiled():
    ...     head_group(q, q) == (2 if keras.backend.backend() != "torch" else None)
    True
    """
    if not compiled_by_xla():
        return None
    batch, queries, num_heads, _ = q.shape
    keys = k.shape[1]
    if None in (batch, queries, num_heads, keys):
        return None
    heads, head_bytes = batch * num_heads, 4 * queries * keys
    if heads * head_bytes <= GROUPED_ATTENTION_BYTES:
        return None
    fitting = [g for g in range(1, heads) if heads % g == 0 and g * head_bytes <= ATTENTION_GROUP_BYTES]
    return max(fitting, default=1)


def query_chunks(queries, keys, group):
    """How many chunks each head's queries are taken in, with heads taken
    `group` at a time under XLA (`head_group`): 1 (all at once) unless a
    single head's float32 logits outgrow a group's budget
    (`ATTENTION_GROUP_BYTES`), on jax: tensorflow's XLA ran the chunks'
    loop no faster than whole heads.

    Example:

    >>> chunks = query_chunks(4096, 4096, 1)  # SAM's global blocks at 1024 px
    >>> query_chunks(1370, 1370, 2), chunks == (4 if keras.backend.backend() == "jax" else 1)
    (1, True)
    """
    if group != 1 or keras.backend.backend() != "jax":
        return 1
    return -(-4 * queries * keys // ATTENTION_GROUP_BYTES)


def _in_groups(context_of, queried, keyed, group, chunks=1):
    """`context_of(*queried, *keyed)` on `(heads, ...)` tensors, `group`
    heads at a time, and each head's queries (the leading axis after the
    heads of every `queried` tensor) `chunks` at a time, the last chunk
    padded with zero queries."""
    if chunks == 1:
        def groups(x):
            return ops.reshape(x, (-1, group, *x.shape[1:]))

        context = ops.map(lambda args: context_of(*args), tuple(groups(x) for x in queried + keyed))
        return ops.reshape(context, (-1, *context.shape[2:]))
    tokens = queried[0].shape[1]
    size = -(-tokens // chunks)
    pad = size * chunks - tokens
    queried = tuple(
        ops.reshape(ops.pad(x, ((0, 0), (0, pad)) + ((0, 0),) * (len(x.shape) - 2)) if pad else x,
                    (-1, chunks, size, *x.shape[2:]))
        for x in queried
    )
    count = len(queried)

    def head(args):
        parts, whole = args[:count], tuple(t[None] for t in args[count:])
        return ops.map(lambda part: context_of(*(p[None] for p in part), *whole)[0], parts)

    context = ops.map(head, queried + keyed)
    context = ops.reshape(context, (-1, chunks * size, context.shape[-1]))
    return context[:, :tokens] if pad else context


def _grouped_attention(q, k, v, scale, group, matmul):
    return _in_groups(
        lambda q, k, v: _attention_heads(q, k, v, scale, matmul), (q,), (k, v), group,
        query_chunks(q.shape[1], k.shape[2], group)
    )


def decomposed_attention(q, k, v, scale, rows, columns, matmul=ops.matmul):
    """`portable.decomposed_attention` as batched products over `(batch *
    heads)`, a group of heads (or a chunk of a head's queries) at a time
    where all heads' logits would outgrow the caches (`head_group`,
    `query_chunks`).

    Args:
        q, k, v, scale, rows, columns: as `portable.decomposed_attention`.
        matmul: the batched product (its result may be wider than its
            operands' dtype).

    Example:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q = keras.ops.convert_to_tensor(rng.normal(size=(2, 6, 3, 4)), "float32")
    >>> rows, columns = (rng.normal(size=(2, 3, 6, n)).astype("float32") for n in (2, 3))
    >>> y = decomposed_attention(q, q, q, 0.5, rows, columns)
    >>> expected = portable.decomposed_attention(q, q, q, 0.5, rows, columns)
    >>> bool(np.allclose(keras.ops.convert_to_numpy(y), keras.ops.convert_to_numpy(expected), atol=1e-6))
    True
    """
    if fold_scale(q, scale):
        q, scale = q * ops.cast(scale, q.dtype), 1.0
    static = tuple(q.shape)
    heads = (_heads_first(q), _heads_first(k, tokens_last=True), _heads_first(v))
    terms = tuple(ops.reshape(ops.cast(t, "float32"), (-1, *t.shape[2:])) for t in (rows, columns))

    def context_of(q, rows, columns, k, v):
        return _attention_heads(q, k, v, scale, matmul, terms=(rows, columns))

    group = head_group(q, k)
    if group:
        context = _in_groups(context_of, (heads[0],) + terms, heads[1:], group,
                             query_chunks(q.shape[1], k.shape[1], group))
    else:
        context = context_of(heads[0], *terms, *heads[1:])
    context = ops.reshape(context, (-1, static[2], static[1], static[3]))
    return ops.transpose(context, (0, 2, 1, 3))


def convolution_pays(*args):
    """The hardware rule of `convolution`: on a CPU, where XLA compiles the call.

    Example:

    >>> from keras_vit.kernels.switches import xla_compiled
    >>> with hardware.assume(device="cpu"), xla_compiled():
    ...     convolution_pays() == (keras.backend.backend() != "torch")
    True
    """
    return hardware.on_cpu() and compiled_by_xla()


def convolution(layer, x):
    """`layer(x)` for a `Conv2DTranspose` or `DepthwiseConv2D` in the forms
    XLA's CPU backend runs fastest, or NotImplemented.

    Computed: a channels-last `Conv2DTranspose` with "valid" padding, no
    output padding or dilation and its kernel size equal to its strides
    (each input pixel writes its own block of outputs), and a channels-last
    `DepthwiseConv2D` of stride 1 and no dilation. The weights are read in
    the layer's compute dtype, as its call reads them; half-precision maps
    are then summed in float32 and rounded once, as the convolutions
    accumulate.
    Declined: any other layer or setting, a symbolic input or one of
    another dtype than the layer computes in, a mask, and a layer that is
    not built, is quantized or rematerialised, or has an activity
    regularizer (what Keras' `__call__` would add).

    Example:

    >>> import numpy as np
    >>> conv = keras.layers.DepthwiseConv2D(3, padding="same")
    >>> conv.build((1, 6, 7, 2))
    >>> x = keras.ops.convert_to_tensor(np.random.default_rng(0).normal(size=(1, 6, 7, 2)), "float32")
    >>> bool(np.allclose(keras.ops.convert_to_numpy(convolution(conv, x)),
    ...                  keras.ops.convert_to_numpy(conv(x)), atol=1e-5))
    True
    """
    kind = type(layer)
    form = {keras.layers.Conv2DTranspose: _transposed, keras.layers.DepthwiseConv2D: _depthwise}.get(kind)
    if form is None or not _plain_call(layer, x) or layer.data_format != "channels_last":
        return NotImplemented
    if None in tuple(x.shape)[1:]:
        return NotImplemented
    dtype = layer.compute_dtype
    wide = "float32" if dtype in ("bfloat16", "float16") else dtype
    y = form(layer, ops.cast(x, wide), lambda w: ops.cast(ops.cast(w, dtype), wide))
    if y is NotImplemented:
        return y
    if layer.use_bias:
        y = y + ops.cast(ops.cast(layer.bias, dtype), wide)
    y = ops.cast(y, dtype)
    return y if layer.activation is keras.activations.linear else layer.activation(y)


def _plain_call(layer, x):
    """Whether `layer.call(x)` by hand is what `layer(x)` computes (see `convolution`)."""
    if isinstance(x, keras.KerasTensor) or not keras.ops.is_tensor(x):
        return False
    return portable.call_adds_nothing(layer, x) and keras.backend.standardize_dtype(x.dtype) == layer.compute_dtype


def _transposed(layer, x, read):
    """A non-overlapping transposed convolution: `(n, h, w, c) @ (c, kh kw out)`, each
    pixel's `(kh, kw, out)` block then moved into place."""
    if layer.padding != "valid" or layer.output_padding is not None or set(layer.dilation_rate) != {1}:
        return NotImplemented
    if tuple(layer.kernel_size) != tuple(layer.strides):
        return NotImplemented
    kh, kw = layer.kernel_size
    _, h, w, c = x.shape
    kernel = read(layer.kernel)  # (kh, kw, out, in), LoRA included
    out = kernel.shape[2]
    kernel = ops.reshape(ops.transpose(kernel, (3, 0, 1, 2)), (c, kh * kw * out))
    y = ops.reshape(ops.matmul(ops.reshape(x, (-1, c)), kernel), (-1, h, w, kh, kw, out))
    return ops.reshape(ops.transpose(y, (0, 1, 3, 2, 4, 5)), (-1, h * kh, w * kw, out))


def _depthwise(layer, x, read):
    """A depthwise convolution of stride 1 as one multiply-add per kernel tap."""
    if set(layer.strides) != {1} or set(layer.dilation_rate) != {1}:
        return NotImplemented
    kh, kw = layer.kernel_size
    _, h, w, c = x.shape
    if layer.padding == "same":
        # Keras' "same" at stride 1: the odd pixel of an even kernel's padding after.
        pads = [((k - 1) // 2, k - 1 - (k - 1) // 2) for k in (kh, kw)]
        x = ops.pad(x, ((0, 0), *pads, (0, 0)))
    elif h < kh or w < kw:
        return NotImplemented  # Keras names the sizes
    else:
        h, w = h - kh + 1, w - kw + 1
    kernel = read(layer.kernel)  # (kh, kw, c, multiplier)
    multiplier = kernel.shape[3]
    y = None
    for i in range(kh):
        for j in range(kw):
            window = x[:, i : i + h, j : j + w, :]
            term = window * kernel[i, j, :, 0] if multiplier == 1 else window[..., None] * kernel[i, j]
            y = term if y is None else y + term
    return y if multiplier == 1 else ops.reshape(y, (-1, h, w, c * multiplier))
