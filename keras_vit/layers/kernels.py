"""The two computations that take nearly all of a ViT's time, written once.

`dense` (a projection over the last axis) and `attention` (softmax attention
over `(batch, tokens, heads, head_dim)` tensors) are what the layers call on
their ordinary path. Both are `keras.ops` code; a backend gets its own variant
only where measurements (`tools/benchmark.py`) showed that it pays:

- `dense` flattens the tokens into one `(rows, features)` matrix, so that the
  product and its two gradients are plain 2D GEMMs (XLA's CPU backend runs
  the kernel gradient of a 3D product, which contracts two axes, at about
  half the speed of the 2D one). On torch, in float32 and bfloat16 on a
  CPU, it is oneDNN's `mkldnn._linear_pointwise`, forward and input
  gradient (torch's default GEMM ran ViT's projections 1.2-1.4x slower in
  float32 and 2x slower in bfloat16, see `onednn.applies`), with
  the weight gradient by torch's `mm` (see `onednn.autograd_linear`); otherwise
  `torch.nn.functional.linear`, which adds the bias inside the GEMM
  (`addmm`) instead of in a separate pass over the output. In inference,
  the MLP's tanh GELU runs inside oneDNN's GEMM as its post-op, and a
  `for_inference` copy's kernels are reordered to oneDNN's layout once
  (`onednn.pack_for_inference`) rather than on every call. On tensorflow the
  bias is a `BiasAdd` and a GELU `tf.nn.gelu` on the 2D product, which the
  graph optimizer folds into oneDNN's GEMM (`_bias_and_activation`). On jax,
  bfloat16 products accumulate into a float32 result, the only form of a
  bfloat16 dot that XLA's CPU backend runs faster than float32 (`_matmul`).
  (On tensorflow, bfloat16 inference runs in the graph runtime, whose oneDNN
  matmuls use the bf16 units, rather than XLA: `keras_vit.models.base`.)
- `attention` uses the backend's fused kernel (`keras.ops.dot_product_attention`;
  on torch `scaled_dot_product_attention` called directly on strided views,
  which saves the three copies Keras makes), except on jax and tensorflow
  CPUs, where that op is a pair of einsums with the batch axes in the middle
  and batched matrix products on `(batch * heads, tokens, head_dim)` tensors
  run faster (`tools/benchmark_kernels.py` measures both). On jax, once the
  logits of all heads outgrow the caches (above 32 MiB: 518 px, or 384 px
  in batches), those products and the softmax take a group of heads at a
  time (`keras.ops.map`), which ran them 1.4-1.5x faster forward and
  1.2-1.4x with the backward; on tensorflow only where XLA compiles them
  (a model's float32 predict function, inside `xla_compiled()`), as the
  graph runtime's loop ran the backward slower. The scale multiplies the
  queries rather than the logits, a pass over `tokens` rather than
  `tokens ** 2` values (see `_fold_scale`).
  The softmax is taken in float32 whatever the compute dtype.

Inside `export_mode()` (entered by `keras_vit.export.export_model` while it
traces a model) both take a portable form instead: plain matrix products on
the token tensors as they are, and attention as 4D batched matrix products,
with no reshape that merges the symbolic batch axis into another axis (which
jax2onnx cannot express) and no backend-specific call. The ordinary path is
untouched outside the context.
"""

import contextlib
import math

import keras
import numpy as np
from keras import ops

from keras_vit.layers import onednn


class _TraceSwitch:
    """A process-wide switch of what the layers emit when traced: a context
    turns it on and restores what it was (contexts nest)."""

    def __init__(self):
        self.on = False

    @contextlib.contextmanager
    def turned_on(self):
        previous, self.on = self.on, True
        try:
            yield
        finally:
            self.on = previous


_EXPORT_MODE = _TraceSwitch()
_XLA_COMPILED = _TraceSwitch()


def export_mode():
    """Within this context the layers emit their exporter-friendly graph.

    Example:

    >>> with export_mode():
    ...     exporting()
    True
    >>> exporting()
    False
    """
    return _EXPORT_MODE.turned_on()


def exporting():
    """Whether the layers are being traced for an exporter (`export_mode`)."""
    return _EXPORT_MODE.on


