"""jax's fast paths: XLA's CPU forms, bfloat16 products accumulated in float32.

- dense, "xla_dense": `xla.dense_rows` with `matmul`, whose bfloat16
  products return float32 on a CPU: XLA's CPU backend runs a bfloat16 dot
  whose result is bfloat16 at its float32 speed, but one that accumulates
  into float32 (`preferred_element_type`) at about twice that, the only form
  that reaches the CPU's bf16 dot-product instructions. On a GPU, bfloat16
  products accumulate in float32 either way and a float32 result would only
  double the bytes written, so there they stay bfloat16.
- attention, "xla_attention" on a CPU: `xla.attention` (jax's own
  `dot_product_attention` is a pair of einsums there).
- attention, "fused_attention" on an accelerator:
  `keras.ops.dot_product_attention` (cuDNN's fused kernel where it applies).
  Forced on a CPU, it declines float16: jax's form accumulates float16
  products in float32 (`F16_F16_F32`), which XLA's CPU dot refuses in a
  compiled function.
- decomposed_attention, "xla_decomposed_attention" on a CPU:
  `xla.decomposed_attention`, batched products a group of heads at a time.
- call_sublayer, "xla_convolutions" on a CPU: `xla.convolution` (the
  upsampling heads' non-overlapping transposed and depthwise convolutions).

The measurements: docs/performance.md.
"""

from keras import ops

from keras_vit.kernels import hardware, xla
from keras_vit.kernels.fused import fused_attention
from keras_vit.kernels.registry import register


def matmul(a, b):
    """`a @ b`; on a CPU, bfloat16 operands give a float32 result.

    Example:

    >>> import keras
    >>> a = keras.ops.ones((2, 2), "bfloat16")
    >>> keras.backend.standardize_dtype(matmul(a, a).dtype) in ("float32", "bfloat16")
    True
    """
    import jax.numpy as jnp

    if _bfloat16(a) and _bfloat16(b) and hardware.device() == "cpu":
        return jnp.matmul(a, b, preferred_element_type=jnp.float32)
    return ops.matmul(a, b)


def _bfloat16(x):
    return str(x.dtype) == "bfloat16"


@register("dense", "jax", "xla_dense")
def dense(x, kernel, bias, axes, activation):
    return xla.dense_rows(x, kernel, bias, axes, activation, matmul=matmul)


@register("attention", "jax", "xla_attention", pays=hardware.on_cpu)
def attention(q, k, v, scale, mask):
    return xla.attention(q, k, v, scale, mask, matmul=matmul)


@register("attention", "jax", "fused_attention", pays=hardware.on_accelerator)
def cpu_safe_fused_attention(q, k, v, scale, mask):
    if str(q.dtype) == "float16" and hardware.device() == "cpu":
        return NotImplemented
    return fused_attention(q, k, v, scale, mask)


@register("decomposed_attention", "jax", "xla_decomposed_attention", pays=hardware.on_cpu)
def decomposed_attention(q, k, v, scale, rows, columns):
    return xla.decomposed_attention(q, k, v, scale, rows, columns, matmul=matmul)


@register("call_sublayer", "jax", "xla_convolutions", pays=xla.convolution_pays)
def convolution(layer, x, args, kwargs):
    return NotImplemented if args or kwargs else xla.convolution(layer, x)
