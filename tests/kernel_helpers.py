"""Helpers of the kernels' tests: which fast path ran, one path alone, gradients,
where torch's oneDNN runs."""

import contextlib
import dataclasses

import keras
import numpy as np

from conftest import to_numpy
from keras_vit import kernels
from keras_vit.kernels import registry, torch_backend

BACKEND = keras.backend.backend()


@contextlib.contextmanager
def taken():
    """Within this context, the names of the fast paths that computed a call
    (returned something other than NotImplemented), in order, are recorded."""
    seen = []
    original = list(registry._OVERRIDES)

    def recording(override):
        def function(*args):
            out = override.function(*args)
            if out is not NotImplemented:
                seen.append(override.name)
            return out

        return dataclasses.replace(override, function=function)

    registry._OVERRIDES[:] = [recording(o) for o in original]
    registry.clear_cache()
    try:
        yield seen
    finally:
        registry._OVERRIDES[:] = original
        registry.clear_cache()


def only(name, op="attention"):
    """A context in which `op` takes the fast path `name` alone (forced, the
    backend's others for `op` disabled), or its portable form (`"portable"`)."""
    if name == "portable":
        return kernels.portable_only()
    others = [o.name for o in registry.registered(op, BACKEND) if o.name != name]
    stack = contextlib.ExitStack()
    stack.enter_context(kernels.forced(name))
    if others:
        stack.enter_context(kernels.disabled(*others))
    return stack


def value_and_grads(fn, arrays, weights):
    """`fn(*arrays)` and the gradients of `sum(fn(*arrays) * weights)` wrt each array."""
    if BACKEND == "jax":
        import jax

        def both(*arrays):
            out = fn(*arrays)
            return out, jax.grad(lambda *a: (fn(*a) * weights).sum(), argnums=tuple(range(len(arrays))))(*arrays)

        # One compiled program: jax's eager mode compiles each operation on its own.
        out, grads = jax.jit(both)(*arrays)
    elif BACKEND == "tensorflow":
        import tensorflow as tf

        tensors = [tf.convert_to_tensor(a) for a in arrays]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            out = fn(*tensors)
            loss = tf.reduce_sum(tf.cast(out, "float32") * weights)
        grads = tape.gradient(loss, tensors)
    else:
        import torch

        tensors = [torch.tensor(np.asarray(a), requires_grad=True) for a in arrays]
        out = fn(*tensors)
        (out.float() * torch.from_numpy(np.asarray(weights, "float32"))).sum().backward()
        grads = [t.grad for t in tensors]
    return to_numpy(out), [to_numpy(g) for g in grads]


def _probe(dtype):
    import torch

    return torch.ones(2, 2, dtype=getattr(torch, dtype))


def onednn_computes_here(dtype="float32"):
    """Whether torch's oneDNN GEMM can run here (torch, oneDNN, the dtype)."""
    return BACKEND == "torch" and torch_backend.onednn_computes(_probe(dtype), _probe(dtype), None)


def onednn_by_default(dtype="float32"):
    """Whether a plain kernel's projection takes oneDNN here (its hardware rule pays)."""
    return onednn_computes_here(dtype) and torch_backend.onednn_pays(_probe(dtype), _probe(dtype))