def xla_compiled():
    """Within this context tensorflow traces the layers for XLA.

    `keras_vit.models.base` enters it around the float32 predict function it
    compiles with XLA on a tensorflow CPU; attention then groups heads as
    jax does (`_head_group`). The context only changes what a trace emits.

    Example:

    >>> with xla_compiled():
    ...     compiled_by_xla() == (keras.backend.backend() in ("jax", "tensorflow"))
    True
    """
    return _XLA_COMPILED.turned_on()


def compiled_by_xla():
    """Whether the layers are traced for XLA: on jax always, on tensorflow inside `xla_compiled()`."""
    backend = keras.backend.backend()
    return backend == "jax" or (backend == "tensorflow" and _XLA_COMPILED.on)


def dense(x, kernel, bias=None, axes=1, activation=None):
    """`activation(x @ kernel + bias)`, contracting the last `axes` axes of `x`.

    Args:
        x: tensor `(..., *in_dims)`, where `in_dims` are its last `axes` axes.
        kernel: tensor `(*in_dims, *out_dims)`, in the dtype of `x`: the
            layouts of `Dense` (`(d_in, d_out)`) and of the attention
            projections' `EinsumDense` (`(D, heads, head_dim)`, and
            `(heads, head_dim, D)` with `axes=2`).
        bias: None or a tensor of shape `out_dims`.
        axes: int, how many trailing axes of `x` the product contracts.
        activation: None or the name of an MLP activation (`activation`).

    Returns:
        A tensor `(..., *out_dims)`.

    Example:

    >>> import numpy as np
    >>> y = dense(np.ones((2, 3, 4), "float32"), np.ones((4, 5), "float32"),
    ...           np.arange(5, dtype="float32"))
    >>> keras.ops.convert_to_numpy(y)[1, 2].tolist()
    [4.0, 5.0, 6.0, 7.0, 8.0]
    >>> tuple(dense(np.ones((2, 3, 4), "float32"), np.ones((4, 2, 3), "float32")).shape)
    (2, 3, 2, 3)
    >>> tuple(dense(np.ones((2, 3, 2, 3), "float32"), np.ones((2, 3, 4), "float32"), axes=2).shape)
    (2, 3, 4)
    """
    if keras.backend.backend() == "torch" and not exporting():
        return _dense_torch(x, kernel, bias, axes, activation)
    if exporting():
        return _activation(_dense(x, kernel, bias, axes), activation)
    return _dense(x, kernel, bias, axes, activation)


def _dense(x, kernel, bias, axes, activation=None):
    x = ops.convert_to_tensor(x)
    kernel = ops.convert_to_tensor(kernel)
    out_dims = tuple(kernel.shape[axes:])
    width = math.prod(out_dims)
    if len(kernel.shape) != 2:
        kernel = ops.reshape(kernel, (-1, width))
    if bias is not None and len(bias.shape) != 1:
        bias = ops.reshape(bias, (width,))
    static = tuple(x.shape)
    dynamic = ops.shape(x)
    leading = [s if s is not None else dynamic[i] for i, s in enumerate(static[:-axes])]
    if exporting():
        # The batch axis stays an axis of its own (see `export_mode`).
        if axes > 1:
            x = ops.reshape(x, (-1, *leading[1:], kernel.shape[0]))
        y = ops.matmul(x, kernel)
        y = y if bias is None else y + bias
        return y if len(out_dims) == 1 else ops.reshape(y, (-1, *leading[1:], *out_dims))
    if len(static) == 2 and axes == 1:
        return _bias_and_activation(_matmul(x, kernel), bias, activation, x.dtype)
    y = _matmul(ops.reshape(x, (-1, kernel.shape[0])), kernel)
    y = _bias_and_activation(y, bias, activation, x.dtype)
    return ops.reshape(y, (*leading, *out_dims))


