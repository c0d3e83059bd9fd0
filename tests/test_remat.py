"""Rematerialised blocks (`remat=True`): the same training step, through `keras.remat`."""

import keras
import numpy as np
import pytest

import keras_vit
from conftest import TINY, to_numpy


@pytest.fixture
def remat_calls(monkeypatch):
    """Counts the functions handed to `keras.remat` (the backend's checkpointing)."""
    calls = []
    real = keras.remat

    def counting(f):
        calls.append(f)
        return real(f)

    monkeypatch.setattr(keras, "remat", counting)
    return calls


def _step(model, x, y):
    """One SGD step with learning rate 1: the weights move by minus the gradient."""
    before = [to_numpy(w).copy() for w in model.trainable_weights]
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss="sparse_categorical_crossentropy")
    model.fit(x, y, epochs=1, batch_size=len(x), shuffle=False, verbose=0)
    return [old - to_numpy(w) for old, w in zip(before, model.trainable_weights)]


@pytest.mark.parametrize("options", [dict(), dict(layer_scale_init=0.5, num_register_tokens=1)])
def test_gradients_equal_without_remat(rng, remat_calls, options):
    config = dict(TINY, num_layers=3, classes=4, classifier_activation="softmax", **options)
    plain = keras_vit.ViT(**config)
    remat = keras_vit.ViT(**config, remat=True)
    assert remat.block_config.remat and not plain.block_config.remat
    for variable, source in zip(remat.weights, plain.weights):
        value = rng.normal(scale=0.3, size=source.shape).astype("float32")
        source.assign(value)
        variable.assign(value)
    x = rng.normal(size=(4, 32, 32, 3)).astype("float32")
    y = np.array([0, 1, 2, 3])
    expected = _step(plain, x, y)
    assert not remat_calls  # the plain model never rematerialises
    grads = _step(remat, x, y)
    assert len(remat_calls) >= 3  # every block, traced in training
    for g, e, w in zip(grads, expected, plain.trainable_weights):
        # (A key bias shifts every score of a query alike: softmax ignores it.)
        assert np.abs(e).max() > 0 or w.path.endswith("key/bias"), w.path
        np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5, err_msg=w.path)


def test_inference_does_not_rematerialise(rng, remat_calls):
    model = keras_vit.ViT(**TINY, classes=3, remat=True)
    plain = keras_vit.ViT(**TINY, classes=3)
    plain.set_weights(model.get_weights())
    x = rng.normal(size=(2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(to_numpy(model(x)), to_numpy(plain(x)), atol=1e-6)
    assert not remat_calls


def test_config_round_trip():
    model = keras_vit.ViT(**TINY, classes=3, remat=True)
    config = model.get_config()
    assert config["block_config"]["remat"] is True
    assert keras_vit.ViT.from_config(config).get_layer("encoderblock_1").block_config.remat


@pytest.mark.parametrize(
    "options, match",
    [
        (dict(dropout_rate=0.1), "dropout_rate=0.1"),
        (dict(attention_dropout_rate=0.1), "attention_dropout_rate=0.1"),
        (dict(stochastic_depth_rate=0.1), "stochastic_depth_rate=0.1"),
        (dict(remat="yes"), "remat"),
    ],
)
def test_refuses_random_masks(options, match):
    options.setdefault("remat", True)
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT(**TINY, **options)
