"""`QKNorm` against the LayerNorm formula in NumPy."""

import os
import tempfile

import keras
import numpy as np
import pytest

from keras_vit.layers.qk_norm import QKNorm

RNG = np.random.default_rng(0)


def _layer_norm(x, gamma, beta, epsilon):
    x = x.astype("float64")
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


def _inputs():
    q = RNG.normal(2.0, 3.0, size=(2, 5, 3, 8)).astype("float32")
    k = RNG.normal(-1.0, 0.5, size=(2, 7, 3, 8)).astype("float32")
    return q, k


@pytest.mark.parametrize("center", [True, False])
def test_matches_the_layer_norm_formula(center):
    q, k = _inputs()
    layer = QKNorm(epsilon=1e-6, center=center)
    layer.build(q.shape, k.shape)
    weights = {}
    for norm in (layer.query_norm, layer.key_norm):
        gamma = RNG.normal(size=8).astype("float32")
        beta = RNG.normal(size=8).astype("float32") if center else np.zeros(8, "float32")
        norm.gamma.assign(gamma)
        if center:
            norm.beta.assign(beta)
        else:
            assert norm.beta is None
        weights[norm.name] = (gamma, beta)
    nq, nk = (keras.ops.convert_to_numpy(t) for t in layer(q, k))
    np.testing.assert_allclose(nq, _layer_norm(q, *weights["query_norm"], 1e-6), atol=1e-5, rtol=0)
    np.testing.assert_allclose(nk, _layer_norm(k, *weights["key_norm"], 1e-6), atol=1e-5, rtol=0)


def test_serialises_and_saves():
    q, k = _inputs()
    layer = QKNorm(epsilon=1e-5, center=False, name="qk_norm")
    expected = [keras.ops.convert_to_numpy(t) for t in layer(q, k)]
    config = layer.get_config()
    assert QKNorm.from_config(config).get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert restored.get_config() == config
    qi, ki = keras.Input(q.shape[1:]), keras.Input(k.shape[1:])
    model = keras.Model([qi, ki], list(layer(qi, ki)))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "qk.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    for got, want in zip(loaded([q, k]), expected):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got), want, atol=1e-6)
    assert sorted(w.path for w in layer.weights) == ["qk_norm/key_norm/gamma", "qk_norm/query_norm/gamma"]


def test_gradients_reach_every_weight():
    q, k = _inputs()
    layer = QKNorm()
    qi, ki = keras.Input(q.shape[1:]), keras.Input(k.shape[1:])
    nq, nk = layer(qi, ki)
    # Attention logits: the product the normalisation feeds.
    logits = keras.ops.einsum("bqhd,bkhd->bhqk", nq, nk)
    model = keras.Model([qi, ki], keras.layers.Flatten()(logits))
    before = [keras.ops.convert_to_numpy(w).copy() for w in layer.trainable_weights]
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    target = RNG.normal(size=(2, 3 * 5 * 7)).astype("float32")
    model.fit([q, k], target, epochs=1, batch_size=2, verbose=0)
    assert len(before) == 4
    for weight, old in zip(layer.trainable_weights, before):
        assert not np.array_equal(keras.ops.convert_to_numpy(weight), old), weight.path


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="epsilon"):
        QKNorm(epsilon=0)
    with pytest.raises(ValueError, match="head width"):
        QKNorm()(np.zeros((1, 2, 2, 4), "float32"), np.zeros((1, 2, 2, 3), "float32"))
