"""torch's fast paths: oneDNN projections, fused attention, direct sublayer calls.

- dense, "onednn": on a CPU, in float32 and bfloat16, oneDNN's GEMM
  (`mkldnn._linear_pointwise`) forward and for the input's gradient, torch's
  `mm` for the weight's (`OneDNNLinear`); in inference the MLP's tanh GELU
  runs inside the GEMM as its post-op, and a `for_inference` copy's kernels
  are reordered to oneDNN's layout once (`Packing`). Taken on AMD CPUs with
  AVX-512, in bfloat16 on any AVX-512 CPU, and elsewhere (AVX2, an Intel
  CPU's float32) only on those packed kernels where a short measurement at
  first use finds it faster (`onednn_pays`): torch's default float32 GEMM
  (MKL) was the slower one on AMD's AVX-512 CPUs and the faster one on
  Intel's and, on kernels oneDNN must reorder at every call, with AVX2.
- dense, "torch_linear": `F.linear` with torch's own reshapes (the bias
  added inside the GEMM, `addmm`, rather than in a pass over the output).
- attention, "sdpa": `F.scaled_dot_product_attention` on strided
  `(batch, heads, tokens, dim)` views, which its CPU flash kernel and the
  GPU kernels read in place (`keras.ops.dot_product_attention` copies all
  three to contiguous tensors first).
- call_sublayer, "half_layer_norm": a bfloat16/float16 `LayerNormalization`
  by torch's kernel on the tensors as they are (Keras upcasts input, scale
  and offset to float32 and casts back: four copies a norm).
- call_sublayer, "direct_calls": `layer.call(...)` on the eager path where
  Keras' `__call__` would add nothing but its per-call bookkeeping.
- call_sublayer, "channels_last_conv": `F.conv2d` / `F.conv_transpose2d`
  on an NHWC map's channels-last view, without Keras' layout copies.
- decomposed_attention, "chunked_decomposed_attention"
  (`torch_decomposed_attention`): the fused kernel with ViTDet's bias as
  its float mask, a chunk of queries at a time.
- resize_bilinear, "interpolate" (`torch_resize`): `F.interpolate` on an
  NHWC map's channels-last view, instead of the portable form's gathers.
- pack_for_inference, "onednn_packing": marks the kernels `Packing` keeps.

Under torch's function transforms (`torch.func.vmap`, `grad`, `jacrev`,
`jvp`; `keras.ops.vectorized_map`) the oneDNN product runs through
`OneDNNLinear`, which has their rules, and the fused attention under `vmap`
defers to the portable form (torch has no batching rule for its CPU kernel).

Private APIs of torch and Keras (`torch.ops.mkldnn`, torch's global hook
registries, `keras.src.backend`) are used here and nowhere in the layers.
The measurements: docs/performance.md.
"""

import math
import sys

import keras
from keras import ops

from keras_vit.kernels import hardware, measured, portable, torch_activations
from keras_vit.kernels.registry import register


def transforms():
    """The names of torch's function transforms active now ("Vmap", "Grad", ...)."""
    import torch

    if compiling():
        return set()  # torch.compile traces transforms as graph operations of its own
    stack = torch._C._functorch.get_interpreter_stack()
    return {level.key().name for level in stack} if stack else set()


# --- oneDNN projections ------------------------------------------------------


