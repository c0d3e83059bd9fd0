"""A bad batch late in a Python generator gets the model's own input error,
on every backend, in `fit`, `evaluate` and `predict`; good generators give
what the same arrays give."""

import numpy as np
import pytest

import keras_vit
from conftest import TINY
from keras_vit.pretraining import MaskedPatchPrediction

# (what breaks in batch 3, the shape of that batch, the start of the error)
BAD_BATCHES = {
    "height": ((2, 36, 32, 3), "The image height must be a multiple of 8"),
    "channels": ((2, 32, 32, 4), "Model 'vit' takes 3-channel images"),
    "rank": ((2, 32, 32), "`x \\(batch 3 of the generator\\)` must be a batch of images"),
}


def _model():
    model = keras_vit.ViT(**TINY, classes=3)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return model


@pytest.fixture(scope="module")
def shared_model():
    # One model for the failing calls: each compiles its steps once.
    return _model()


def _batches(bad_shape=None, labels=True, count=4):
    rng = np.random.default_rng(0)
    for i in range(count):
        shape = bad_shape if i == 2 and bad_shape else (2, 32, 32, 3)
        x = rng.uniform(-1, 1, shape).astype("float32")
        yield (x, np.zeros((2,), "int32")) if labels else (x,)


def _run(model, method, batches):
    if method == "fit":
        return model.fit(batches, epochs=1, steps_per_epoch=4, verbose=0)
    if method == "evaluate":
        return model.evaluate(batches, verbose=0)
    return model.predict(batches, verbose=0)


@pytest.mark.parametrize("bad", list(BAD_BATCHES))
@pytest.mark.parametrize("method", ["fit", "evaluate", "predict"])
def test_bad_later_batch_gets_the_models_error(shared_model, method, bad):
    shape, message = BAD_BATCHES[bad]
    batches = _batches(shape, labels=method != "predict")
    with pytest.raises(ValueError, match=message) as caught:
        _run(shared_model, method, batches)
    assert f"of shape {shape}" in str(caught.value)
    assert "x (batch 3 of the generator)" in str(caught.value)


def test_bad_validation_batch_is_named(shared_model):
    shape, message = BAD_BATCHES["channels"]
    with pytest.raises(ValueError, match=message) as caught:
        shared_model.fit(_batches(), validation_data=_batches(shape), epochs=1, steps_per_epoch=4,
                     validation_steps=4, verbose=0)
    assert "validation_data (batch 3 of the generator)" in str(caught.value)


def test_good_generator_gives_what_arrays_give():
    model = _model()
    arrays = np.concatenate([x for (x,) in _batches(labels=False)])
    expected = model.predict(arrays, batch_size=2, verbose=0)
    np.testing.assert_allclose(model.predict(_batches(labels=False), verbose=0), expected, atol=1e-6)
    history = model.fit(_batches(), epochs=1, steps_per_epoch=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_pretraining_task_checks_generator_batches():
    encoder = keras_vit.ViT(**TINY, include_top=False)
    task = MaskedPatchPrediction(encoder, seed=0)
    task.compile(optimizer="adam")
    with pytest.raises(ValueError, match=r"RGB `\(batch, height, width, 3\)` images") as caught:
        task.fit(_batches((2, 32, 32, 4)), epochs=1, steps_per_epoch=4, verbose=0)
    assert "batch 3 of the generator" in str(caught.value)
