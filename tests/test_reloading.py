"""Reloading a checkpoint file: its head's class count without `classes`, and
`class_names` with every file type keras_vit reads."""

import warnings

import numpy as np
import pytest

import keras_vit
from conftest import TINY, spread, to_numpy
from keras_vit.preprocessing import Preprocessing
from synthetic import images, official_params, to_timm

pytestmark = spread("reloading reads files into models held on every backend; each case once")

CLASSES = 7
NAMES = tuple(f"kind_{i}" for i in range(CLASSES))
FILES = ("weights.h5", "keras", "npz", "safetensors")
# The GELU each test file was made with (the Keras files: the default tanh).
GELU = {"weights.h5": "gelu_tanh", "keras": "gelu_tanh", "npz": "gelu_tanh", "safetensors": "gelu"}


def _randomized(model, seed=0):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(np.asarray(v) + rng.normal(0, 0.2, v.shape).astype("float32"))
    return model


def _checkpoint(tmp_path, kind):
    """A 7-class checkpoint file of `kind` and the logits it gives on `images`."""
    file = str(tmp_path / f"seven.{kind}")
    if kind in ("weights.h5", "keras"):
        model = _randomized(keras_vit.ViT(**TINY, classes=CLASSES, classifier_activation=None))
        model.save_weights(file) if kind == "weights.h5" else model.save(file)
        return file, to_numpy(model(images(np.random.default_rng(1))))
    params = official_params(np.random.default_rng(0), classes=CLASSES)
    if kind == "npz":
        np.savez(file, **params)
    else:
        from safetensors.numpy import save_file

        save_file(to_timm(params, TINY["num_heads"]), file)
    # The reference: the same file loaded into a model told the class count.
    told = keras_vit.ViT(**TINY, classes=CLASSES, classifier_activation=None, weights=file,
                         mlp_activation=GELU[kind])
    return file, to_numpy(told(images(np.random.default_rng(1))))


@pytest.mark.parametrize("kind", FILES)
def test_n_way_checkpoint_loads_with_its_head_without_classes(tmp_path, kind):
    file, expected = _checkpoint(tmp_path, kind)
    with warnings.catch_warnings():
        # A zero-initialised head would warn: none may.
        warnings.filterwarnings("error", message=".*zero-initialised.*")
        model = keras_vit.ViT(**TINY, classifier_activation=None, weights=file,
                              mlp_activation=GELU[kind])
    assert model.classes == CLASSES
    logits = to_numpy(model(images(np.random.default_rng(1))))
    assert np.abs(logits).max() > 0.1  # a trained head, not zeros
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind", FILES)
def test_class_names_work_with_every_file_type(tmp_path, kind):
    file, expected = _checkpoint(tmp_path, kind)
    model = keras_vit.ViT(**TINY, classes=CLASSES, classifier_activation=None, weights=file,
                          class_names=list(NAMES), mlp_activation=GELU[kind])
    assert model.class_names == NAMES
    preds = to_numpy(model(images(np.random.default_rng(1))))
    np.testing.assert_allclose(preds, expected, rtol=0, atol=1e-6)
    decoded = keras_vit.decode_predictions(preds, top=2, model=model)
    best = expected.argmax(-1)
    assert [row[0][:2] for row in decoded] == [(int(i), NAMES[i]) for i in best]


def test_keras_archive_brings_its_configuration(tmp_path):
    """A `.keras` file says everything: classes, GELU, class names, preprocessing."""
    prep = Preprocessing.from_mode("imagenet", image_size=32)
    saved = _randomized(keras_vit.ViT(**TINY, classes=3, mlp_activation="gelu",
                                      class_names=["a", "b", "c"], preprocessing=prep))
    saved.save(tmp_path / "m.keras")
    model = keras_vit.ViT(**TINY, weights=str(tmp_path / "m.keras"))
    assert (model.classes, model.mlp_activation, model.class_names) == (3, "gelu", ("a", "b", "c"))
    assert model.preprocessing == prep
    x = images(np.random.default_rng(2))
    np.testing.assert_allclose(to_numpy(model(x)), to_numpy(saved(x)), rtol=0, atol=1e-6)
