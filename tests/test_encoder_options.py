"""Encoder options: numerics against the NumPy reference, `.keras` round
trips, and the forward pass that inspection and pre-training share."""

import os

import keras
import numpy as np
import pytest

import keras_vit
import reference
from conftest import TINY, to_numpy
from keras_vit import pretraining
from keras_vit.weights.mapping import model_state

OPTIONS = {
    "pre_norm": dict(pre_norm=True),
}


def _model(options, **extra):
    model = keras_vit.ViT(**TINY, classes=5, classifier_activation=None, **options, **extra)
    rng = np.random.default_rng(0)
    for v in model.weights:  # norms, tokens and heads start at one or zero
        v.assign(np.asarray(v) + rng.normal(0, 0.3, v.shape).astype("float32"))
    return model


def _images(n=2, size=32):
    return np.random.default_rng(1).uniform(-1, 1, (n, size, size, 3)).astype("float32")


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_options_match_the_numpy_reference(kind):
    model = _model(OPTIONS[kind])
    x = _images()
    expected = reference.forward(model_state(model), x, model.gelu_approximate, model.layer_norm_epsilon)
    np.testing.assert_allclose(to_numpy(model(x)), expected, rtol=0, atol=3e-5)


def test_the_options_change_the_model():
    paths = lambda m: {v.path for v in m.weights}  # noqa: E731
    plain, pre = (keras_vit.ViT(**TINY, **o) for o in ({}, dict(pre_norm=True)))
    assert paths(pre) - paths(plain) == {"pre_norm/gamma", "pre_norm/beta"}


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_keras_file_round_trip(kind, tmp_path):
    model = _model(OPTIONS[kind])
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(to_numpy(loaded(_images())), to_numpy(model(_images())))


def test_inspection_and_pretraining_run_the_pre_norm():
    """Both consume the model's forward pass, so the norm before the blocks
    reaches them without code of theirs."""
    encoder = _model(dict(pre_norm=True), include_top=False)
    task = pretraining.MaskedPatchPrediction(encoder, target="pixels", seed=0)
    images = np.random.default_rng(2).integers(0, 256, (2, 32, 32, 3)).astype("float32")
    tokens, grid = task.embed(images)
    scaled = keras_vit.preprocess_input(images, mode="inception")
    expected = to_numpy(encoder.forward_features(scaled))[:, encoder.num_prefix_tokens :]
    np.testing.assert_allclose(to_numpy(task.encode(tokens, grid)), expected, atol=1e-5)
    x = _images(1)
    maps = keras_vit.inspection.attention_maps(encoder, x, layers=[0])
    first = encoder.get_layer("pre_norm")(encoder.get_layer("embedding")(encoder.get_layer("patches")(x)))
    probs = to_numpy(encoder.encoder_blocks[0].attention_probs(first))
    np.testing.assert_allclose(maps[0], probs, atol=1e-6)
