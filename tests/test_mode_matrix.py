"""The fast paths under the execution modes users reach, per backend.

Each cell runs a tiny model with one set of fast paths forced on (whatever
this machine's hardware rules would choose) under one mode, and holds it to
the portable reference run eagerly: the same losses and predictions within
float32 rounding, or a clear refusal naming the mode.
"""

import contextlib

import keras
import numpy as np
import pytest

import keras_vit
from conftest import TINY, to_numpy
from kernel_helpers import BACKEND
from keras_vit import kernels
from keras_vit.kernels import registry

# The sets of fast paths a cell forces on. "fast" is every path of the
# backend (where two paths serve one op, the first registered that computes
# the call wins, as the dispatcher takes it); "second" the other projection
# of torch, whose first one is "onednn".
PATH_SETS = ("fast", "second", "portable")
# Inside torch.compile the "onednn" projection declines (Inductor lowers the
# products itself), so "second" would compile the graph "fast" compiles.
COMPILED_PATH_SETS = ("fast", "portable")


def paths(path_set):
    """A context forcing `path_set` (one of `PATH_SETS`) on this backend."""
    if path_set == "portable":
        return kernels.portable_only()
    names = [o.name for o in registry.registered(backend=BACKEND) if not o.export]
    stack = contextlib.ExitStack()
    if path_set == "second":
        if BACKEND != "torch":
            pytest.skip(f"only torch has a second projection path; {BACKEND} has {names}")
        stack.enter_context(kernels.disabled("onednn"))
        names.remove("onednn")
    stack.enter_context(kernels.forced(*names))
    return stack


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, TINY["image_size"], TINY["image_size"], 3)).astype("float32")
    y = keras.utils.to_categorical(np.arange(8) % 5, 5)
    return x, y


def _run(jit_compile):
    """Losses of two epochs of `fit`, `evaluate`'s loss and `predict`'s output."""
    keras.utils.set_random_seed(1)
    model = keras_vit.ViT(**TINY, classes=5, classifier_activation="softmax")
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy",
                  jit_compile=jit_compile)
    x, y = _data()
    history = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    loss = model.evaluate(x, y, batch_size=4, verbose=0)
    return history.history["loss"], loss, model.predict(x, batch_size=4, verbose=0)


@pytest.fixture(scope="module")
def reference():
    with kernels.portable_only():
        return _run(jit_compile=False)


@pytest.mark.parametrize("path_set", COMPILED_PATH_SETS)
def test_compiled_fit_evaluate_predict_agree_with_the_portable_reference(reference, path_set):
    """`jit_compile=True`: XLA on jax and tensorflow, torch.compile (Inductor) on torch."""
    with paths(path_set):
        losses, loss, predictions = _run(jit_compile=True)
    np.testing.assert_allclose(losses, reference[0], rtol=1e-4)
    np.testing.assert_allclose(loss, reference[1], rtol=1e-4)
    np.testing.assert_allclose(to_numpy(predictions), to_numpy(reference[2]), atol=1e-5)
