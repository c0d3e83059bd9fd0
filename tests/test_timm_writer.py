"""`save_to_preset(dir, format="timm")`: timm itself reads what keras_vit
writes. Models of the families timm's VisionTransformer and keras_vit
share (class token or mean pool, registers, LayerScale, fc_norm, CLIP's
pre-norm, SigLIP's attention pool, DeiT's distillation, AIMv2's RMSNorm and
SwiGLU, DINOv2-giant's packed SwiGLU) are written on every backend, built
by `timm.create_model("local-dir:...", pretrained=True)` and give the
model's outputs; `from_preset` reads the directory back; what timm's
VisionTransformer cannot hold is refused before anything is written."""

import json
import os

import numpy as np
import pytest
from conftest import spread, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from timm_models import images, import_timm, make, outputs

import keras_vit

pytestmark = spread("the timm writer is a table over NumPy arrays; each case once")

timm = import_timm()
TINY = dict(image_size=32, patch_size=8, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32, classes=5,
            classifier_activation=None)
# case: (options, the timm architecture written).
CASES = {
    "plain": (dict(mlp_activation="gelu"), "vit_base_patch8_224"),
    "registers-layer-scale-gap": (dict(num_register_tokens=2, layer_scale_init=0.1, classifier="gap",
                                       pooled_norm=True), "vit_base_patch8_224"),
    "clip": (dict(pre_norm=True, patch_bias=False, layer_norm_epsilon=1e-5, mlp_activation="quick_gelu"),
             "vit_base_patch16_clip_224"),
    "siglip-map": (dict(classifier="map", mlp_activation="gelu_tanh"), "vit_base_patch8_224"),
    "deit-distilled": (dict(distillation_token=True), "deit_base_distilled_patch16_224"),
    "aimv2": (dict(norm_kind="rmsnorm", layer_norm_epsilon=1e-5, mlp_kind="swiglu", patch_norm=True,
                   classifier="gap", qkv_bias=False, attention_out_bias=False, mlp_bias=False),
              "aimv2_1b_patch14_224"),
    "dinov2-giant": (dict(mlp_kind="swiglu", layer_scale_init=0.1, include_top=False, pooling="token"),
                     "vit_giant_patch14_dinov2"),
}


def _random(model, seed=0):
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(scale=0.3, size=weight.shape).astype("float32"))
    return model


def _timm(folder):
    return timm.create_model(f"local-dir:{folder}", pretrained=True).eval()


@pytest.mark.parametrize("case", sorted(CASES))
def test_timm_builds_what_keras_vit_writes(case, tmp_path):
    options, architecture = CASES[case]
    model = _random(keras_vit.ViT(**TINY, **options))
    model.save_to_preset(str(tmp_path), format="timm", preprocessing="imagenet")
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architecture"] == architecture
    x = images(32, seed=1)
    expected = to_numpy(model(x))
    logits, _ = outputs(_timm(tmp_path), x)
    np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(to_numpy(keras_vit.from_preset(str(tmp_path))(x)), expected, atol=1e-5, rtol=0)


def test_a_timm_checkpoint_goes_through_keras_vit_and_back(tmp_path):
    """DeiT III from timm -> keras_vit -> timm: the same outputs, the same
    tensors, class names and preprocessing."""
    reference = make(timm, "deit3_small_patch16_224", tmp_path / "timm", seed=3)
    model = keras_vit.from_preset(str(tmp_path / "timm"))
    model.save_to_preset(str(tmp_path / "back"), format="timm", class_names=[f"c{i}" for i in range(5)])
    again = _timm(tmp_path / "back")
    x = images(32, seed=2)
    np.testing.assert_allclose(outputs(again, x)[0], outputs(reference, x)[0], atol=1e-5, rtol=0)
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["label_names"] == [f"c{i}" for i in range(5)]
    original = json.loads((tmp_path / "timm" / "config.json").read_text())["pretrained_cfg"]
    written = config["pretrained_cfg"]
    for key in ("mean", "std", "interpolation", "input_size"):
        assert written[key] == pytest.approx(original[key]), key
    # The same resize before the centre crop (`floor(size / crop_pct)`).
    assert int(32 / written["crop_pct"]) == int(32 / original["crop_pct"]) == 35


@pytest.mark.parametrize("options, match", [
    (dict(rope="dinov3", position_embedding="none"), "rope='dinov3'"),
    (dict(relative_position="mlp", position_embedding="none"), "relative_position='mlp'"),
    (dict(parallel=True), "parallel=True"),
    (dict(classifier="gap", window_size=2, relative_position="decomposed", neck_channels=4),
     "relative_position='decomposed'"),
    (dict(qkv_bias=(True, False, True)), "qkv_bias"),
    (dict(representation_size=8), "representation_size=8"),
    (dict(classifier="map", class_token=True), "attention pool"),
])
def test_what_timm_cannot_hold_is_refused_before_writing(options, match, tmp_path):
    model = keras_vit.ViT(**TINY, **options)
    with pytest.raises(ValueError, match=match):
        model.save_to_preset(str(tmp_path / "out"), format="timm")
    assert not os.path.exists(tmp_path / "out")
