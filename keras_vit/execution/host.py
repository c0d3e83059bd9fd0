"""NumPy on the host in the middle of a compiled step, on each backend.

Some steps of a training loss have no tensor form: the Hungarian matching
of EoMT's queries to the ground-truth segments
(`keras_vit.tasks.mask_classification`) is SciPy's
`linear_sum_assignment`, a combinatorial solver. `host_call` runs such a
NumPy function where the step runs: under jax's `jit` through
`jax.pure_callback`, in a TensorFlow graph through `tf.numpy_function`, and
directly on torch, whose trainer runs eagerly. Its inputs leave the
gradient (the matching is a choice, not a function to differentiate), and
its result is an integer array of a known shape.

XLA cannot compile `tf.numpy_function`: `keep_out_of_xla` keeps a
TensorFlow model's train and test steps in the graph runtime (Keras turns
XLA off on a TensorFlow CPU already; on a GPU it would turn it on).
"""

import keras
import numpy as np


def host_call(function, inputs, shape, dtype="int32"):
    """`function(*inputs)` computed in NumPy on the host, as a tensor.

    Args:
        function: takes NumPy arrays, returns an array of `shape` and `dtype`.
        inputs: tensors (their gradients are stopped).
        shape: the result's shape (its first entry may be None: the batch).
        dtype: the result's dtype, default "int32".

    Returns:
        A tensor, where the step runs (no gradient flows through it).

    Example:

    >>> import numpy as np
    >>> out = host_call(lambda x: np.argsort(x, axis=1), [np.array([[3.0, 1.0, 2.0]])], (1, 3))
    >>> keras.ops.convert_to_numpy(out).tolist()
    [[1, 2, 0]]
    """
    inputs = [keras.ops.stop_gradient(keras.ops.convert_to_tensor(x)) for x in inputs]

    def run(*arrays):
        return np.asarray(function(*arrays), dtype)

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        concrete = tuple(inputs[0].shape[0] if s is None else s for s in shape)
        # The callback's inputs carry no tangent (stopped above): jax skips
        # its (absent) derivative rule.
        return jax.pure_callback(run, jax.ShapeDtypeStruct(concrete, dtype), *inputs, vmap_method="sequential")
    if backend == "tensorflow":
        import tensorflow as tf

        out = tf.numpy_function(run, inputs, tf.as_dtype(dtype), stateful=False)
        out.set_shape(shape)
        return out
    return keras.ops.convert_to_tensor(run(*[keras.ops.convert_to_numpy(x) for x in inputs]), dtype)


def keep_out_of_xla(model, jit_compile):
    """Keeps `model`'s train and test steps out of XLA on TensorFlow, where a
    `host_call` cannot be compiled (a no-op on jax and torch).

    Raises:
        ValueError: `jit_compile=True` on TensorFlow.
    """
    if keras.backend.backend() != "tensorflow":
        return
    if jit_compile is True:
        raise ValueError(
            "This loss matches on the host (tf.numpy_function), which XLA cannot compile on TensorFlow: "
            "compile with jit_compile='auto' or False. Received: jit_compile=True"
        )
    model.jit_compile = False
