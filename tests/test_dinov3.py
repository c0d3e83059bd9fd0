"""DINOv3 from every source that ships it, against that source's own forward
pass: transformers' `DINOv3ViTModel` and `DINOv3ViTBackbone` (random models
saved with `save_pretrained`), keras-hub's `DINOV3Backbone` (a random
backbone saved with `save_to_preset`, run by keras-hub), and timm's
`vit_*_dinov3*` Hub layout (held to `reference_families.eva_forward`, the
NumPy pass of timm's `Eva`); at the checkpoint's image size and at a larger
non-square one. Then what users do with the backbone: written back to
transformers, feature maps and the feature pyramid, and exported."""

import json
import os

import keras
import numpy as np
import pytest

import families_2025 as fam
import keras_vit
from conftest import every_backend, inference, per_backend, spread, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit import export
from keras_vit.layers import SimpleFeaturePyramid
from keras_vit.models.features import feature_model

pytestmark = spread("DINOv3's parity: its layers are held on every backend by their contracts; each case "
                    "once")

transformers = pytest.importorskip("transformers", reason="transformers makes the reference models")
torch = pytest.importorskip("torch")

SIZES = [(16, 16), (20, 28)]  # the checkpoint's, and larger and non-square
ATOL = 1e-4
# The options a DINOv3 checkpoint may change, beside the defaults of `DINOV3_TINY`.
GATED = dict(use_gated_mlp=True, hidden_act="silu", mlp_bias=False, proj_bias=False, key_bias=True,
             query_bias=False, rope_theta=50.0, num_register_tokens=0, intermediate_size=48)


def _images(size, seed=0, batch=2):
    return np.random.default_rng(seed).normal(size=(batch,) + size + (3,)).astype("float32")


@pytest.fixture(scope="module")
def hf_dinov3(tmp_path_factory):
    """`{name: (folder, torch model)}`: the plain layout (registers, no key
    bias) and the gated one without biases, other base, no registers."""
    made = {}
    for name, changes, seed in (("plain", {}, 1), ("gated", GATED, 2)):
        folder = tmp_path_factory.mktemp(f"dinov3_{name}")
        made[name] = (folder, fam.save_dinov3(folder, seed=seed, **changes))
    return made


@pytest.mark.parametrize("name", ["plain", "gated"])
def test_transformers_dinov3_loads(hf_dinov3, name):
    folder, reference = hf_dinov3[name]
    model = keras_vit.from_preset(str(folder))
    assert model.block_config.rope == "dinov3" and model.position_embedding == "none"
    assert "embedding/pos_embedding" not in {w.path for w in model.weights}
    if name == "gated":
        assert model.mlp_kind == "swiglu" and model.qkv_bias == (False, True, True)
        assert model.rope_settings == {"base": 50.0} and not model.mlp_bias and not model.attention_out_bias
    else:
        assert model.qkv_bias == (True, False, True) and model.num_register_tokens == 2
    for size in SIZES:
        x = _images(size)
        want = fam.run_torch(reference, x)
        pooled, tokens = inference(lambda x: (model(x), model.forward_features(x)), x)
        np.testing.assert_allclose(pooled, want.pooler_output.numpy(), atol=ATOL, rtol=0)
        np.testing.assert_allclose(tokens, want.last_hidden_state.numpy(), atol=ATOL, rtol=0)


def test_transformers_backbone_feature_maps(tmp_path):
    reference = fam.save_dinov3(tmp_path, seed=3, backbone=True, out_indices=[1, 2])
    model = keras_vit.from_preset(str(tmp_path))
    features = feature_model(model, feature_blocks=(0, 1), norm=True)
    x = _images((20, 28))
    want = fam.run_torch(reference, x).feature_maps
    got = features(x)
    for ours, theirs in zip(got, want):
        np.testing.assert_allclose(to_numpy(ours), theirs.numpy().transpose(0, 2, 3, 1), atol=ATOL, rtol=0)


def test_feature_pyramid_on_dinov3(hf_dinov3):
    model = keras_vit.from_preset(str(hf_dinov3["plain"][0]))
    features = feature_model(model, feature_blocks=-1)
    pyramid = SimpleFeaturePyramid(input_stride=4, out_channels=8, strides=(4, 8, 16))
    x = _images((32, 48))
    last = features(x)
    maps = pyramid(last)
    assert [tuple(m.shape) for m in maps] == [(2, 8, 12, 8), (2, 4, 6, 8), (2, 2, 3, 8)]
    # The map the pyramid reads is the last block's output on the image's own grid.
    _, (want,) = model.forward_intermediates(x, indices=[-1])
    np.testing.assert_allclose(to_numpy(last), to_numpy(want), atol=1e-6)