def onednn_pays(x, kernel=None, *args):
    """The hardware rule of "onednn": where it beat `F.linear`, or where measured faster on a packed kernel.

    On the AMD CPUs with AVX-512 measured, oneDNN's GEMM ran ViT's
    projections faster than `F.linear` (MKL's sgemm, which takes slower code
    on AMD CPUs; in bfloat16 `addmm` and copies of its operands) with the
    kernel as it is. On an Intel CPU with AVX-512 MKL's float32 sgemm was the
    faster (oneDNN 0.41-0.89x forward), and oneDNN stays the bfloat16 product
    (1.3x as fast a model). With AVX2 only `F.linear` won, oneDNN reordering
    the kernel into its own layout on every call. On a kernel already in that
    layout (a `for_inference` copy's, see `Packing`) the answer differed
    between machines: where the rules above leave `F.linear`, the two are
    timed once for each shape at first use (`measured.faster`;
    docs/performance.md).

    Example:

    >>> import numpy as np
    >>> with hardware.assume(cpu_isa="avx2"):
    ...     onednn_pays(np.ones((2, 2), "float32"))
    False
    >>> with hardware.assume(cpu_isa="avx512", cpu_vendor="amd"):
    ...     onednn_pays(np.ones((2, 2), "float32"))
    True
    """
    if compiling():
        return False  # Inductor lowers the products of a compiled graph itself
    isa = hardware.cpu_isa()
    if isa == "avx512" and (hardware.cpu_vendor() != "intel" or _is_bfloat16(x)):
        return True
    if isa not in ("avx2", "avx512") or _packing(kernel) is None:
        return False
    answer = measured.assumed()
    return answer if answer is not None else _packed_is_faster(x, kernel, *args)


def _is_bfloat16(x):
    return keras.backend.standardize_dtype(getattr(x, "dtype", "float32")) == "bfloat16"


def _packed_is_faster(x, kernel, bias=None, axes=1, activation=None):
    """Whether oneDNN on the packed kernel beats `F.linear` for this call (timed once a shape)."""
    import torch

    tx, tkernel, tbias, _, _ = _operands(x, kernel, bias, axes)
    if not onednn_computes(tx, tkernel, tbias) or recording(tx, tkernel, tbias) or transforms():
        return False  # the packed kernel serves only the inference product
    key = (
        "onednn on a packed kernel, else F.linear",
        tuple(tx.shape), tuple(tkernel.shape), tbias is not None, activation, str(tx.dtype),
        torch.get_num_threads(),
    )
    with torch.no_grad():
        return measured.faster(
            key,
            lambda: onednn_dense(x, kernel, bias, axes, activation),
            lambda: linear_dense(x, kernel, bias, axes, activation),
        )


def compiling():
    """Whether torch.compile is tracing the caller now (False where torch is not loaded).

    The oneDNN product is a call Inductor cannot lower in a training graph,
    and the hardware rule reads files that would break the graph.
    """
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


def recording(*tensors):
    """Whether autograd records an op on these torch tensors now."""
    import torch

    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _packing(kernel):
    """The `Packing` of a kernel (a variable or tensor) that `pack_for_inference` marked, else None."""
    return getattr(getattr(kernel, "value", kernel), PACKING, None)


def onednn_computes(x, kernel, bias):
    """Whether oneDNN's GEMM can compute `x @ kernel + bias` for these tensors:
    on a CPU, float32 (or bfloat16 where oneDNN has it), one dtype, not
    under `torch.compile` (inductor picks its own GEMM)."""
    import torch

    # `compiling()` first: torch.compile cannot trace `mkldnn.is_available`
    # and would break the graph at every projection.
    if compiling() or x.device.type != "cpu" or x.dim() < 2:
        return False
    if not torch.backends.mkldnn.is_available():
        return False
    if any(t is not None and t.dtype != x.dtype for t in (kernel, bias)):
        return False
    if x.dtype == torch.bfloat16:
        return torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return x.dtype == torch.float32


def linear_pointwise(x, kernel, bias, post_op="none", algorithm=""):
    """`x @ kernel + bias` by oneDNN's GEMM (`kernel.T` is a view: no copy),
    with oneDNN's elementwise `post_op` applied to the result inside it."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, kernel.T, bias, post_op, [], algorithm)


def packed_linear(x, weight, bias, post_op="none", algorithm=""):
    """`x @ kernel + bias` on a weight that `Packing` reordered."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, post_op, [], algorithm)


_LINEAR = []


