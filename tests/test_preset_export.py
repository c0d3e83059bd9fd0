"""`model.save_to_preset`: keras_vit presets reload exactly; transformers
directories load strictly in `AutoModelForImageClassification` with equal
logits; what transformers cannot represent is refused before writing."""

import json
import os

import numpy as np
import pytest

import keras_vit
from conftest import spread, to_numpy
from families import make_model
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.preprocessing import Preprocessing

pytestmark = spread("presets are files of NumPy arrays and configs; each case once")

NAMES = ("cat", "dog", "eel")
PREP = Preprocessing.from_mode("imagenet", image_size=32, crop_fraction=0.875).get_config()
MODELS = {
    "plain": dict(mlp_activation="gelu"),
    "tanh-nobias": dict(mlp_activation="gelu_tanh", qkv_bias=False, layer_norm_epsilon=1e-5),
    "distilled": dict(distillation_token=True),
    "distilled-cls-head": dict(distillation_token=True, distillation_head=False),
    "registers-gap": dict(classifier="gap", num_register_tokens=3, pooled_norm=True, layer_scale_init=1e-5),
}
TRANSFORMERS_OK = ("plain", "tanh-nobias", "distilled", "distilled-cls-head")


def _images(size=32, batch=2):
    return np.random.default_rng(0).uniform(-1, 1, (batch, size, size, 3)).astype("float32")


def _model(kind, **extra):
    """A ViT of the registry (tests/families.py) with two blocks and `MODELS[kind]`."""
    options = dict(MODELS[kind], **extra)
    return make_model("vit", num_layers=2, classes=3, class_names=NAMES, preprocessing=PREP, **options)


@pytest.mark.parametrize("kind", ["plain", "distilled-cls-head", "registers-gap", "hybrid"])
def test_keras_vit_preset_reloads_exactly(tmp_path, kind):
    model = make_model("hybrid", classes=3, class_names=NAMES) if kind == "hybrid" else _model(kind)
    model.save_to_preset(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["config.json", "metadata.json", "model.weights.h5"]
    again = keras_vit.from_preset(tmp_path)
    assert type(again) is type(model)
    assert again.get_config() == model.get_config()
    x = _images()
    np.testing.assert_array_equal(to_numpy(again(x)), to_numpy(model(x)))
    assert again.class_names == NAMES


def test_keras_vit_preset_overrides(tmp_path):
    model = _model("distilled")
    model.save_to_preset(tmp_path)
    with pytest.warns(UserWarning, match="zero-initialised"):
        other = keras_vit.from_preset(tmp_path, classes=4, dtype="mixed_bfloat16", name="tuned")
    assert other.get_layer("encoderblock_0").dtype_policy.name == "mixed_bfloat16"
    assert other.get_config()["dtype"]["config"]["name"] == "mixed_bfloat16" and other.name == "tuned"
    assert other.class_names is None and other.preprocessing == model.preprocessing
    for layer in ("head", "head_dist"):
        assert not np.any(to_numpy(other.get_layer(layer).kernel))
    # The body keeps the preset's weights (variables stay float32 under mixed precision).
    for name in ("embedding", "encoderblock_1"):
        for new, old in zip(other.get_layer(name).weights, model.get_layer(name).weights):
            np.testing.assert_array_equal(to_numpy(new), to_numpy(old))


@pytest.fixture(scope="module")
def auto_model():
    transformers = pytest.importorskip("transformers")
    return transformers.AutoModelForImageClassification


@pytest.mark.parametrize("kind", TRANSFORMERS_OK)
def test_transformers_export_loads_strictly_with_equal_logits(tmp_path, auto_model, kind):
    import torch

    model = _model(kind)
    model.save_to_preset(tmp_path, format="transformers")
    reloaded, info = auto_model.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"]
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    config = json.load(open(tmp_path / "config.json"))
    assert config["hidden_act"] == ("gelu_pytorch_tanh" if model.mlp_activation == "gelu_tanh" else "gelu")
    assert reloaded.config.id2label == {0: "cat", 1: "dog", 2: "eel"}
    x = _images()
    with torch.no_grad():
        logits = reloaded.eval()(torch.from_numpy(x.transpose(0, 3, 1, 2))).logits.numpy()
    np.testing.assert_allclose(logits, to_numpy(model(x)), rtol=0, atol=2e-5)
    # ... and back into keras_vit.
    back = keras_vit.from_preset(tmp_path)
    np.testing.assert_allclose(to_numpy(back(x)), to_numpy(model(x)), rtol=0, atol=1e-6)
    assert back.class_names == NAMES
    assert back.preprocessing.mode == "imagenet"


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: _model("registers-gap"), "register tokens"),
        (lambda: _model("plain", classifier="gap"), "classifier='gap'"),
        (lambda: _model("plain", include_top=False), "include_top=False"),
        (lambda: _model("plain", representation_size=8), "pre-logits"),
        (lambda: _model("plain", layer_scale_init=0.1), "layer_scale_init=0.1"),
        (lambda: _model("plain", mlp_activation="quick_gelu"), "mlp_activation='quick_gelu'"),
        (lambda: _model("plain", patch_bias=False), "patch_bias=False"),
        (lambda: make_model("hybrid", seed=None), "hybrid"),
    ],
)
def test_transformers_export_refuses_what_it_cannot_hold(tmp_path, build, match):
    folder = tmp_path / "out"
    with pytest.raises(ValueError, match=match):
        build().save_to_preset(folder, format="transformers")
    assert not folder.exists()


def test_unknown_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"`format` must be one of \('keras_vit', 'transformers', 'timm'\)\. Received: format='onnx'"):
        _model("plain").save_to_preset(tmp_path, format="onnx")
