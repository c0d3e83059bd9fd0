"""timm Hub directories of timm's `Eva` models (DINOv3, EVA02, Perception
Encoder, RoPE-ViT axial, mixed and with a position table): random state
dicts in timm's key names (`families_2025.random_timm_state`), loaded with
`from_preset` and held to `reference_families.eva_forward` (the NumPy pass
of timm's formulas) at the checkpoint's image size and a larger non-square
one; DINOv3 also through a transformers model renamed to timm's keys, so the
timm layout meets transformers' own forward pass."""

import json

import numpy as np
import pytest

import families_2025 as fam
import keras_vit
import reference_families as ref
from conftest import inference, spread
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.families import eva as timm_eva

pytestmark = spread("timm's Eva layouts: the layers are held on every backend by their contracts; each case "
                    "once")

SIZES = [(28, 28), (35, 42)]  # the checkpoint's, and larger and non-square
ATOL = 1e-4
EVA = sorted(a for a in fam.TIMM_ARCHITECTURES if not a.startswith("aimv2"))


def _images(size, seed=0):
    return np.random.default_rng(seed).normal(size=(2,) + size + (3,)).astype("float32")


def _load(tmp_path, architecture, model_args=None, num_classes=5, seed=1):
    state, arch = fam.random_timm_state(np.random.default_rng(seed), architecture, model_args, num_classes)
    folder = fam.write_timm_family(tmp_path, architecture, state, model_args, num_classes=num_classes)
    return keras_vit.from_preset(folder), state, arch


@spread("the layouts' key tables and records; the rotary blocks are held on every backend by "
        "test_rotary_blocks and the model contract")
