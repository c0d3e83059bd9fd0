"""A trained model's preset: probabilities out, no optimizer state; an exact
number of updates (`StopAfterUpdates`) and presets written during `fit`
(`SavePreset`)."""

import h5py
import numpy as np
import pytest

import keras_vit
from conftest import TINY, spread, to_numpy
from keras_vit import training

pytestmark = spread("a trained model's preset is files of NumPy arrays and configs; each case once")


def _trained(steps=2, **compile_options):
    model = keras_vit.ViT(**TINY, classes=3, classifier_activation=None)
    training.compile_for_finetuning(model, total_steps=steps, warmup_steps=0, global_batch_size=4,
                                    **compile_options)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 32, 32, 3)).astype("float32")
    y = np.arange(8) % 3
    return model, x, y


def test_a_compiled_models_preset_carries_no_optimizer_state(tmp_path):
    model, x, y = _trained()
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    model.save_to_preset(tmp_path / "preset")
    with h5py.File(tmp_path / "preset" / "model.weights.h5", "r") as f:
        assert set(f) == {"layers", "vars"}, set(f)
    assert model.optimizer is not None and int(to_numpy(model.optimizer.iterations)) == 2
    # The optimizer is the model's again: training goes on where it was.
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert int(to_numpy(model.optimizer.iterations)) == 4
    again = keras_vit.from_preset(tmp_path / "preset")
    assert getattr(again, "optimizer", None) is None


def test_save_trained_preset_restores_the_heads_activation(tmp_path):
    model, x, y = _trained()
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    training.save_trained_preset(model, tmp_path / "p", class_names=["a", "b", "c"], preprocessing="inception")
    assert model.classifier_activation is None  # the model in memory is unchanged
    again = keras_vit.from_preset(tmp_path / "p")
    assert again.classifier_activation == "softmax" and again.class_names == ("a", "b", "c")
    logits = to_numpy(model.predict(x, verbose=0)).astype("float64")
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(to_numpy(again.predict(x, verbose=0)), expected, rtol=1e-5, atol=1e-6)
    decoded = keras_vit.decode_predictions(to_numpy(again.predict(x[:1], verbose=0)), top=3, model=again)
    assert sum(score for _, _, score in decoded[0]) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(ValueError, match="classifier_activation"):
        training.save_trained_preset(model, tmp_path / "q", classifier_activation="relu")


@pytest.mark.parametrize("total, per_epoch, accumulation", [(5, 2, 1), (3, 2, 2), (4, 4, 1)])
def test_fit_makes_exactly_the_updates_asked(total, per_epoch, accumulation, tmp_path):
    """The last interval is cut short and still evaluated; presets follow."""
    model = keras_vit.ViT(**TINY, classes=3, classifier_activation=None)
    training.compile_for_finetuning(model, total_steps=total, warmup_steps=0, global_batch_size=4,
                                    device_batch_size=4 // accumulation)
    stop = training.StopAfterUpdates(total, per_epoch, accumulation)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 32, 32, 3)).astype("float32"), np.arange(64) % 3
    history = model.fit(
        x, y, batch_size=4 // accumulation, epochs=stop.epochs, steps_per_epoch=stop.steps_per_epoch,
        validation_data=(x[:4], y[:4]), verbose=0,
        callbacks=[stop, training.SavePreset(tmp_path / "best", monitor="val_accuracy"),
                   training.SavePreset(tmp_path / "final", class_names=["a", "b", "c"])],
    )
    assert int(to_numpy(model.optimizer.iterations)) == total
    assert len(history.history["val_accuracy"]) == stop.epochs == -(-total // per_epoch)
    assert [stop.updates_in_epoch(e) for e in range(stop.epochs)][-1] == total - per_epoch * (stop.epochs - 1)
    final = keras_vit.from_preset(tmp_path / "final")
    assert final.class_names == ("a", "b", "c") and final.classifier_activation == "softmax"
    np.testing.assert_allclose(to_numpy(final.get_layer("head").kernel), to_numpy(model.get_layer("head").kernel))
    assert (tmp_path / "best" / "config.json").exists()


def test_callbacks_check_their_arguments(tmp_path):
    with pytest.raises(ValueError, match="total_updates"):
        training.StopAfterUpdates(0, 2)
    with pytest.raises(ValueError, match=r"Unknown preset option\(s\) \['class_name'\]"):
        training.SavePreset(tmp_path, class_name=["a"])
    with pytest.raises(ValueError, match="mode"):
        training.SavePreset(tmp_path, monitor="val_loss", mode="lowest")
