"""A workaround for Keras 3 `model.fit` under `MultiWorkerMirroredStrategy`.

Keras 3 (up to at least 3.15.1) fails in every worker of a
`tf.distribute.MultiWorkerMirroredStrategy` (keras-team/keras#20585,
tensorflow/tensorflow#72388), at two places of its TensorFlow trainer:

1. `TensorFlowTrainer._maybe_symbolic_build` averages the first distributed
   batch with `strategy.reduce("MEAN", batch, axis=None)` to learn its
   shapes; the collective strategy cannot reduce a `PerReplica` outside a
   replica context ("Attempt to convert a value (PerReplica...) to a
   Tensor"). The shapes are those of one replica's batch, so the first
   local replica's batch serves.
2. `reduce_per_replica` averages each step's (scalar) metrics with
   `strategy.reduce("MEAN", value, axis=0)`, which a scalar does not have
   ("Invalid reduction dimension 0"). A scalar is averaged over the
   replicas alone (`axis=None`).

`install()` wraps both functions; the wrappers change nothing unless the
strategy is a multi-worker collective strategy; the patch goes once Keras
no longer needs it.
"""

from keras.src.backend.tensorflow import trainer as _trainer

_ORIGINAL = {}


def _multi_worker(strategy):
    return _trainer._collective_all_reduce_multi_worker(strategy)


def _maybe_symbolic_build(self, iterator=None, data_batch=None):
    strategy = self._distribute_strategy
    if strategy is None or iterator is None or not _multi_worker(strategy):
        return _ORIGINAL["build"](self, iterator=iterator, data_batch=data_batch)
    import tensorflow as tf

    for _, _, it in iterator:
        batch = next(it)
        data_batch = tf.nest.map_structure(
            lambda x: strategy.experimental_local_results(x)[0]
            if isinstance(x, tf.distribute.DistributedValues)
            else x,
            batch,
        )
        break
    with strategy.scope():
        self._symbolic_build(data_batch=data_batch)


def _reduce_per_replica(values, strategy, reduction):
    if not _multi_worker(strategy) or reduction not in ("auto", "mean"):
        return _ORIGINAL["reduce"](values, strategy, reduction)

    def mean(value):
        axis = 0 if value.shape.rank else None
        return strategy.reduce("MEAN", value, axis=axis)

    return _trainer.tree.map_structure(mean, values)


def install():
    """Patches Keras's TensorFlow trainer for multi-worker `fit` (idempotent).

    `keras_vit.training.get_distribution("multi_worker")` calls it.

    Example:

    >>> install()
    >>> _trainer.reduce_per_replica is _reduce_per_replica
    True
    """
    if _ORIGINAL:
        return
    _ORIGINAL["build"] = _trainer.TensorFlowTrainer._maybe_symbolic_build
    _ORIGINAL["reduce"] = _trainer.reduce_per_replica
    _trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    _trainer.reduce_per_replica = _reduce_per_replica

