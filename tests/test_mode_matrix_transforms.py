"""The mode matrix under function transforms: each set of fast paths
(forced on) under each backend's own autodiff, and under its vectorizing
map with the gradients of every batch, against the portable form's
gradients computed eagerly batch by batch (tests/mode_matrix_autodiff.py
says how; docs/guides/modes.md is the table of the cells).
"""

import functools

import numpy as np
import pytest

from kernel_helpers import BACKEND, taken
from mode_matrix import BATCH, PATH_SETS, X, Y, assert_close, check_paths, distinct, make_model, paths
from mode_matrix_autodiff import Gradients, gradients, mapped_gradients

# Two batches of four: what a vectorizing map maps over, and the batches of
# the reference.
HALVES = 2
XS = X.reshape(HALVES, BATCH // HALVES, *X.shape[1:])
YS = Y.reshape(HALVES, BATCH // HALVES, -1)

# The gradients' "portable" cell is the reference's own computation on
# tensorflow and torch (eager); on jax it is the reference compiled by XLA.
GRADIENT_CELLS = distinct(PATH_SETS, "gradients", skip=() if BACKEND == "jax" else ("portable",))
MAP_CELLS = distinct(PATH_SETS, "vmap")


@functools.lru_cache(maxsize=None)
def reference_batches():
    """The portable form's gradients of each batch of `XS`, eager (on jax op
    by op), each as the whole batch with the other's images weighted zero."""
    with paths("portable"):
        model = make_model()
        halves = []
        for i in range(HALVES):
            weights = np.zeros(BATCH, "float32")
            weights[i * (BATCH // HALVES):(i + 1) * (BATCH // HALVES)] = 1
            whole = gradients(model, X, Y, weights, jit=False)
            rows = weights > 0
            halves.append(Gradients(whole.outputs[rows], whole.loss, whole.inputs[rows], whole.weights))
        return tuple(halves)


def _whole_batch(batches):
    """The gradients of the batches taken together (the loss is a sum)."""
    return Gradients(
        np.concatenate([b.outputs for b in batches]), sum(b.loss for b in batches),
        np.concatenate([b.inputs for b in batches]),
        [sum(ws) for ws in zip(*(b.weights for b in batches))],
    )


def assert_gradients_agree(got, expected):
    assert_close("outputs", got.outputs, expected.outputs)
    assert_close("loss", got.loss, expected.loss)
    assert_close("input gradient", got.inputs, expected.inputs)
    assert len(got.weights) == len(expected.weights)
    for i, (a, b) in enumerate(zip(got.weights, expected.weights)):
        assert_close(f"gradient of trainable weight {i}", a, b)


def test_the_reference_gradients_are_not_trivial():
    """Every gradient of the reference moves: a path that dropped one would not pass as equal."""
    for batch in reference_batches():
        assert all(np.abs(g).max() > 0 for g in [batch.inputs, *batch.weights])
    first, second = reference_batches()
    assert np.abs(first.weights[0] - second.weights[0]).max() > 1e-4  # the batches differ


@pytest.mark.parametrize("path_set", GRADIENT_CELLS)
def test_gradients_agree_with_the_portable_reference(path_set):
    """The loss and its gradients with respect to the images and every
    weight: `jax.grad` of `stateless_call` compiled by XLA,
    `tf.GradientTape`, torch's autograd."""
    model = make_model()
    with paths(path_set), taken() as seen:
        got = gradients(model, X, Y)
    assert_gradients_agree(got, _whole_batch(reference_batches()))
    check_paths(seen, path_set, "gradients")


@pytest.mark.parametrize("path_set", MAP_CELLS)
def test_mapped_gradients_agree_with_the_portable_reference(path_set):
    """Each batch's outputs and gradients under `jax.vmap` of `jax.grad`,
    `torch.func.vmap` of `torch.func.grad_and_value` (torch's fused attention
    stands aside: it has no batching rule) and `tf.vectorized_map` of a
    tape's gradients (every op vectorized, no loop)."""
    model = make_model()
    with paths(path_set), taken() as seen:
        got = mapped_gradients(model, XS, YS)
    for i, expected in enumerate(reference_batches()):
        batch = Gradients(got.outputs[i], got.loss[i], got.inputs[i], [w[i] for w in got.weights])
        assert_gradients_agree(batch, expected)
    check_paths(seen, path_set, "vmap")
