"""ViT families of transformers beyond ViT/DeiT: a model made at random by
transformers, saved with `save_pretrained`, loads with `keras_vit.from_preset`
and reproduces transformers' own forward pass (pooled output and last hidden
state). Each class is one `transformers_cases.Case` in `CASES`."""

import json

import numpy as np
import pytest

import keras_vit
from conftest import spread, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from transformers_cases import Case, assert_outputs_equal, keep_mae_table, keras_outputs, mae_noise, make, reference

pytestmark = spread("transformers' families: the layers are held on every backend by their contracts; each "
                    "case once")

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TINY = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, image_size=28, patch_size=7)
TINY_DINOV2 = dict(TINY, mlp_ratio=2, layerscale_value=0.5)
TOWER = dict(TINY, intermediate_size=32)
CASES = {
    # DINOv3: rotary positions, no key bias, registers; the last hidden state is after the final norm.
    "DINOv3ViTModel": Case(lambda: transformers.DINOv3ViTConfig(**TOWER, num_register_tokens=2, layerscale_value=0.5),
                           attributes={"num_register_tokens": 2, "rope": "dinov3", "qkv_bias": (True, False, True)}),
    # DINOv2's last hidden state is the tokens after the final norm: class
    # token, registers, patches, as keras_vit orders them.
    "Dinov2Model": Case(lambda: transformers.Dinov2Config(**TINY_DINOV2), tokens="final_norm",
                        attributes={"num_register_tokens": 0}),
    "Dinov2WithRegistersModel": Case(
        lambda: transformers.Dinov2WithRegistersConfig(**TINY_DINOV2, num_register_tokens=3),
        tokens="final_norm", attributes={"num_register_tokens": 3}),
    # CLIP's output is `pooler_output` (or `image_embeds` with the
    # projection), its last hidden state the tokens before `post_layernorm`.
    "CLIPVisionModel": Case(lambda: transformers.CLIPVisionConfig(**TOWER, projection_dim=12, hidden_act="quick_gelu")),
    "CLIPVisionModelWithProjection": Case(
        lambda: transformers.CLIPVisionConfig(**TOWER, projection_dim=12, hidden_act="quick_gelu"),
        pooled="image_embeds"),
    # No class token; the output is the MAP head's, the tokens after the final norm the last hidden state.
    "SiglipVisionModel": Case(lambda: transformers.SiglipVisionConfig(**TOWER), attributes={"num_prefix_tokens": 0}),
    # The fixed sin-cos table is computed, not read; MAE has no pooled output.
    "ViTMAEModel": Case(lambda: transformers.ViTMAEConfig(**TOWER, mask_ratio=0.0), pooled=None,
                        prepare=keep_mae_table, inputs=mae_noise, attributes={"position_embedding": "sincos"}),
}
# Configs keras_vit cannot build: (class, change, what the error names).
REFUSED = [
    ("Dinov2Model", dict(architectures=["Dinov2ForDepthEstimation"]), "architecture must be one of"),
    ("Dinov2Model", dict(apply_layernorm=False), "apply_layernorm=False"),
    ("Dinov2Model", dict(hidden_act="relu"), "hidden_act"),
    ("DINOv3ViTModel", dict(use_gated_mlp=True), "use_gated_mlp=True, hidden_act='gelu'"),
    ("CLIPVisionModel", dict(hidden_act="relu"), "hidden_act"),
    ("SiglipVisionModel", dict(vision_use_head=False), "vision_use_head"),
    ("ViTMAEModel", dict(architectures=["ViTMAEForPreTraining"]), "ViTMAEModel"),
]
# The classes transformers runs at another image size, with the keywords it
# needs for that (DINOv2 always resizes).
RESIZED = {
    "DINOv3ViTModel": {},
    "Dinov2Model": {},
    "Dinov2WithRegistersModel": {},
    "CLIPVisionModel": dict(interpolate_pos_encoding=True),
    "CLIPVisionModelWithProjection": dict(interpolate_pos_encoding=True),
    "SiglipVisionModel": dict(interpolate_pos_encoding=True),
}


def _images(size, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """`{class: (folder, transformers' outputs on _images(28))}`."""
    out = {}
    for seed, (name, case) in enumerate(CASES.items()):
        folder = tmp_path_factory.mktemp(name)
        model = make(transformers, name, case, seed)
        model.save_pretrained(folder)
        out[name] = (str(folder), reference(model, case, _images(28)))
    return out


@pytest.mark.parametrize("name", CASES)
def test_families_reproduce_transformers(made, name):
    folder, expected = made[name]
    case = CASES[name]
    model = keras_vit.from_preset(folder)
    for attribute, value in case.attributes.items():
        assert getattr(model, attribute) == value, attribute
    assert_outputs_equal(keras_outputs(model, case, _images(28)), expected)


@pytest.mark.parametrize("name", ["CLIPVisionModel", "CLIPVisionModelWithProjection"])
def test_clip_intermediates_are_transformers_hidden_states(made, name):
    """`forward_intermediates` gives the hidden state after each block."""
    folder, _ = made[name]
    x = _images(28)
    with torch.no_grad():
        theirs = getattr(transformers, name).from_pretrained(folder).eval()(
            pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), output_hidden_states=True).hidden_states
    features = keras_vit.from_preset(folder).forward_intermediates(x, output_fmt="NLC", intermediates_only=True)
    assert len(features) == len(theirs) - 1
    for feature, hidden in zip(features, theirs[1:]):
        np.testing.assert_allclose(to_numpy(feature), hidden.numpy()[:, 1:], rtol=0, atol=1e-4)


@pytest.mark.parametrize("name, change, match", REFUSED)
def test_configs_keras_vit_cannot_build_are_refused(made, tmp_path, name, change, match):
    with open(f"{made[name][0]}/config.json") as f:
        config = json.load(f)
    (tmp_path / "config.json").write_text(json.dumps(dict(config, **change)))
    with pytest.raises(ValueError, match=match):
        keras_vit.presets.describe_preset(str(tmp_path))


@pytest.mark.parametrize("name", ["Dinov2Model", "Dinov2WithRegistersModel", "DINOv3ViTModel"])
def test_dinov2_backbones_write_back_to_transformers(made, tmp_path, name):
    folder, expected = made[name]
    keras_vit.from_preset(folder).save_to_preset(tmp_path, format="transformers", preprocessing="imagenet")
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["architectures"] == [name]
    again, info = getattr(transformers, name).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"], info
    assert not info["unexpected_keys"], info
    assert_outputs_equal(reference(again.eval(), CASES[name], _images(28)), expected)


@pytest.mark.parametrize("name", RESIZED)
def test_families_at_another_image_size_resize_as_transformers(made, name):
    """At 42x35 pixels (6x5 patches from 4x4) the model made by `for_inference`
    resizes its position embedding with the family's interpolation, as
    transformers does."""
    folder, _ = made[name]
    case = CASES[name]
    x = np.random.default_rng(3).uniform(-1, 1, (2, 42, 35, 3)).astype("float32")
    expected = reference(getattr(transformers, name).from_pretrained(folder).eval(), case, x, **RESIZED[name])
    model = keras_vit.from_preset(folder).for_inference(image_size=(42, 35))
    assert_outputs_equal(keras_outputs(model, case, x), expected)
