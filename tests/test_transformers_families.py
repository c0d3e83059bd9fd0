"""ViT families of transformers beyond ViT/DeiT: a model made at random by
transformers, saved with `save_pretrained`, loads with `keras_vit.from_preset`
and reproduces transformers' own forward pass (pooled output and last hidden
state)."""

import json

import keras
import numpy as np
import pytest

import keras_vit
from conftest import to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from hub_dirs import randomise_torch

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TINY_DINOV2 = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
                   image_size=28, patch_size=7, layerscale_value=0.5)
DINOV2 = {
    "Dinov2Model": (transformers.Dinov2Config, {}),
    "Dinov2WithRegistersModel": (transformers.Dinov2WithRegistersConfig, dict(num_register_tokens=3)),
}


def _images(size, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _save_random(model, folder, seed):
    """Saves `model` with every tensor moved off its initial value, in eval mode."""
    model = randomise_torch(model, seed)
    model.save_pretrained(folder)
    return model


def _reference(model, x):
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))
    return out.pooler_output.numpy(), out.last_hidden_state.numpy()


@pytest.fixture(scope="module")
def dinov2_dirs(tmp_path_factory):
    out = {}
    for seed, (name, (config_class, extra)) in enumerate(DINOV2.items()):
        folder = tmp_path_factory.mktemp(name)
        model = getattr(transformers, name)(config_class(**TINY_DINOV2, **extra))
        model = _save_random(model, folder, seed)
        out[name] = (str(folder), _reference(model, _images(28)))
    return out


@pytest.mark.parametrize("name", sorted(DINOV2))
def test_dinov2_backbones_reproduce_transformers(dinov2_dirs, name):
    folder, (pooled, hidden) = dinov2_dirs[name]
    model = keras_vit.from_preset(folder)
    assert model.num_register_tokens == DINOV2[name][1].get("num_register_tokens", 0)
    x = _images(28)
    np.testing.assert_allclose(to_numpy(model(x)), pooled, rtol=0, atol=1e-4)
    # transformers' last hidden state is the tokens after the final norm:
    # class token, registers, patches, as keras_vit orders them.
    tokens = keras.Model(model.input, model.get_layer("encoder_norm").output)
    np.testing.assert_allclose(to_numpy(tokens(x)), hidden, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(architectures=["Dinov2ForDepthEstimation"]), "architecture must be one of"),
        (dict(apply_layernorm=False), "apply_layernorm=False"),
        (dict(hidden_act="relu"), "hidden_act"),
    ],
)
def test_dinov2_configs_keras_vit_cannot_build_are_refused(dinov2_dirs, tmp_path, change, match):
    folder, _ = dinov2_dirs["Dinov2Model"]
    with open(f"{folder}/config.json") as f:
        config = json.load(f)
    (tmp_path / "config.json").write_text(json.dumps(dict(config, **change)))
    with pytest.raises(ValueError, match=match):
        keras_vit.presets.describe_preset(str(tmp_path))


@pytest.mark.parametrize("name", sorted(DINOV2))
def test_dinov2_backbones_write_back_to_transformers(dinov2_dirs, tmp_path, name):
    folder, (pooled, hidden) = dinov2_dirs[name]
    keras_vit.from_preset(folder).save_to_preset(tmp_path, format="transformers", preprocessing="imagenet")
    with open(tmp_path / "config.json") as f:
        assert json.load(f)["architectures"] == [name]
    again, info = getattr(transformers, name).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"], info
    assert not info["unexpected_keys"], info
    out = _reference(again.eval(), _images(28))
    np.testing.assert_allclose(out[0], pooled, rtol=0, atol=1e-4)
    np.testing.assert_allclose(out[1], hidden, rtol=0, atol=1e-4)


TINY_CLIP = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                 image_size=28, patch_size=7, projection_dim=12, hidden_act="quick_gelu")
CLIP = ("CLIPVisionModel", "CLIPVisionModelWithProjection")


@pytest.fixture(scope="module")
def clip_dirs(tmp_path_factory):
    out = {}
    x = _images(28)
    for seed, name in enumerate(CLIP, start=10):
        folder = tmp_path_factory.mktemp(name)
        model = getattr(transformers, name)(transformers.CLIPVisionConfig(**TINY_CLIP))
        model = _save_random(model, folder, seed)
        with torch.no_grad():
            out_ = model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), output_hidden_states=True)
        pooled = out_.image_embeds if name.endswith("Projection") else out_.pooler_output
        hidden = [h.numpy() for h in out_.hidden_states]
        out[name] = (str(folder), pooled.numpy(), out_.last_hidden_state.numpy(), hidden)
    return out


@pytest.mark.parametrize("name", CLIP)
def test_clip_vision_towers_reproduce_transformers(clip_dirs, name):
    """The model's output is `pooler_output` (or `image_embeds` with the
    projection); `forward_features` is `last_hidden_state` (before
    `post_layernorm`) and `forward_intermediates` the hidden state after
    each block."""
    folder, pooled, last, hidden = clip_dirs[name]
    model = keras_vit.from_preset(folder)
    x = _images(28)
    np.testing.assert_allclose(to_numpy(model(x)), pooled, rtol=0, atol=1e-4)
    np.testing.assert_allclose(to_numpy(model.forward_features(x)), last, rtol=0, atol=1e-4)
    features = model.forward_intermediates(x, output_fmt="NLC", intermediates_only=True)
    assert len(features) == len(hidden) - 1
    for feature, theirs in zip(features, hidden[1:]):
        np.testing.assert_allclose(to_numpy(feature), theirs[:, 1:], rtol=0, atol=1e-4)


