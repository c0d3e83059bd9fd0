"""TensorFlow: a model's training state built before its step is traced.

Keras' TensorFlow trainer leaves the optimizer's variables and the compiled
metrics' to be made inside the first trace of the train (or test) function,
unless the model was made under a `tf.distribute` strategy. A variable made
while tracing makes TensorFlow trace the function a second time once the
variables exist, so a first `fit` built the whole step's graph twice. Built
beforehand from the first batch's shapes, as Keras does under a strategy
and always on jax and torch, the step is traced once: a tiny ViT's first
`fit` (with a metric and validation data) took about 40 % less time on a 2-core
CPU, with the same losses.
"""

import keras


def symbolic_build(model, build, iterator=None, data_batch=None):
    """Runs Keras' `_maybe_symbolic_build` (`build`) also without a strategy.

    Args:
        model: the Keras model whose trainer calls `build`.
        build: Keras' own `_maybe_symbolic_build`, bound to the model.
        iterator, data_batch: as Keras passes them (one of the two).

    Example:

    >>> import keras, numpy as np
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> if keras.backend.backend() == "tensorflow":
    ...     symbolic_build(model, model._maybe_symbolic_build,
    ...                    data_batch=(np.zeros((1, 2), "float32"), np.zeros((1, 1), "float32")))
    ... else:
    ...     model.optimizer.build(model.trainable_variables)
    >>> model.optimizer.built
    True
    """
    if keras.backend.backend() != "tensorflow" or model._distribute_strategy is not None:
        return build(iterator=iterator, data_batch=data_batch)
    import tensorflow as tf

    # Keras builds only where it records a strategy: the default one stands in.
    model._distribute_strategy = tf.distribute.get_strategy()
    try:
        return build(iterator=iterator, data_batch=data_batch)
    finally:
        model._distribute_strategy = None
