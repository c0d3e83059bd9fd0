"""torch's projections on oneDNN's GEMM (`mkldnn._linear_pointwise`) on a CPU.

`keras_vit.layers.kernels.dense` runs here on torch where `applies` says so:
forward and, through `autograd_linear`, both gradients; a `for_inference`
copy's kernels kept in oneDNN's blocked layout (`pack_for_inference`).
"""

import keras


def applies(x, kernel, bias):
    """Whether `kernels.dense` runs on oneDNN's GEMM (`mkldnn._linear_pointwise`).

    torch's default float32 CPU GEMM (`F.linear` -> MKL `sgemm`) is the slow
    one on the AVX-512 EPYC CPUs measured here (232 GFLOP/s on a square
    4096 product, against 495 for the same `nn.Linear` on oneDNN and 528 for
    tensorflow, which uses oneDNN); on ViT's projection shapes (1576 x 768
    by 768 x 3072 and the like) `_linear_pointwise` on the unpacked weight
    ran 1.17-1.41x faster forward than `F.linear` on a loaded 2-core EPYC
    (`tools/benchmark_kernels.py --arch B/16 --batch 8 --dense`). In
    bfloat16, `F.linear` reaches oneDNN through `addmm` plus copies of its
    operands; `_linear_pointwise` ran the 394 x 768 by 768 x 3072 product in
    15 ms against 32 (float32: 33 ms), so bfloat16 takes it too, where the
    CPU has bf16 instructions (`_is_mkldnn_bf16_supported`; elsewhere
    oneDNN would emulate them). The weight is passed as it is, reordered
    by oneDNN on each call, except the kernels of a `for_inference` copy
    (`pack_for_inference`): a prepacked weight gained 4-14 % on the
    products, not enough to hold a second copy of every model's weights.
    Not under `torch.compile`, where inductor picks its own GEMM.
    """
    import torch

    if not ENABLED[0] or x.device.type != "cpu":
        return False
    if not torch.backends.mkldnn.is_available() or torch.compiler.is_compiling():
        return False
    tensors = (x, kernel) if bias is None else (x, kernel, bias)
    if x.dim() < 2 or any(t.dtype != x.dtype for t in tensors):
        return False
    if x.dtype == torch.bfloat16:
        return torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return x.dtype == torch.float32


def packed_linear(x, weight, bias, post_op="none", algorithm=""):
    """`x @ kernel + bias` on a weight that `Packing` reordered, with oneDNN's
    elementwise `post_op` applied inside the GEMM."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, post_op, [], algorithm)


# The attribute of a kernel tensor that `pack_for_inference` sets.
PACKING = "_keras_vit_packing"


class Packing:
    """A kernel's copy in oneDNN's blocked layout, made on first use.

    oneDNN's GEMM reads its weight in a blocked layout of its own; given the
    plain `(in, out)` kernel it reorders it on every call. Reordering once
    ran B/16's projections (72 products) in bfloat16 at batch 1 in 80
    against 92 ms (1.14x), at batch 8 1.09x; in float32 1.05x and 1.04x
    (2-core EPYC, avx512_bf16; results bit-equal); B/16's whole `predict`
    1.11x and 1.04x at batch 1, 1.05x and 1.06x at batch 8, interleaved
    with the plain model (`tools/benchmark_kernels.py --predict`). The
    copy is remade whenever the kernel changed since (torch bumps a tensor's
    version on every in-place write, which is how Keras assigns a
    variable).
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


def pack_for_inference(variables):
    """Lets `kernels.dense` keep these kernels in oneDNN's layout (torch, CPU).

    Only where `kernels.dense` runs on oneDNN (see `applies`) and no
    gradient is recorded: there each marked kernel is reordered once, on
    first use, and again only after it changes. It holds a second copy of
    the weights, which is why only `ViT.for_inference` asks for it. A no-op
    on other backends.

    Args:
        variables: Keras variables; those of rank 2 or more are marked.

    Example:

    >>> layer = keras.layers.Dense(4)
    >>> layer.build((None, 3))
    >>> pack_for_inference(layer.weights)
    """
    if keras.backend.backend() != "torch":
        return
    for variable in variables:
        if len(variable.shape) >= 2:
            setattr(variable.value, PACKING, Packing())


def linear_pointwise(x, kernel, bias, post_op="none", algorithm=""):
    """`x @ kernel + bias` by oneDNN's GEMM (`kernel.T` is a view: no copy),
    with oneDNN's elementwise `post_op` applied to the result inside it."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, kernel.T, bias, post_op, [], algorithm)


# Whether `kernels.dense` may use oneDNN on torch (tests and benchmarks switch it).
ENABLED = [True]
_AUTOGRAD_LINEAR = []


def autograd_linear():
    """`x @ kernel + bias` on oneDNN, with autograd.

    `mkldnn._linear_pointwise` has no backward of its own. The input's
    gradient is a `_linear_pointwise` call too (on the weight as it is, no
    copy). The weight's gradient, a product over the rows, is torch's `mm`
    on the transposed activations: `_linear_pointwise` needs its input
    contiguous, and copying the transposed activations cost 7 % of ViT-S/16's
    batch-16 training step (195 of 2,700 ms); on that step's shapes (3152
    rows, widths 384 and 1536) `mm` ran the weight gradients 1.16x faster
    in all than the copy and oneDNN (0.96-1.27x per shape; bfloat16
    1.06-1.43x), and the whole `train_on_batch` 1.05x (2-core EPYC, AVX-512).
    """
    if _AUTOGRAD_LINEAR:
        return _AUTOGRAD_LINEAR[0]
    import torch

    class OneDNNLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, kernel, bias):
            ctx.save_for_backward(x, kernel)
            ctx.has_bias = bias is not None
            return linear_pointwise(x, kernel, bias)

        @staticmethod
        def backward(ctx, grad):
            x, kernel = ctx.saved_tensors
            grad = grad.contiguous()
            grad_x = grad_kernel = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_x = linear_pointwise(grad, kernel.T, None)
            rows = grad.reshape(-1, grad.shape[-1])
            if ctx.needs_input_grad[1]:
                # x_rows.T @ rows by torch's `mm`, which reads the transposed
                # view in place; oneDNN's `linear` copies it first.
                grad_kernel = torch.mm(x.reshape(-1, x.shape[-1]).T, rows)
            if ctx.has_bias and ctx.needs_input_grad[2]:
                grad_bias = rows.sum(0)
            return grad_x, grad_kernel, grad_bias

    _AUTOGRAD_LINEAR.append(OneDNNLinear.apply)
    return OneDNNLinear.apply
