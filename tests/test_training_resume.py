"""Resumable runs: a run stopped after an epoch continues where it stopped."""

import csv
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import training
from tests.conftest import TINY, to_numpy
from conftest import spread

pytestmark = spread("the run's callbacks and files over Keras' trainers, held on every backend by the "
                    "training tests; each case once")

EPOCHS, STEPS, MICRO = 4, 3, 4  # 3 updates of 2 accumulated micro-batches per epoch


class Stopped(Exception):
    pass


class StopAfter(keras.callbacks.Callback):
    """Stands in for a killed process: leaves `fit` after an epoch."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            raise Stopped()


class Epochs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seen = []

    def on_epoch_begin(self, epoch, logs=None):
        self.seen.append(epoch)


def _data():
    rng = np.random.default_rng(0)
    y = np.tile([0, 1], STEPS * 2 * MICRO // 2)
    x = rng.uniform(-1, 1, (len(y), 32, 32, 3)).astype("float32")
    return x, y


def _run(run_dir, extra=()):
    """A fresh model and optimizer, as a restarted process would build."""
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(**TINY, classes=2, classifier_activation=None)
    training.compile_for_finetuning(
        model, total_steps=EPOCHS * STEPS, warmup_steps=2, base_lr=0.05,
        global_batch_size=2 * MICRO, device_batch_size=MICRO,
    )
    epochs = Epochs()
    callbacks = training.run_callbacks(str(run_dir), monitor="loss", mode="min", tensorboard=False)
    x, y = _data()
    try:
        model.fit(x, y, batch_size=MICRO, epochs=EPOCHS, shuffle=False, verbose=0,
                  callbacks=callbacks + [epochs, *extra])
    except Stopped:
        pass
    return model, epochs.seen


def test_stopped_run_resumes_without_repeating_epochs(tmp_path):
    reference, seen = _run(tmp_path / "reference")
    assert seen == [0, 1, 2, 3]
    assert int(to_numpy(reference.optimizer.iterations)) == EPOCHS * STEPS

    run_dir = tmp_path / "run"
    stopped, seen = _run(run_dir, [StopAfter(1)])
    assert seen == [0, 1]
    assert int(to_numpy(stopped.optimizer.iterations)) == 2 * STEPS
    assert os.path.exists(run_dir / "backup")

    resumed, seen = _run(run_dir)
    assert seen == [2, 3]
    assert int(to_numpy(resumed.optimizer.iterations)) == EPOCHS * STEPS
    for a, b in zip(resumed.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

    with open(run_dir / "log.csv") as f:
        assert [int(row["epoch"]) for row in csv.DictReader(f)] == [0, 1, 2, 3]
    assert not os.path.exists(run_dir / "backup")  # removed once complete
    final = keras_vit.ViT(**TINY, classes=2, classifier_activation=None)
    final.load_weights(str(run_dir / "final.weights.h5"))
    for a, b in zip(final.get_weights(), resumed.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert os.path.exists(run_dir / "best.weights.h5")


def test_run_callbacks_validate(tmp_path):
    with pytest.raises(ValueError, match="mode"):
        training.run_callbacks(str(tmp_path), mode="up")
    with pytest.raises(ValueError, match="filepath"):
        training.SaveFinalWeights(str(tmp_path / "final.h5"))


def test_run_is_logged_to_tensorboard(tmp_path):
    pytest.importorskip("tensorboard", reason="TensorBoard logging needs the tensorboard package")
    callbacks = training.run_callbacks(str(tmp_path), monitor="loss", mode="min", backup=False)
    assert any(isinstance(c, keras.callbacks.TensorBoard) for c in callbacks)
    model = keras_vit.ViT(**TINY, classes=2, classifier_activation=None)
    training.compile_for_finetuning(model, total_steps=4, warmup_steps=1)
    x, y = _data()
    model.fit(x, y, batch_size=MICRO, epochs=2, verbose=0, callbacks=callbacks)
    events = [
        name
        for _, _, files in os.walk(tmp_path / "tensorboard")
        for name in files
        if name.startswith("events.out.tfevents")
    ]
    assert events, list(os.walk(tmp_path))
