"""tensorflow's fast paths: the products' bias and GELU in the forms oneDNN fuses.

- dense, "fused_bias_gelu": `xla.dense_rows` whose bias is a `BiasAdd` and
  whose GELU is `tf.nn.gelu` on the 2D product. TensorFlow's graph optimizer
  folds exactly that sequence into oneDNN's GEMM as its post-ops (`MatMul +
  BiasAdd + Gelu` into one op), and no other form of the same sum. The
  graph runtime is where bfloat16 prediction runs (`keras_vit.execution.tf_xla`
  keeps it off XLA), and there a separate GELU costs most.
- attention, "xla_attention" on a CPU: `xla.attention`, grouped heads only
  inside `xla_compiled()` (tensorflow's XLA-compiled predict function).
- attention, "fused_attention" on a GPU: `keras.ops.dot_product_attention`.
- decomposed_attention, "xla_decomposed_attention" on a CPU:
  `xla.decomposed_attention`, grouped heads inside `xla_compiled()`.
- call_sublayer, "xla_convolutions" on a CPU: `xla.convolution` (the
  upsampling heads' non-overlapping transposed and depthwise convolutions),
  inside XLA only (`xla_compiled()`): in the graph runtime TensorFlow's own
  depthwise kernel is the faster.
- gelu, "erf_gelu", while exporting only: Keras' exact GELU is
  `erfc`-based on tensorflow, an op tf2onnx cannot convert;
  `0.5 x (1 + erf(x / sqrt(2)))` is the same function.

The measurements: docs/performance.md.
"""

import math

from keras import ops

from keras_vit.kernels import hardware, portable, xla
from keras_vit.kernels.fused import fused_attention
from keras_vit.kernels.registry import register


def bias_and_activation(y, bias, activation, dtype):
    """`activation(y + bias)` in `dtype`, with `BiasAdd` and `tf.nn.gelu`.

    Example:

    >>> import numpy as np
    >>> y = bias_and_activation(np.zeros((2, 3), "float32"), np.ones(3, "float32"), "gelu", "float32")
    >>> round(float(y[0, 0]), 4)
    0.8413
    """
    import tensorflow as tf

    if bias is not None:
        y = tf.nn.bias_add(y, bias)
    y = ops.cast(y, dtype)
    if activation in ("gelu_tanh", "gelu"):
        return tf.nn.gelu(y, approximate=activation == "gelu_tanh")
    return y if activation is None else portable.activation(y, activation)


@register("dense", "tensorflow", "fused_bias_gelu")
def dense(x, kernel, bias, axes, activation):
    return xla.dense_rows(x, kernel, bias, axes, activation, epilogue=bias_and_activation)


@register("attention", "tensorflow", "xla_attention", pays=hardware.on_cpu)
def attention(q, k, v, scale, mask):
    return xla.attention(q, k, v, scale, mask)


register("attention", "tensorflow", "fused_attention", pays=hardware.on_accelerator)(fused_attention)


@register("decomposed_attention", "tensorflow", "xla_decomposed_attention", pays=hardware.on_cpu)
def decomposed_attention(q, k, v, scale, rows, columns):
    return xla.decomposed_attention(q, k, v, scale, rows, columns)


@register("call_sublayer", "tensorflow", "xla_convolutions", pays=xla.convolution_pays)
def convolution(layer, x, args, kwargs):
    return NotImplemented if args or kwargs else xla.convolution(layer, x)


@register("gelu", "tensorflow", "erf_gelu", export=True)
def erf_gelu(x, approximate):
    """The exact GELU through `erf` (tf2onnx converts it; not Keras' `erfc`)."""
    if approximate:
        return NotImplemented
    x = ops.convert_to_tensor(x)
    return 0.5 * x * (1.0 + ops.erf(x * (1.0 / math.sqrt(2.0))))
