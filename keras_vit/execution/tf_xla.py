"""TensorFlow on a CPU: inference compiled with XLA where the choice was Keras'.

Keras' `jit_compile="auto"` turns XLA off on a TensorFlow CPU. For
inference XLA pays, while training ran faster without it, so a keras_vit
model compiled with "auto" (or never compiled) gets an XLA predict function
there and keeps Keras' choice for training. Not under a bfloat16 compute
dtype, where the graph runtime's oneDNN matmuls run bfloat16 at twice the
float32 rate and XLA's CPU dots do not; not where Keras decides already (an
explicit `jit_compile`, an accelerator, several replicas, `run_eagerly`).
The predict function is traced inside `kernels.xla_compiled()`, so that
attention over many tokens takes its heads a group at a time, as on jax.
docs/performance.md holds the measurements behind each choice.
"""

import keras

from keras_vit import kernels


def record_jit_compile(model, jit_compile):
    """Notes whether `model.compile` left `jit_compile` to Keras ("auto")."""
    model._jit_compile_auto = jit_compile == "auto"


def uses_xla(model):
    """Whether `model`'s predict function is XLA-compiled by this policy.

    Example:

    >>> import keras
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> uses_xla(model) == (keras.backend.backend() == "tensorflow")
    True
    >>> record_jit_compile(model, False)
    >>> uses_xla(model)
    False
    """
    if keras.backend.backend() != "tensorflow":
        return False
    if not getattr(model, "_jit_compile_auto", True) or model.run_eagerly:
        return False
    import tensorflow as tf

    if model.jit_compile or tf.config.list_logical_devices("GPU"):
        return False  # Keras has decided already (XLA on accelerators).
    if any(layer.compute_dtype == "bfloat16" for layer in (model, *model.layers)):
        return False  # oneDNN runs bfloat16 at twice XLA's CPU rate.
    return model.distribute_strategy.num_replicas_in_sync == 1


def make_predict_function(model, make, force=False):
    """`make(force)` (Keras' `make_predict_function` of `model`), XLA-compiled
    where `uses_xla(model)`.

    Args:
        model: the Keras model.
        make: Keras' own `make_predict_function`, bound to the model.
        force: as Keras takes it.

    Returns:
        The model's predict function.
    """
    if not uses_xla(model):
        make(force)
        return model.predict_function
    chosen = model.jit_compile
    model.jit_compile = True
    try:
        make(force)
    finally:
        model.jit_compile = chosen
    function = model.predict_function
    if function is None or getattr(function, "_traced_for_xla", False):
        return function

    def predict_function(*args, **kwargs):
        # The layers' kernels emit XLA's fastest form when traced here.
        with kernels.xla_compiled():
            return function(*args, **kwargs)

    predict_function._traced_for_xla = True
    model.predict_function = predict_function
    return predict_function