def _bias_and_activation(y, bias, activation, dtype):
    """`activation(y + bias)` in `dtype`, on the 2D product.

    On tensorflow the bias goes through `BiasAdd` and a GELU through
    `tf.nn.gelu`: TensorFlow's graph optimizer then folds both into oneDNN's
    GEMM as its post-ops (`MatMul + BiasAdd + Gelu` -> one fused op), which it
    does for no other form of the same sum. That graph runtime runs bfloat16
    prediction (`keras_vit.models.base`), where a separate GELU costs more
    than in float32: B/16's twelve first MLP products at batch 1 took 34
    against 46 ms with the GELU apart (its float32 GEMMs alone: 60 ms).
    """
    if keras.backend.backend() != "tensorflow":
        y = y if bias is None else y + bias
        return _activation(ops.cast(y, dtype), activation)
    import tensorflow as tf

    if bias is not None:
        y = tf.nn.bias_add(y, bias)
    y = ops.cast(y, dtype)
    if activation in ("gelu_tanh", "gelu"):
        return tf.nn.gelu(y, approximate=activation == "gelu_tanh")
    return _activation(y, activation)


def _matmul(a, b):
    """`a @ b`; on jax's CPU backend, bfloat16 operands give a float32 result.

    XLA's CPU backend runs a bfloat16 dot whose result is bfloat16 at its
    float32 speed (a square 2048 product: 180 GFLOP/s against 209 in
    float32, on a 2-core EPYC with avx512_bf16), but one that accumulates
    into float32 (`preferred_element_type`) at twice that (377): only that
    form reaches the CPU's bf16 dot-product instructions. Callers cast the
    result back to their dtype, which XLA fuses with the next op. GPUs
    accumulate bfloat16 products in float32 either way; there a float32
    result only doubles the bytes each product writes and its consumer reads.
    """
    if keras.backend.backend() == "jax" and _bfloat16(a) and _bfloat16(b) and _wide_bfloat16():
        import jax.numpy as jnp

        return jnp.matmul(a, b, preferred_element_type=jnp.float32)
    return ops.matmul(a, b)


def _wide_bfloat16():
    """Whether jax's bfloat16 products return float32: on XLA's CPU backend."""
    import jax

    return jax.default_backend() == "cpu"


def _bfloat16(x):
    return keras.backend.standardize_dtype(x.dtype) == "bfloat16"


def _dense_torch(x, kernel, bias, axes, activation):
    import torch
    import torch.nn.functional as F

    # torch's own reshapes: `keras.ops.reshape` costs ~25 µs an eager call
    # against ~1, and a block's projections made eleven of them.
    x = ops.convert_to_tensor(x)
    kernel = ops.convert_to_tensor(kernel)
    packing = getattr(kernel, onednn.PACKING, None)
    out_dims = tuple(kernel.shape[axes:])
    if kernel.dim() != 2:
        kernel = kernel.reshape(-1, math.prod(out_dims))
    if axes > 1:
        x = x.flatten(-axes)
    if bias is not None:
        bias = ops.convert_to_tensor(bias)
        if bias.dim() != 1:
            bias = bias.reshape(-1)
    # The tanh GELU as the GEMM's post-op (no gradient to record): B/16's
    # first MLP product at batch 8 took 37.6 ms with it against 40.8 for the
    # product and a separate GELU in float32, 20.9 against 24.0 in bfloat16
    # (the result differs by 2.4e-7 at most in float32; in bfloat16 the GELU
    # is taken before the rounding). The erf GELU gained nothing so.
    post_op = ("gelu", "tanh") if activation == "gelu_tanh" else ("none", "")
    if not onednn.applies(x, kernel, bias):
        # `kernel.T` is a view; `linear` multiplies by its transpose, i.e. by
        # `kernel` itself, without a copy.
        y = _activation(F.linear(x, kernel.T, bias), activation)
    elif torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, kernel, bias)):
        y = _activation(onednn.autograd_linear()(x, kernel, bias), activation)
    else:
        # No gradient to record: the GEMM itself, without the ~10 µs of an
        # autograd function's call.
        if packing is not None:
            y = onednn.packed_linear(x, packing.weight(kernel), bias, *post_op)
        else:
            y = onednn.linear_pointwise(x, kernel, bias, *post_op)
        y = y if post_op[0] == "gelu" else _activation(y, activation)
    return y if len(out_dims) == 1 else y.unflatten(-1, out_dims)