@pytest.mark.parametrize("name", ["plain", "gated"])
def test_written_back_to_transformers(hf_dinov3, tmp_path, name):
    folder, reference = hf_dinov3[name]
    model = keras_vit.from_preset(str(folder))
    model.save_to_preset(str(tmp_path), format="transformers", preprocessing="imagenet")
    config = json.load(open(tmp_path / "config.json"))
    assert config["architectures"] == ["DINOv3ViTModel"]
    written = transformers.DINOv3ViTModel.from_pretrained(str(tmp_path)).eval()
    for key, value in reference.state_dict().items():
        if key != "embeddings.mask_token":  # pre-training only: written as zeros
            np.testing.assert_array_equal(written.state_dict()[key].numpy(), value.numpy(), err_msg=key)
    x = _images((20, 28))
    np.testing.assert_allclose(fam.run_torch(written, x).pooler_output.numpy(), to_numpy(model(x)),
                               atol=ATOL, rtol=0)
    processor = transformers.AutoImageProcessor.from_pretrained(str(tmp_path))
    assert list(processor.image_mean) == pytest.approx([0.485, 0.456, 0.406])
    assert keras_vit.from_preset(str(tmp_path)).get_config()["block_config"] == model.get_config()["block_config"]


def test_a_keras_vit_dinov3_without_layerscale_writes_ones(tmp_path):
    model = keras_vit.ViT(image_size=16, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                          rope="dinov3", position_embedding="none", include_top=False, pooling="token",
                          mlp_activation="gelu")
    model.save_to_preset(str(tmp_path), format="transformers", preprocessing="imagenet")
    written = transformers.DINOv3ViTModel.from_pretrained(str(tmp_path)).eval()
    assert written.config.num_register_tokens == 0 and written.config.layerscale_value == 1.0
    x = _images((16, 24))
    np.testing.assert_allclose(fam.run_torch(written, x).pooler_output.numpy(), to_numpy(model(x)),
                               atol=ATOL, rtol=0)


@pytest.mark.parametrize("change, match", [
    (dict(rope_settings={"base": 100.0, "normalize_coords": "max"}), "sets the rotary base"),
    (dict(pooling="avg"), "pools its class token"),
    (dict(position_embedding="learned"), "position_embedding='learned'"),
    (dict(mlp_norm=True), "mlp_norm=True"),
])
def test_what_dinov3_cannot_hold_is_refused(tmp_path, change, match):
    args = dict(image_size=16, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                rope="dinov3", position_embedding="none", include_top=False, pooling="token")
    model = keras_vit.ViT(**dict(args, **change))
    with pytest.raises(ValueError, match=match):
        model.save_to_preset(str(tmp_path / "out"), format="transformers", preprocessing="imagenet")
    assert not os.path.exists(tmp_path / "out" / "config.json")


# --- keras-hub -----------------------------------------------------------------


@pytest.fixture(scope="module")
def hub_dinov3(tmp_path_factory):
    keras_hub = pytest.importorskip("keras_hub", reason="keras-hub makes the reference backbone")
    folders = {}
    for name, options in (
        ("plain", dict(num_register_tokens=2, use_key_bias=False, layer_scale_init_value=0.5)),
        ("gated", dict(num_register_tokens=0, use_gated_mlp=True, hidden_activation="silu", use_mlp_bias=False,
                       use_proj_bias=False, rope_theta=50.0)),
    ):
        backbone = keras_hub.models.DINOV3Backbone(
            patch_size=4, num_layers=2, hidden_dim=32, num_heads=2, intermediate_dim=48, image_shape=(16, 16, 3),
            name=f"dinov3_{name}", **options)
        rng = np.random.default_rng(4)
        for weight in backbone.weights:
            weight.assign(rng.normal(scale=0.3, size=weight.shape).astype(weight.dtype)
                          + (1.0 if weight.path.endswith("gamma") else 0.0))
        folder = tmp_path_factory.mktemp(f"hub_dinov3_{name}")
        backbone.save_to_preset(str(folder))
        folders[name] = str(folder)
    return keras_hub, folders


@pytest.mark.parametrize("name", ["plain", "gated"])
def test_keras_hub_dinov3_loads(hub_dinov3, name):
    keras_hub, folders = hub_dinov3
    model = keras_vit.from_preset(folders[name])
    for size in SIZES:
        x = _images(size)
        reference = keras_hub.models.Backbone.from_preset(folders[name], image_shape=size + (3,))
        want = inference(lambda x: reference({"pixel_values": x}), x)
        tokens, pooled = inference(lambda x: (model.forward_features(x), model(x)), x)
        np.testing.assert_allclose(tokens, want, atol=ATOL, rtol=0)
        np.testing.assert_allclose(pooled, want[:, 0], atol=ATOL, rtol=0)


# --- deployment ------------------------------------------------------------------


# One runtime per backend's job, both over the three: the rotary tables are
# the same Keras code on each backend, and tests/test_export.py runs every
# format of every backend.
@every_backend("one export runtime per backend's job")
@pytest.mark.parametrize("format", [per_backend(jax="onnx", tensorflow="onnx", torch="openvino")])
def test_dinov3_exports(hf_dinov3, tmp_path, format):
    model = keras_vit.from_preset(str(hf_dinov3["plain"][0]))
    path = model.export(str(tmp_path / f"dinov3{export.SUFFIXES[format]}"), format=format)
    x = _images((16, 16), batch=3)
    diff, outputs, expected = export.verify_export(path, format, model, x)
    assert outputs.shape == (3, 32) and diff <= ATOL, diff
    assert np.abs(expected[0] - expected[1]).max() > 1e-3
