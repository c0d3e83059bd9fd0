"""How a layer calls its sublayers on torch's eager path.

Keras' `Layer.__call__` wraps every `call` in bookkeeping: it converts the
inputs to the layer's dtype, resolves `training` from the call context,
carries masks, enters autocast and name scopes and, on torch, goes through
`torch.nn.Module.__call__` and its hooks. Under jax and tensorflow that
happens once, while a function is traced. On torch it happens on every
eager call: about 60 µs a layer (a LayerNorm on a `(1, 197, 12)` tensor,
93 µs through `__call__` against 33 through `call`; a Dropout of rate 0,
67 µs against 0.1, on a 2-core EPYC), and a ViT block calls seven
sublayers, so a 12-block model spent ~5 ms a forward pass there, next to
~120 ms of computation for B/16 in bfloat16 at batch 1.

`call_sublayer(layer, x, ...)` calls `layer.call` directly where `__call__`
would add nothing but that bookkeeping, and `layer(x, ...)` otherwise. The
callers pass `training` as the block received it (already resolved by the
block's own `__call__`), so the sublayers see the value the call context
would have given them.
"""

import keras
from keras.src.backend import get_autocast_scope, get_keras_mask

from keras_vit.layers import kernels

# torch's module-level hook registries (`torch.nn.modules.module`); a hook
# registered there must see every module call.
_GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)
_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def call_sublayer(layer, x, *args, **kwargs):
    """`layer(x, *args, **kwargs)`, skipping Keras' `__call__` where it adds nothing.

    Args:
        layer: a built Keras layer.
        x: its first input.
        *args, **kwargs: the rest of its call arguments (pass `training`
            explicitly where the layer takes it).

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
    if direct_call_applies(layer, x):
        y = None if args or kwargs else kernels.half_layer_norm(layer, x)
        return layer.call(x, *args, **kwargs) if y is None else y
    return layer(x, *args, **kwargs)


def direct_call_applies(layer, x):
    """Whether `layer.call(x, ...)` is what `layer(x, ...)` would compute.

    Only on torch, for an eager tensor (never a symbolic one) outside
    `export_mode`, and only for a built layer that is not quantized or
    rematerialised by Keras, has no activity regularizer and no torch hooks
    (its own or global ones), whose input already has its input dtype and
    carries no mask, and whose autocast scope would be the one in force.
    """
    if keras.backend.backend() != "torch" or kernels.exporting():
        return False
    import torch

    if not isinstance(x, torch.Tensor) or not layer.built:
        return False
    if getattr(layer, "quantization_mode", None) is not None or getattr(layer, "_remat_mode", None):
        return False
    if getattr(layer, "activity_regularizer", None) is not None:
        return False
    if get_keras_mask(x) is not None:
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
    # `Layer.__call__` enters a new autocast scope exactly when these differ.
    scope = get_autocast_scope()
    if scope is None:
        return layer.compute_dtype == layer.variable_dtype
    return layer.autocast and scope.dtype == layer.compute_dtype