def test_clip_configs_keras_vit_cannot_build_are_refused(clip_dirs, tmp_path):
    folder = clip_dirs["CLIPVisionModel"][0]
    with open(f"{folder}/config.json") as f:
        config = json.load(f)
    (tmp_path / "config.json").write_text(json.dumps(dict(config, hidden_act="relu")))
    with pytest.raises(ValueError, match="hidden_act"):
        keras_vit.presets.describe_preset(str(tmp_path))


TINY_SIGLIP = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                   image_size=28, patch_size=7)


@pytest.fixture(scope="module")
def siglip_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("SiglipVisionModel")
    model = transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**TINY_SIGLIP))
    model = _save_random(model, folder, 20)
    return str(folder), _reference(model, _images(28))


def test_siglip_vision_tower_reproduces_transformers(siglip_dir):
    """No class token; the output is the MAP head's (`pooler_output`), the
    tokens after the final norm are `last_hidden_state`."""
    folder, (pooled, hidden) = siglip_dir
    model = keras_vit.from_preset(folder)
    assert model.num_prefix_tokens == 0
    x = _images(28)
    np.testing.assert_allclose(to_numpy(model(x)), pooled, rtol=0, atol=1e-4)
    np.testing.assert_allclose(to_numpy(model.forward_features(x)), hidden, rtol=0, atol=1e-4)


def test_siglip_without_its_head_is_refused(siglip_dir, tmp_path):
    with open(f"{siglip_dir[0]}/config.json") as f:
        config = json.load(f)
    (tmp_path / "config.json").write_text(json.dumps(dict(config, vision_use_head=False)))
    with pytest.raises(ValueError, match="vision_use_head"):
        keras_vit.presets.describe_preset(str(tmp_path))


def _other_size_reference(name, folder, x):
    model = getattr(transformers, name).from_pretrained(folder).eval()
    kwargs = {} if name.startswith("Dinov2") else dict(interpolate_pos_encoding=True)
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), **kwargs)
    pooled = out.image_embeds if name.endswith("Projection") else out.pooler_output
    return pooled.numpy(), out.last_hidden_state.numpy()


@pytest.mark.parametrize("name", [*sorted(DINOV2), *CLIP, "SiglipVisionModel"])
def test_families_at_another_image_size_resize_as_transformers(dinov2_dirs, clip_dirs, siglip_dir, name):
    """At 42x35 pixels (6x5 patches from 4x4) the model made by `for_inference`
    resizes its position embedding with the family's interpolation, as
    transformers does with `interpolate_pos_encoding` (DINOv2 always does)."""
    folder = {**{k: v[0] for k, v in dinov2_dirs.items()}, **{k: v[0] for k, v in clip_dirs.items()},
              "SiglipVisionModel": siglip_dir[0]}[name]
    x = np.random.default_rng(3).uniform(-1, 1, (2, 42, 35, 3)).astype("float32")
    pooled, hidden = _other_size_reference(name, folder, x)
    model = keras_vit.from_preset(folder).for_inference(image_size=(42, 35))
    np.testing.assert_allclose(to_numpy(model(x)), pooled, rtol=0, atol=1e-4)
    tokens = to_numpy(model.forward_features(x))
    if name.startswith("Dinov2"):  # last_hidden_state is after the final norm
        tokens = to_numpy(keras.Model(model.input, model.get_layer("encoder_norm").output)(x))
    np.testing.assert_allclose(tokens, hidden, rtol=0, atol=1e-4)


TINY_MAE = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                image_size=28, patch_size=7, mask_ratio=0.0)


@pytest.fixture(scope="module")
def mae_dir(tmp_path_factory):
    """A ViTMAEModel with every learned tensor perturbed; its position table
    stays MAE's fixed sin-cos (not a learned weight)."""
    folder = tmp_path_factory.mktemp("ViTMAEModel")
    model = transformers.ViTMAEModel(transformers.ViTMAEConfig(**TINY_MAE))
    # transformers fills the sin-cos table in its own weight initialisation,
    # which a model built on the CPU may skip (the table is then zeros).
    model.embeddings.patch_embeddings.projection._is_hf_initialized = False
    model.embeddings.initialize_weights()
    table = model.embeddings.position_embeddings.detach().clone()
    assert float(table[0, 1:].abs().max()) > 0.5  # the sin-cos table, not zeros
    generator = torch.Generator().manual_seed(30)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.dtype.is_floating_point:
                tensor.add_(0.2 * torch.randn(tensor.shape, generator=generator))
        model.embeddings.position_embeddings.copy_(table)
    model.save_pretrained(folder)
    model.eval()
    x = _images(28)
    # mask_ratio=0 keeps every patch; ascending noise keeps them in order.
    noise = torch.arange(16, dtype=torch.float32).expand(2, 16)
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), noise=noise)
    assert (out.ids_restore.numpy() == np.arange(16)).all()
    return str(folder), out.last_hidden_state.numpy()


def test_vit_mae_encoder_reproduces_transformers(mae_dir):
    """The fixed sin-cos table is computed, not read; the output is
    `last_hidden_state` (MAE has no pooled output)."""
    folder, hidden = mae_dir
    model = keras_vit.from_preset(folder)
    assert model.position_embedding == "sincos"
    x = _images(28)
    np.testing.assert_allclose(to_numpy(model(x)), hidden, rtol=0, atol=1e-4)


def test_vit_mae_pretraining_model_is_refused(mae_dir, tmp_path):
    with open(f"{mae_dir[0]}/config.json") as f:
        config = json.load(f)
    (tmp_path / "config.json").write_text(json.dumps(dict(config, architectures=["ViTMAEForPreTraining"])))
    with pytest.raises(ValueError, match="ViTMAEModel"):
        keras_vit.presets.describe_preset(str(tmp_path))