def half_layer_norm(layer, x):
    """A `LayerNormalization`'s output for a bfloat16/float16 torch tensor, or None.

    `keras.ops.layer_normalization` upcasts its input, scale and offset to float32 and
    casts the result back: four copies a norm, 100 of B/16's forward pass,
    which took 1.3 of its 7.1 ms on an H100 in bfloat16 at batch 64 (and ~30
    µs of Python each). torch's kernel takes half-precision tensors as they
    are and already normalises in float32, rounding once at the end, as the
    upcast does. None (call the layer) unless the layer is a plain
    `LayerNormalization` over the last axis whose weights have `x`'s dtype
    (the `"bfloat16"` policy; under `"mixed_bfloat16"` they are float32).

    Example:

    >>> import numpy as np
    >>> norm = keras.layers.LayerNormalization(dtype="bfloat16")
    >>> norm.build((2, 8))
    >>> x = ops.cast(np.arange(16, dtype="float32").reshape(2, 8), "bfloat16")
    >>> y = half_layer_norm(norm, x)
    >>> y is None or bool(ops.all(ops.equal(y, norm(x))))
    True
    """
    import torch
    import torch.nn.functional as F

    if type(layer) is not keras.layers.LayerNormalization or layer.rms_scaling:
        return None
    axis = list(layer.axis) if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    if x.dtype not in (torch.bfloat16, torch.float16) or axis not in ([-1], [x.dim() - 1]):
        return None
    gamma = None if layer.gamma is None else layer.gamma.value
    beta = None if layer.beta is None else layer.beta.value
    if any(w is not None and w.dtype != x.dtype for w in (gamma, beta)):
        return None
    return F.layer_norm(x, (x.shape[-1],), gamma, beta, layer.epsilon)


def gelu(x, approximate=True):
    """GELU; on tensorflow the exact form through `erf` while exporting.

    Keras' exact GELU is `erfc`-based on tensorflow, an op that tf2onnx
    cannot convert; `0.5 x (1 + erf(x / sqrt(2)))` is the same function.
    (On jax, `lax.erf` serialises as a `vhlo.composite_v2` that
    tensorflow's SavedModel runtime cannot read, so jax keeps its own GELU.)
    """
    if approximate or not exporting() or keras.backend.backend() != "tensorflow":
        return ops.gelu(x, approximate=approximate)
    x = ops.convert_to_tensor(x)
    return 0.5 * x * (1.0 + ops.erf(x * (1.0 / math.sqrt(2.0))))


def activation(x, name):
    """The MLP activation `name` (one of `keras_vit.layers.config.MLP_ACTIVATIONS`).

    Example:

    >>> float(activation(keras.ops.ones(()), "quick_gelu")) == float(keras.ops.sigmoid(1.702))
    True
    """
    if name == "quick_gelu":
        # OpenAI CLIP's sigmoid approximation of GELU.
        return x * ops.sigmoid(1.702 * x)
    return gelu(x, approximate=name == "gelu_tanh")


def _activation(x, name):
    return x if name is None else activation(x, name)


def runs_plain(layer):
    """Whether a `Dense`/`EinsumDense` layer's call is just its matrix product.

    Quantized and LoRA-enabled layers compute more than `x @ kernel + bias`,
    so the layers call them as they are instead of through `dense`.
    """
    return layer.quantization_mode is None and not getattr(layer, "lora_enabled", False)


def _attention_torch(q, k, v, scale, mask=None):
    import torch.nn.functional as F

    # Strided (batch, heads, tokens, dim) views: the CPU flash kernel and the
    # GPU kernels read them in place, where `keras.ops.dot_product_attention`
    # copies all three to contiguous tensors first; its output comes back
    # contiguous in (batch, tokens, heads, dim) order. A boolean `attn_mask`
    # has the meaning of `mask` (True: may attend); a query that may attend
    # to no key gets zeros.
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale
    )
    return out.transpose(1, 2)


def _use_fused_attention():
    if keras.backend.backend() == "torch":
        return True
    if keras.backend.backend() == "jax":
        import jax

        return jax.default_backend() != "cpu"
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return bool(tf.config.list_logical_devices("GPU"))
    return True


def _heads_first(x, tokens_last=False):
    """`(batch, tokens, heads, dim)` -> `(batch * heads, tokens, dim)`
    (or `(batch * heads, dim, tokens)`)."""
    static = tuple(x.shape)
    dynamic = ops.shape(x)
    tokens = static[1] if static[1] is not None else dynamic[1]
    x = ops.transpose(x, (0, 2, 3, 1) if tokens_last else (0, 2, 1, 3))
    shape = (static[3], tokens) if tokens_last else (tokens, static[3])
    return ops.reshape(x, (-1, *shape))


