"""Saving and loading: `.keras`, `.weights.h5`, and across backends."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from conftest import ROOT, TINY, to_numpy

BACKENDS = ("jax", "tensorflow", "torch")


def random_model(rng, **kwargs):
    model = keras_vit.ViT(**TINY, classes=5, **kwargs)
    for w in model.weights:
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))
    return model


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(classifier="gap", representation_size=8, classifier_activation=None),
        dict(include_top=False, pooling="avg", mlp_activation="gelu", layer_norm_epsilon=1e-5),
    ],
)
def test_keras_file_round_trip(tmp_path, rng, kwargs):
    model = random_model(rng, **kwargs)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is keras_vit.ViT
    assert restored.get_config() == model.get_config()
    np.testing.assert_array_equal(to_numpy(restored(x)), to_numpy(model(x)))
    # The restored model still runs at another size.
    assert tuple(restored(np.zeros((1, 48, 40, 3), "float32")).shape)[0] == 1


def test_config_round_trip_equals_constructor_arguments():
    model = keras_vit.ViT(**TINY, classes=7, dropout_rate=0.1, stochastic_depth_rate=0.1)
    config = model.get_config()
    clone = keras_vit.ViT.from_config(json.loads(json.dumps(config)))
    assert json.loads(json.dumps(clone.get_config())) == json.loads(json.dumps(config))
    assert clone.count_params() == model.count_params()
    assert config["classes"] == 7 and config["weights"] is None


def test_weights_file_round_trip(tmp_path, rng):
    model = random_model(rng)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    path = tmp_path / "tiny.weights.h5"
    model.save_weights(path)
    other = keras_vit.ViT(**TINY, classes=5)
    other.load_weights(path)
    np.testing.assert_array_equal(to_numpy(other(x)), to_numpy(model(x)))


_OTHER_BACKEND = """
import sys, numpy as np, keras_vit
config = dict({tiny}, classes=5)
model = keras_vit.ViT(**config)
model.load_weights(sys.argv[1])
x = np.load(sys.argv[2])
np.save(sys.argv[3], np.asarray(model.predict(x, verbose=0)))
"""


def test_weights_saved_here_load_under_the_next_backend(tmp_path, rng):
    """Same weights file and input, loaded under the next backend of
    `BACKENDS` (jax's file under tensorflow, tensorflow's under torch,
    torch's under jax): over the three jobs every backend writes a file
    another reads, and the three give the same outputs."""
    model = random_model(rng)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    weights = tmp_path / "tiny.weights.h5"
    model.save_weights(weights)
    np.save(tmp_path / "x.npy", x)
    here = to_numpy(model(x))
    script = _OTHER_BACKEND.format(tiny=repr(TINY))
    backend = BACKENDS[(BACKENDS.index(keras.backend.backend()) + 1) % len(BACKENDS)]
    out = tmp_path / f"{backend}.npy"
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", script, str(weights), str(tmp_path / "x.npy"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    np.testing.assert_allclose(np.load(out), here, atol=2e-6, err_msg=backend)


def test_a_compiled_model_loads_compiled(tmp_path, rng):
    model = random_model(rng)
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss="sparse_categorical_crossentropy")
    model.save(tmp_path / "compiled.keras")
    restored = keras.saving.load_model(tmp_path / "compiled.keras")
    assert restored.compiled and isinstance(restored.optimizer, keras.optimizers.SGD)
    assert restored.optimizer.get_config()["momentum"] == 0.9
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    restored.fit(x, np.array([0, 1]), verbose=0)
