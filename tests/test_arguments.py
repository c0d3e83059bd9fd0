"""Misspelt keyword arguments fail, naming the closest valid one, at every
public entry point that takes `**kwargs`; Keras' own arguments keep working;
a missing checkpoint path names `weights=`, where it was looked for and
what `weights` takes."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from conftest import TINY, runs_once, to_numpy
from keras_vit.architectures import CONSTRUCTORS, VARIANTS
from keras_vit.pretraining import MaskedPatchPrediction
from keras_vit.training import recipes
from keras_vit.validation import UnknownArgumentError

pytestmark = runs_once("torch", "the keyword checks are keras_vit's Python, before any backend computes")

HYBRID = dict(resnet_layers=(), resnet_width=0.5, image_size=32, patch_size=1, hidden_size=16,
              num_layers=1, num_heads=2, mlp_dim=32)
# Small enough that a constructor which ignored the misspelling would still
# build in milliseconds (and the test would then fail, not hang).
SMALL_ROW = dict(image_size=32, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32)
SMALL_HYBRID_ROW = dict(SMALL_ROW, resnet_layers=(), resnet_width=0.5)


def _entry_points():
    points = {"ViT": (keras_vit.ViT, dict(TINY)), "ViTHybrid": (keras_vit.ViTHybrid, dict(HYBRID))}
    for variant in VARIANTS:
        small = dict(SMALL_HYBRID_ROW if variant.hybrid else SMALL_ROW)
        small["patch_size"] = 1 if variant.hybrid else variant.config["patch_size"]
        points[variant.constructor] = (getattr(keras_vit, variant.constructor), small)
    return points


ENTRY_POINTS = _entry_points()
# The misspellings of the report, each with the name that must be suggested.
MISSPELLINGS = [
    ("weight", "missing.npz", "weights"),
    ("num_clases", 10, "classes"),
    ("hidden_sise", 64, "hidden_size"),
    ("include_tops", False, "include_top"),
    ("num_classes", 10, "classes"),  # the name of keras-hub, timm, transformers
]


def _raises_suggesting(caller, name, suggestion):
    pattern = (
        rf"^{caller}\(\) got an unexpected keyword argument '{name}'; "
        rf"did you mean '{suggestion}'\?"
    )
    return pytest.raises(UnknownArgumentError, match=pattern)


def test_every_named_constructor_is_covered():
    assert set(CONSTRUCTORS) <= set(ENTRY_POINTS)


@pytest.mark.parametrize("name, value, suggestion", MISSPELLINGS)
@pytest.mark.parametrize("entry_point", list(ENTRY_POINTS))
def test_misspelt_argument_names_the_closest_one(entry_point, name, value, suggestion):
    build, small = ENTRY_POINTS[entry_point]
    with _raises_suggesting(entry_point, name, suggestion):
        build(**{name: value}, **{k: v for k, v in small.items() if k != suggestion})


def test_the_error_is_a_type_error_and_a_value_error():
    for kind in (TypeError, ValueError):
        with pytest.raises(kind, match="'weight'; did you mean 'weights'"):
            keras_vit.ViTTi16(weight="x.npz", **SMALL_ROW)


@pytest.mark.parametrize("entry_point", ["ViTHybrid", "RViTTi16"])
def test_hybrid_arguments_are_suggested(entry_point):
    build, small = ENTRY_POINTS[entry_point]
    with _raises_suggesting(entry_point, "resnet_layer", "resnet_layers"):
        build(resnet_layer=(1,), **{k: v for k, v in small.items() if k != "resnet_layers"})


def test_a_name_close_to_nothing_lists_what_is_taken():
    with pytest.raises(UnknownArgumentError, match=r"'colour'\. It takes: .*hidden_size"):
        keras_vit.ViT(colour="red", **TINY)


@pytest.mark.parametrize("entry_point", ["ViT", "ViTHybrid", "ViTTi16", "RViTTi16"])
def test_keras_arguments_still_work_and_round_trip(entry_point, tmp_path):
    build, small = ENTRY_POINTS[entry_point]
    model = build(**small, classes=3, name="mine", dtype="float32", trainable=False)
    assert model.name == "mine" and not model.trainable
    again = type(model).from_config(model.get_config())
    assert again.get_config() == model.get_config()
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model) and not loaded.trainable
    x = np.random.default_rng(0).normal(size=(1, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))


def _encoder():
    return keras_vit.ViT(**TINY, include_top=False)


def test_masked_patch_prediction():
    with _raises_suggesting("MaskedPatchPrediction", "rates", "rate"):
        MaskedPatchPrediction(_encoder(), rates=0.5)
    task = MaskedPatchPrediction(_encoder(), seed=0, trainable=False, name="task")
    assert not task.trainable
    again = MaskedPatchPrediction.from_config(task.get_config())
    assert again.name == "task" and not again.trainable


@pytest.mark.parametrize(
    "call, caller, name, suggestion",
    [
        (lambda m, t: recipes.compile_for_finetuning(m, 10, warmup_step=2),
         "compile_for_finetuning", "warmup_step", "warmup_steps"),
        (lambda m, t: recipes.compile_for_pretraining(m, 10, weight_decy=0.1),
         "compile_for_pretraining", "weight_decy", "weight_decay"),
        (lambda m, t: recipes.masked_patch_optimizer(10, beta1=0.8),
         "masked_patch_optimizer", "beta1", "beta_1"),
        (lambda m, t: recipes.compile_for_masked_patch_prediction(t, 10, base_rl=1e-3),
         "compile_for_masked_patch_prediction", "base_rl", "base_lr"),
    ],
)
def test_training_recipes(call, caller, name, suggestion):
    model = keras_vit.ViT(**TINY, classes=3)
    task = MaskedPatchPrediction(_encoder(), seed=0)
    with _raises_suggesting(caller, name, suggestion):
        call(model, task)


def test_training_recipes_forward_valid_arguments():
    model = recipes.compile_for_finetuning(keras_vit.ViT(**TINY, classes=3), 10, warmup_steps=2)
    schedule = model.optimizer.get_config()["learning_rate"]["config"]
    assert schedule["warmup_steps"] == 2
    optimizer = recipes.masked_patch_optimizer(10, beta_1=0.8)
    assert float(optimizer.beta_1) == pytest.approx(0.8)


def test_from_preset_overrides(tmp_path):
    keras_vit.ViT(**TINY, classes=3).save_to_preset(str(tmp_path))
    with _raises_suggesting("from_preset", "num_clases", "classes"):
        keras_vit.from_preset(str(tmp_path), num_clases=5)
    with _raises_suggesting("from_preset", "imag_size", "image_size"):
        keras_vit.from_preset(str(tmp_path), imag_size=48)
    # An argument the checkpoint fixes keeps its own explanation.
    with pytest.raises(ValueError, match=r"cannot change \['hidden_size'\]: the checkpoint fixes"):
        keras_vit.from_preset(str(tmp_path), hidden_size=32)
    assert keras_vit.from_preset(str(tmp_path), classes=5).output_shape == (None, 5)


@pytest.mark.parametrize("weights", ["missing.npz", os.path.join("nowhere", "ckpt"), "x.safetensors"])
def test_missing_checkpoint_path(weights, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    resolved = os.path.join(str(tmp_path), weights)
    with pytest.raises(FileNotFoundError) as caught:
        keras_vit.ViTTi16(weights=weights)
    message = str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert f"weights={weights!r}" in message
    assert repr(resolved) in message and repr(str(tmp_path)) in message
    # What `weights` takes: registered names, file types, presets.
    assert "'augreg-i21k'" in message and "weights_names('Ti/16')" in message
    assert ".npz" in message and ".safetensors" in message and "from_preset" in message