def attention(q, k, v, scale=None, mask=None):
    """Softmax attention, `softmax(q k^T * scale) v`, per head.

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
    q = ops.convert_to_tensor(q)
    k = ops.convert_to_tensor(k)
    v = ops.convert_to_tensor(v)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    mask = _attention_mask(mask)
    if exporting():
        return _attention_portable(q, k, v, scale, mask)
    if not _use_fused_attention():
        return _attention_matmuls(q, k, v, scale, mask)
    if keras.backend.backend() == "torch":
        return _attention_torch(q, k, v, scale, mask)
    out = ops.dot_product_attention(q, k, v, scale=scale, mask=mask)
    return out if mask is None else _zero_unattended(out, mask)


def _attention_mask(mask):
    """`mask` as a boolean tensor of rank 4 (leading axes added), or None."""
    if mask is None:
        return None
    mask = ops.convert_to_tensor(mask)
    if keras.backend.standardize_dtype(mask.dtype) != "bool" or len(mask.shape) > 4:
        raise ValueError(
            "`mask` must be a boolean tensor broadcastable to (batch, heads, queries, keys). "
            f"Received: mask with dtype={keras.backend.standardize_dtype(mask.dtype)}, "
            f"shape={tuple(mask.shape)}"
        )
    while len(mask.shape) < 4:
        mask = ops.expand_dims(mask, 0)
    return mask


def _zero_unattended(out, mask):
    """`out` `(batch, queries, heads, dim)` with zeros for queries that attend to no key."""
    attends = ops.transpose(ops.any(mask, axis=-1), (0, 2, 1))
    return out * ops.cast(ops.expand_dims(attends, -1), out.dtype)


def attention_probs(q, k, scale=None, mask=None):
    """The attention probabilities `softmax(q k^T * scale)`, float32.

    What `attention` multiplies the values by, for inspection and for
    attention dropout: the same masking (`mask` as in `attention`; a query
    that may attend to no key gets zeros).

    Args:
        q, k: tensors `(batch, tokens, heads, head_dim)`.
        scale: float, default `1 / sqrt(head_dim)`.
        mask: None or a boolean tensor broadcastable to
            `(batch, heads, queries, keys)`.

    Returns:
        A float32 tensor `(batch, heads, queries, keys)`.

    Example:

    >>> import numpy as np
    >>> q = np.ones((1, 3, 1, 4), "float32")
    >>> p = attention_probs(q, q, mask=np.tril(np.ones((3, 3), bool)))
    >>> keras.ops.convert_to_numpy(p)[0, 0, :2].tolist()  # queries 0 and 1
    [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]]
    """
    q = ops.convert_to_tensor(q)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    logits = ops.einsum("bqhd,bthd->bhqt", q, ops.convert_to_tensor(k))
    return _masked_softmax(ops.cast(logits, "float32") * scale, _attention_mask(mask))


def _masked_softmax(logits, mask):
    """The softmax of float32 `logits` over the keys where `mask` allows them.

    A finite floor rather than -inf: a row with no allowed key would
    otherwise be NaN, and so would the gradients flowing through it.
    """
    if mask is None:
        return ops.softmax(logits, axis=-1)
    floor = float(np.finfo("float32").min)
    probs = ops.softmax(ops.where(mask, logits, floor), axis=-1)
    return ops.where(mask, probs, 0.0)


def _attention_matmuls(q, k, v, scale, mask=None):
    if _fold_scale(q, scale):
        q, scale = q * ops.cast(scale, q.dtype), 1.0
    static = tuple(q.shape)
    dynamic = ops.shape(q)
    tokens = static[1] if static[1] is not None else dynamic[1]
    heads = (_heads_first(q), _heads_first(k, tokens_last=True), _heads_first(v))
    # Groups of heads split the logits along an axis the mask may broadcast over.
    group = _head_group(q, k) if mask is None else None
    if group:
        context = _grouped_attention(*heads, scale, group)
    else:
        context = _attention_heads(*heads, scale, mask, static[2])
    context = ops.reshape(context, (-1, static[2], tokens, static[3]))
    return ops.transpose(context, (0, 2, 1, 3))


def _fold_scale(q, scale):
    """Whether `q * scale` replaces `logits * scale` without rounding more.

    The logits hold `tokens` times as many values as the queries; multiplying
    the queries saves a pass over them where the compiler does not fuse it
    (tensorflow; B/16's attention, one block, float32, 2-core EPYC, fastest
    of 9 interleaved calls in ms, logits scaled against queries: 197 tokens 1.60 against 1.41 under
    XLA and 1.80 against 1.38 in the graph runtime; 577 tokens 9.4 against
    8.8 and 8.1 against 7.6; 1,370 tokens 48.9 against 44.1 and 40.1
    against 37.0; jax's fused softmax ran both alike). Exact when the scale
    is a power of two (`1 / sqrt(64)`); otherwise only in float32, where the
    product rounds as the scaled logits do, not in bfloat16's 8 bits.
    """
    return keras.backend.standardize_dtype(q.dtype) == "float32" or math.frexp(scale)[0] == 0.5


def _attention_heads(q, k, v, scale, mask=None, num_heads=None):
    """`(heads, tokens, dim)`, `(heads, dim, tokens)`, `(heads, tokens, dim)` -> context.

    `mask` (rank 4, broadcastable to `(batch, num_heads, queries, keys)`)
    applies to the logits seen as `(batch, num_heads, queries, keys)`.
    """
    logits = _matmul(q, k)
    probs = ops.cast(logits, "float32")
    if scale != 1.0:
        probs = probs * scale
    if mask is None:
        probs = ops.softmax(probs, axis=-1)
    else:
        shape = ops.shape(probs)
        probs = ops.reshape(probs, (-1, num_heads, shape[1], shape[2]))
        probs = ops.reshape(_masked_softmax(probs, mask), shape)
    return ops.cast(_matmul(ops.cast(probs, v.dtype), v), v.dtype)


# Float32 logits of all heads together above which XLA's CPU path (jax; the
# predict function tensorflow compiles) takes the heads a group at a time, and
# the most one group's logits may take. XLA's CPU
# backend runs the products and the softmax of all heads as separate passes
# over the whole logits tensor; once that outgrows the caches, each pass reads
# it back from memory. `tools/benchmark_kernels.py --attention` (2-core EPYC,
# avx512, B/16's 12 heads, median ms, all heads against grouped): 1,370
# tokens (86 MiB of logits) 98 against 68 forward, 332 against 253 with the
# backward; 1,025 tokens (48 MiB) 63 against 46; batch 8 x 577 tokens (122
# MiB) 219 against 145, 538 against 386. At 785 tokens (28 MiB) and below,
# grouping ran no faster, and its backward up to 0.85x as fast. Tensorflow's
# XLA, queries scaled, 1,370 tokens: 44.1 against 39.9 ms forward (fastest of
# 9); its graph runtime's loop ran batch 8 x 577 tokens with the backward in
# 196 ms against 183 for all heads at once (fastest of 5), so there it keeps
# them together.
GROUPED_ATTENTION_BYTES = 32 * 2**20
ATTENTION_GROUP_BYTES = 16 * 2**20


def _head_group(q, k):
    """How many heads the CPU path computes at a time under XLA, or None for all."""
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


def _grouped_attention(q, k, v, scale, group):
    def groups(x):
        return ops.reshape(x, (-1, group, *x.shape[1:]))

    context = ops.map(lambda qkv: _attention_heads(*qkv, scale), (groups(q), groups(k), groups(v)))
    return ops.reshape(context, (-1, *context.shape[2:]))


def _attention_portable(q, k, v, scale, mask=None):
    # (batch, heads, tokens, dim) products: every backend and exporter has a
    # batched MatMul for them, and the batch axis is never merged.
    logits = ops.matmul(
        ops.transpose(q, (0, 2, 1, 3)), ops.transpose(k, (0, 2, 3, 1))
    )
    probs = _masked_softmax(ops.cast(logits, "float32") * scale, mask)
    context = ops.matmul(ops.cast(probs, v.dtype), ops.transpose(v, (0, 2, 1, 3)))
    return ops.transpose(context, (0, 2, 1, 3))