@pytest.mark.parametrize("architecture", EVA)
def test_eva_layouts_equal_numpy_timm(tmp_path, architecture):
    model, state, arch = _load(tmp_path, architecture)
    assert model.block_config.rope is not None
    for size in SIZES:
        x = _images(size)
        want = ref.eva_forward(state, x, arch)
        logits, tokens = inference(lambda x: (model(x), model.forward_features(x)), x)
        np.testing.assert_allclose(logits, want["logits"], atol=ATOL, rtol=0)
        np.testing.assert_allclose(tokens, want["tokens"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("architecture", ["vit_base_patch16_dinov3_qkvb", "vit_pe_core_base_patch16_224",
                                          "eva02_tiny_patch14_224"])
def test_without_a_head_the_output_is_timms_pooled_features(tmp_path, architecture):
    # Perception Encoder's attention pool with its own heads and MLP width.
    model_args = dict(fam.TINY_TIMM, embed_dim=32, attn_pool_num_heads=4, attn_pool_mlp_ratio=2.0)
    if not architecture.startswith("vit_pe"):
        model_args = fam.TINY_TIMM
    model, state, arch = _load(tmp_path, architecture, model_args, num_classes=0)
    assert not model.include_top
    if architecture.startswith("vit_pe"):
        assert (model.map_num_heads, model.map_mlp_dim) == (4, 64)
    x = _images(SIZES[1])
    np.testing.assert_allclose(inference(model, x), ref.eva_forward(state, x, arch)["pooled"],
                               atol=ATOL, rtol=0)


def test_dinov3_timm_layout_equals_transformers(tmp_path):
    reference = fam.save_dinov3(tmp_path / "hf", seed=5)
    state = fam.transformers_dinov3_to_timm(fam.torch_state(reference))
    model_args = dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0,
                      num_reg_tokens=2)
    folder = fam.write_timm_family(tmp_path / "timm", "vit_base_patch16_dinov3_qkvb", state, model_args)
    model = keras_vit.from_preset(folder)
    for size in [(16, 16), (20, 28)]:
        x = _images(size)
        want = fam.run_torch(reference, x)
        tokens, pooled = inference(lambda x: (model.forward_features(x), model(x)), x)
        np.testing.assert_allclose(tokens, want.last_hidden_state.numpy(), atol=ATOL, rtol=0)
        # timm pools the mean of the patch tokens after `norm`.
        np.testing.assert_allclose(pooled, want.last_hidden_state.numpy()[:, 3:].mean(1), atol=ATOL, rtol=0)


@pytest.mark.parametrize("name, expected", [
    ("vit_small_plus_patch16_dinov3", dict(mlp_kind="swiglu", mlp_dim=1536, qkv_bias=False, rope="dinov3")),
    ("vit_large_patch16_dinov3_qkvb", dict(mlp_dim=4096, qkv_bias=(True, False, True), num_register_tokens=4)),
    ("eva02_large_patch14_448", dict(mlp_kind="swiglu", mlp_dim=2730, mlp_norm=True, rope="eva02",
                                     rope_settings={"reference_grid": (16, 16)}, pooled_norm=True)),
    ("eva02_base_patch16_clip_224", dict(attention_out_norm=True, classifier="token", classes=512)),
    ("vit_pe_core_base_patch16_224", dict(rope="pe", rope_settings={"reference_grid": (14, 14)},
                                          map_num_heads=8, map_mlp_dim=None, pre_norm=True, patch_bias=False)),
    ("vit_base_patch16_rope_mixed_ape_224", dict(rope="mixed", position_embedding="learned",
                                                 layer_scale_init=1e-5)),
    ("vit_small_patch16_rope_224", dict(rope="axial", rope_settings=None, position_embedding="none")),
])
def test_registered_names_give_timms_arguments(name, expected):
    args, _ = timm_eva.model_arguments({"architecture": name, "pretrained_cfg": {}})
    assert {k: args.get(k) for k in expected} == expected


@pytest.mark.parametrize("model_args, match", [
    (dict(num_kv_heads=1), "num_kv_heads=1 \\(grouped-query attention needs attn_type='rope'"),
    (dict(use_rot_pos_emb=True, rope_type="mrope"), "rope_type='mrope'"),
    (dict(use_fc_norm=True, use_post_transformer_norm=True), "one final norm"),
    (dict(global_pool="avgmax"), "global_pool='avgmax'"),
])
def test_what_keras_vit_cannot_build_is_named(model_args, match):
    config = {"architecture": "eva02_tiny_patch14_224", "model_args": model_args, "pretrained_cfg": {}}
    with pytest.raises(ValueError, match=match):
        timm_eva.model_arguments(config)


def test_the_reader_is_chosen_by_the_architecture(tmp_path):
    _load(tmp_path, "vit_base_patch16_rope_224")
    from keras_vit.presets import describe_preset

    source = describe_preset(str(tmp_path))
    assert source.layout == "timm" and source.arguments["rope"] == "axial"
    config = json.load(open(tmp_path / "config.json"))
    assert timm_eva.is_eva(config) and not timm_eva.is_eva({"architecture": "vit_base_patch16_224"})


@pytest.mark.parametrize("architecture", ["vit_pe_core_base_patch16_224", "vit_base_patch16_rope_mixed_224"])
def test_feature_maps_are_the_blocks_tokens_on_their_grid(tmp_path, architecture):
    model_args = dict(fam.TINY_TIMM, attn_pool_num_heads=2) if architecture.startswith("vit_pe") else None
    model, state, arch = _load(tmp_path, architecture, model_args)
    x = _images(SIZES[1])
    maps = inference(keras_vit.feature_model(model, feature_blocks=-1, norm=True), x)
    tokens = ref.eva_forward(state, x, arch)["tokens"][:, arch["num_prefix_tokens"]:]
    np.testing.assert_allclose(maps, tokens.reshape(2, 5, 6, -1), atol=ATOL, rtol=0)


# RoPE-ViT mixed: each block's tables come from a learned weight, in the
# interleaved layout (DINOv3's half layout exports in test_dinov3.py).
@pytest.mark.parametrize("format", ["onnx"])
def test_eva_layouts_export(tmp_path, format):
    import keras

    from keras_vit import export

    if format not in export.BACKEND_FORMATS.get(keras.backend.backend(), ()):
        pytest.skip(f"the {keras.backend.backend()} backend exports no {format}")
    model, _, _ = _load(tmp_path / "hub", "vit_base_patch16_rope_mixed_224")
    path = model.export(str(tmp_path / f"model{export.SUFFIXES[format]}"), format=format)
    diff, outputs, expected = export.verify_export(path, format, model, _images(SIZES[0]))
    assert outputs.shape == (2, 5) and diff <= ATOL, diff
    assert np.abs(expected[0] - expected[1]).max() > 1e-3