def autograd_linear():
    """`OneDNNLinear.apply`: `x @ kernel + bias` on oneDNN, differentiable."""
    if not _LINEAR:
        _LINEAR.append(_one_dnn_linear().apply)
    return _LINEAR[0]


def _one_dnn_linear():
    import torch

    class OneDNNLinear(torch.autograd.Function):
        """oneDNN's GEMM with autograd and the rules of torch's function transforms.

        The input's gradient is a oneDNN product too (on the weight as it
        is); the weight's, a product over the rows, is torch's `mm` on the
        transposed activations, which it reads in place where oneDNN would
        copy them first. Under a transform the backward and the `jvp` are
        torch's plain products, which every transform differentiates and
        batches; `vmap` folds the mapped axis into the rows.
        """

        @staticmethod
        def forward(x, kernel, bias):
            return linear_pointwise(x, kernel, bias)

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, kernel, bias = inputs
            ctx.save_for_backward(x, kernel)
            ctx.save_for_forward(x, kernel)
            ctx.has_bias = bias is not None

        @staticmethod
        def backward(ctx, grad):
            x, kernel = ctx.saved_tensors
            grad_x = grad_kernel = grad_bias = None
            # Plain products where this backward is itself differentiated
            # (a transform, or `create_graph=True`) or traced by torch.compile
            # (an eager forward's backward inside a compiled training step).
            plain = bool(transforms()) or torch.is_grad_enabled() or compiling()
            grad = grad if plain else grad.contiguous()
            if ctx.needs_input_grad[0]:
                grad_x = torch.matmul(grad, kernel.T) if plain else linear_pointwise(grad, kernel.T, None)
            rows = grad.reshape(-1, grad.shape[-1])
            if ctx.needs_input_grad[1]:
                grad_kernel = torch.mm(x.reshape(-1, x.shape[-1]).T, rows)
            if ctx.has_bias and ctx.needs_input_grad[2]:
                grad_bias = rows.sum(0)
            return grad_x, grad_kernel, grad_bias

        @staticmethod
        def jvp(ctx, tangent_x, tangent_kernel, tangent_bias):
            x, kernel = ctx.saved_tensors
            out = None
            for tangent, term in ((tangent_x, lambda t: t @ kernel), (tangent_kernel, lambda t: x @ t),
                                  (tangent_bias, lambda t: t)):
                if tangent is not None:
                    out = term(tangent) if out is None else out + term(tangent)
            return out

        @staticmethod
        def vmap(info, in_dims, x, kernel, bias):
            x_dim, kernel_dim, bias_dim = in_dims
            x = x.movedim(x_dim, 0) if x_dim is not None else x.expand(info.batch_size, *x.shape)
            if kernel_dim is None and bias_dim is None:
                # The mapped axis joins the rows: one product, the same weights.
                return OneDNNLinear.apply(x, kernel, bias), 0
            kernel = kernel.movedim(kernel_dim, 0) if kernel_dim is not None else kernel
            y = torch.matmul(x.reshape(x.shape[0], -1, x.shape[-1]), kernel)
            y = y.reshape(*x.shape[:-1], y.shape[-1])
            if bias is not None:
                bias = bias.movedim(bias_dim, 0) if bias_dim is not None else bias.expand(info.batch_size, -1)
                y = y + bias.reshape(bias.shape[0], *(1,) * (y.dim() - 2), bias.shape[-1])
            return y, 0

    return OneDNNLinear


# The attribute of a kernel tensor that `pack_for_inference` sets.
PACKING = "_keras_vit_packing"


class Packing:
    """A kernel's copy in oneDNN's blocked layout, made on first use.

    oneDNN's GEMM reads its weight in a blocked layout of its own; given the
    plain `(in, out)` kernel it reorders it on every call. The copy is remade
    whenever the kernel changed since (torch bumps a tensor's version on every
    in-place write, which is how Keras assigns a variable).
    """

    def __init__(self):
        self.version = None
        self.packed = None

    # A copied or pickled kernel starts without the packed copy (a oneDNN
    # tensor has no storage to copy) and makes its own on first use.
    def __deepcopy__(self, memo):
        return Packing()

    def __reduce__(self):
        return (Packing, ())

    def weight(self, kernel):
        import torch

        version = kernel._version
        if self.packed is None or self.version != version:
            with torch.no_grad():
                self.packed = torch.ops.mkldnn._reorder_linear_weight(kernel.T.contiguous())
            self.version = version
        return self.packed


