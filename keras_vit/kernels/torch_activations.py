"""torch's MLP activations written over a projection's own new output.

Used by torch's projection paths (`torch_backend`) where no gradient is
recorded: each saves the tensors of the MLP's width that the portable form
writes (docs/performance.md).

Example:

>>> y = ops.convert_to_tensor([[-2.0, 0.0, 0.5, 3.0]])
>>> expected = portable.activation(y, "gelu_tanh")
>>> bool(ops.all(in_place(ops.copy(y), "gelu_tanh") == expected))
True
"""

from keras import ops

from keras_vit.kernels import portable


def in_place(y, name):
    """The MLP activation `name` ("gelu_tanh", "gelu" or "quick_gelu") of
    `y`, written over `y` (the quick GELU into one new tensor)."""
    if name == "quick_gelu":
        return quick_gelu_in_place(y)
    return gelu_in_place(y, approximate=name == "gelu_tanh")


def gelu_in_place(y, approximate):
    """GELU (the tanh approximation or, with `approximate=False`, the exact
    form) written over `y`, bit-equal to the portable form.

    torch's in-place GELU runs the kernel of `F.gelu` without writing a
    second tensor of the MLP's width. Only where no gradient is recorded
    (autograd would need `y`).

    Example:

    >>> y = ops.convert_to_tensor([[-2.0, 0.0, 0.5, 3.0]])
    >>> expected = portable.activation(y, "gelu")
    >>> bool(ops.all(gelu_in_place(y, approximate=False) == expected))
    True
    """
    import torch

    return torch.ops.aten.gelu_(y, approximate="tanh" if approximate else "none")


def quick_gelu_in_place(y):
    """`y * sigmoid(1.702 * y)`, bit-equal to the portable form, in one new tensor.

    The portable form allocates three tensors of `y`'s size, each a fresh
    buffer at an MLP's width (docs/performance.md has the measurement). In
    place, so only where no gradient is recorded (autograd would need the
    sigmoid's output).

    Example:

    >>> y = ops.convert_to_tensor([[-2.0, 0.0, 0.5, 3.0]])
    >>> bool(ops.all(quick_gelu_in_place(y) == portable.activation(y, "quick_gelu")))
    True
    """
    import torch

    z = torch.mul(y, 1.702)
    torch.sigmoid_(z)
    return z.mul_(y)