@register("pack_for_inference", "torch", "onednn_packing")
def pack_for_inference(variables):
    """Marks the kernels (variables of rank 2 or more) that "onednn" keeps packed."""
    for variable in variables:
        if len(variable.shape) >= 2:
            setattr(variable.value, PACKING, Packing())
    return None


def _operands(x, kernel, bias, axes):
    """torch tensors `x (..., d_in)`, `kernel (d_in, width)`, `bias (width,)`, and out_dims.

    torch's own reshapes: `keras.ops.reshape` cost about 25 times as much
    Python per eager call, and a block's projections made eleven of them.
    """
    x = ops.convert_to_tensor(x)
    kernel = ops.convert_to_tensor(kernel)
    out_dims = tuple(kernel.shape[axes:])
    packing = _packing(kernel)
    if kernel.dim() != 2:
        kernel = kernel.reshape(-1, math.prod(out_dims))
    if axes > 1:
        x = x.flatten(-axes)
    if bias is not None:
        bias = ops.convert_to_tensor(bias)
        if bias.dim() != 1:
            bias = bias.reshape(-1)
    return x, kernel, bias, out_dims, packing


@register("dense", "torch", "onednn", pays=onednn_pays)
def onednn_dense(x, kernel, bias, axes, activation):
    x, kernel, bias, out_dims, packing = _operands(x, kernel, bias, axes)
    if not onednn_computes(x, kernel, bias):
        return NotImplemented
    if recording(x, kernel, bias) or transforms():
        y = _activation(autograd_linear()(x, kernel, bias), activation)
    else:
        # No gradient to record: the GEMM itself, without an autograd
        # function's call, and the tanh GELU as its post-op.
        post_op = ("gelu", "tanh") if activation == "gelu_tanh" else ("none", "")
        if packing is not None:
            y = packed_linear(x, packing.weight(kernel), bias, *post_op)
        else:
            y = linear_pointwise(x, kernel, bias, *post_op)
        y = y if post_op[0] == "gelu" else _activation(y, activation)
    return y if len(out_dims) == 1 else y.unflatten(-1, out_dims)


@register("dense", "torch", "torch_linear")
def linear_dense(x, kernel, bias, axes, activation):
    import torch.nn.functional as F

    x, kernel, bias, out_dims, _ = _operands(x, kernel, bias, axes)
    # `kernel.T` is a view; `linear` multiplies by its transpose, `kernel` itself.
    y = _activation(F.linear(x, kernel.T, bias), activation)
    return y if len(out_dims) == 1 else y.unflatten(-1, out_dims)


def _activation(y, name):
    if name is not None and not (recording(y) or compiling() or transforms()):
        # `y` is the projection's own new output: nothing else reads it.
        return torch_activations.in_place(y, name)
    return y if name is None else portable.activation(y, name)


# --- attention ---------------------------------------------------------------


@register("attention", "torch", "sdpa")
def sdpa(q, k, v, scale, mask):
    import torch.nn.functional as F

    if "Vmap" in transforms():
        return NotImplemented
    # A boolean `attn_mask` means what `mask` means (True: may attend); a
    # query that may attend to no key gets zeros. The output comes back
    # contiguous in (batch, tokens, heads, dim) order.
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale
    )
    return out.transpose(1, 2)


# --- sublayer calls ----------------------------------------------------------

# torch's module-level hook registries (`torch.nn.modules.module`); a hook
# registered there must see every module call.
_GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)
_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def direct_call_applies(layer, x):
    """Whether `layer.call(x, ...)` is what `layer(x, ...)` would compute.

    For an eager torch tensor (never a symbolic one), a built layer that is
    not quantized or rematerialised by Keras, has no activity regularizer and
    no torch hooks (its own or global ones), whose input already has its
    input dtype and carries no mask, and whose autocast scope would be the
    one in force.

    Example:

    >>> norm = keras.layers.LayerNormalization()
    >>> direct_call_applies(norm, keras.ops.ones((1, 2)))  # not built
    False
    """
    import torch

    if not isinstance(x, torch.Tensor) or not portable.call_adds_nothing(layer, x):
        return False
    if keras.backend.standardize_dtype(x.dtype) != layer.input_dtype:
        return False
    if any(getattr(layer, name, None) for name in _MODULE_HOOKS):
        return False
    modules = torch.nn.modules.module
    if any(getattr(modules, name, None) for name in _GLOBAL_HOOKS):
        return False
    return _same_autocast(layer)


def _same_autocast(layer):
    from keras.src.backend import get_autocast_scope

    # `Layer.__call__` enters a new autocast scope exactly when these differ.
    scope = get_autocast_scope()
    if scope is None:
        return layer.compute_dtype == layer.variable_dtype
    return layer.autocast and scope.dtype == layer.compute_dtype


@register("call_sublayer", "torch", "half_layer_norm")
def half_layer_norm(layer, x, args, kwargs):
    """A half-precision `LayerNormalization` by torch's kernel, or NotImplemented.

    torch's kernel takes bfloat16/float16 tensors as they are and normalises
    in float32, rounding once at the end, as Keras' upcast does. Only for a
    plain `LayerNormalization` over the last axis whose weights have `x`'s
    dtype (the `"bfloat16"` policy; under `"mixed_bfloat16"` they are float32).

    Example:

    >>> norm = keras.layers.LayerNormalization(dtype="bfloat16")
    >>> norm.build((2, 8))
    >>> x = ops.cast(ops.reshape(ops.arange(16, dtype="float32"), (2, 8)), "bfloat16")
    >>> y = half_layer_norm(norm, x, (), {})
    >>> y is NotImplemented or bool(ops.all(ops.equal(y, norm(x))))
    True
    """
    import torch
    import torch.nn.functional as F

    if args or kwargs or type(layer) is not keras.layers.LayerNormalization or layer.rms_scaling:
        return NotImplemented
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.bfloat16, torch.float16):
        return NotImplemented
    axis = list(layer.axis) if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    if axis not in ([-1], [x.dim() - 1]) or not direct_call_applies(layer, x):
        return NotImplemented
    gamma = None if layer.gamma is None else layer.gamma.value
    beta = None if layer.beta is None else layer.beta.value
    if any(w is not None and w.dtype != x.dtype for w in (gamma, beta)):
        return NotImplemented
    return F.layer_norm(x, (x.shape[-1],), gamma, beta, layer.epsilon)


def conv2d_weights(layer):
    """A built `Conv2D`'s kernel in torch's `(out, in, height, width)` layout
    (a view of Keras' `(height, width, in, out)`) and its bias or None."""
    bias = layer.bias.value if layer.use_bias else None
    return layer.kernel.value.permute(3, 2, 0, 1), bias


# The convolution layers "channels_last_conv" computes (exactly these types).
_CONVOLUTIONS = (keras.layers.Conv2D, keras.layers.DepthwiseConv2D, keras.layers.Conv2DTranspose)


def _conv_padding(layer):
    """torch's `padding` for a Conv2D of `layer`'s settings, or None where
    "same" would pad unevenly (a stride above 1, an even kernel)."""
    if layer.padding == "valid":
        return 0
    pads = []
    for size, stride, dilation in zip(layer.kernel_size, layer.strides, layer.dilation_rate):
        reach = dilation * (size - 1)
        if stride != 1 or reach % 2:
            return None
        pads.append(reach // 2)
    return tuple(pads)


@register("call_sublayer", "torch", "channels_last_conv")
def channels_last_conv(layer, x, args, kwargs):
    """A channels-last convolution by torch's own, on a strided view, or NotImplemented.

    Keras' torch convolutions copy NHWC maps to NCHW, then to channels-last
    memory again, and their outputs back; `F.conv2d` and
    `F.conv_transpose2d` read the NHWC tensor's `(batch, channels, height,
    width)` view as the channels-last tensor it is and write their outputs
    so, whose NHWC view is contiguous. For a plain `Conv2D` (one group,
    "valid" or even "same" padding), `DepthwiseConv2D` (likewise) or
    `Conv2DTranspose` ("valid", no output padding, no dilation), without
    constraints, where `direct_call_applies`.

    Example:

    >>> conv = keras.layers.Conv2D(4, 3, padding="same")
    >>> conv.build((1, 5, 6, 2))
    >>> x = keras.random.normal((1, 5, 6, 2), seed=0)
    >>> y = channels_last_conv(conv, x, (), {})
    >>> y is NotImplemented or bool(ops.all(ops.abs(y - conv(x)) < 1e-5))
    True
    """
    import torch.nn.functional as F

    kind = type(layer)
    if args or kwargs or kind not in _CONVOLUTIONS:
        return NotImplemented
    if layer.data_format != "channels_last" or getattr(layer, "groups", 1) != 1:
        return NotImplemented
    constraints = ("kernel_constraint", "depthwise_constraint", "bias_constraint")
    if any(getattr(layer, name, None) is not None for name in constraints):
        return NotImplemented
    if kind is keras.layers.Conv2DTranspose:
        if layer.padding != "valid" or layer.output_padding is not None or set(layer.dilation_rate) != {1}:
            return NotImplemented
        padding = 0
    else:
        padding = _conv_padding(layer)
    if padding is None or not direct_call_applies(layer, x):
        return NotImplemented
    bias = layer.bias.value if layer.use_bias else None
    view = x.permute(0, 3, 1, 2)
    if kind is keras.layers.Conv2D:
        kernel = conv2d_weights(layer)[0]
        y = F.conv2d(view, kernel, bias, layer.strides, padding, layer.dilation_rate)
    elif kind is keras.layers.DepthwiseConv2D:
        kernel = layer.kernel.value  # (h, w, in, multiplier) -> (in * multiplier, 1, h, w)
        kernel = kernel.reshape(*kernel.shape[:2], 1, -1).permute(3, 2, 0, 1)
        y = F.conv2d(view, kernel, bias, layer.strides, padding, layer.dilation_rate, groups=view.shape[1])
    else:
        kernel = layer.kernel.value.permute(3, 2, 0, 1)  # (h, w, out, in) -> (in, out, h, w)
        y = F.conv_transpose2d(view, kernel, bias, layer.strides)
    y = y.permute(0, 2, 3, 1)
    return y if layer.activation is keras.activations.linear else layer.activation(y)


@register("call_sublayer", "torch", "direct_calls")
def direct_call(layer, x, args, kwargs):
    """`layer.call(x, ...)` where `direct_call_applies`, else NotImplemented.

    The callers pass `training` as the block received it (already resolved by
    the block's own `__call__`), so the sublayers see the value the call
    context would have given them.
    """
    if not direct_call_applies(layer, x):
        return NotImplemented
    return layer.call(x, *args, **kwargs)


@register("take", "torch", "index_select", export=True)
def index_select(x, indices, axis):
    """`torch.index_select`: Keras' `take` adds a `squeeze` that torch's ONNX
    exporter writes as an invalid ONNX `Squeeze` (of a dimension above 1)."""
    import torch

    x = ops.convert_to_tensor(x)
    indices = ops.convert_to_tensor(indices)
    if indices.ndim != 1:
        return NotImplemented
    return torch.index_select(x, axis % x.ndim, indices.long())
