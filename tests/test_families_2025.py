"""The reference checkpoints of the 2025-26 families (`families_2025`) and
the NumPy forward passes (`reference_families`) that later loaders are held
to: the NumPy passes against transformers' DINOv3 and AIMv2 (also through
timm's key names), AIMv2's fixed table against transformers and keras_vit,
the timm layouts against timm's key names, SigLIP 2's padded batches against
transformers image by image."""

import json
import os

import numpy as np
import pytest

import families_2025 as fam
import reference_families as ref
from conftest import runs_once, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.layers.sincos import sincos_position_embedding
from keras_vit.preprocessing.naflex import naflex_inputs

pytestmark = runs_once("torch", "NumPy references against transformers' torch models")

transformers = pytest.importorskip("transformers", reason="transformers makes the reference models")
torch = pytest.importorskip("torch")

SIZES = [(16, 16), (20, 28)]  # the checkpoint's, and larger and non-square


def _images(size, seed=0):
    return np.random.default_rng(seed).normal(size=(2,) + size + (3,)).astype("float32")


@pytest.fixture(scope="module")
def dinov3(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dinov3")
    return folder, fam.save_dinov3(folder, seed=1)


@pytest.mark.parametrize("size", SIZES)
def test_numpy_dinov3_equals_transformers_in_timms_layout(dinov3, size):
    folder, model = dinov3
    state = fam.transformers_dinov3_to_timm(fam.torch_state(model))
    model_args = dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0,
                      num_reg_tokens=2)
    arch = fam.resolve_timm("vit_base_patch16_dinov3_qkvb", model_args)
    x = _images(size)
    want = fam.run_torch(model, x)
    out = ref.eva_forward(state, x, arch)
    np.testing.assert_allclose(out["tokens"], want.last_hidden_state.numpy(), atol=2e-5)
    np.testing.assert_allclose(out["tokens"][:, 0], want.pooler_output.numpy(), atol=2e-5)
    # timm pools the mean of the patch tokens (after the final norm).
    np.testing.assert_allclose(out["pooled"], out["tokens"][:, 3:].mean(axis=1), atol=1e-12)
    folder = fam.write_timm_family(folder / "timm", "vit_base_patch16_dinov3_qkvb", state, model_args)
    config = json.load(open(os.path.join(folder, "config.json")))
    assert config["architecture"] == "vit_base_patch16_dinov3_qkvb"
    assert config["model_args"]["num_reg_tokens"] == 2


def test_saved_dinov3_reloads(dinov3):
    folder, model = dinov3
    reloaded = transformers.DINOv3ViTModel.from_pretrained(folder).eval()
    x = _images((16, 16))
    np.testing.assert_allclose(fam.run_torch(reloaded, x).last_hidden_state.numpy(),
                               fam.run_torch(model, x).last_hidden_state.numpy(), atol=1e-5)
    config = json.load(open(folder / "config.json"))
    assert config["model_type"] == "dinov3_vit" and config["num_register_tokens"] == 2
    assert not config["key_bias"] and config["query_bias"]


def test_dinov3_backbone_fixture(tmp_path):
    model = fam.save_dinov3(tmp_path, seed=2, backbone=True, out_indices=[1, 2])
    maps = fam.run_torch(model, _images((20, 28))).feature_maps
    assert [tuple(m.shape) for m in maps] == [(2, 32, 5, 7)] * 2


@pytest.mark.parametrize("native", [False, True])
def test_numpy_aimv2_equals_transformers(tmp_path, native):
    model = fam.save_aimv2(tmp_path, seed=3, is_native=native)
    hf_state = {k: v.astype(np.float64) for k, v in fam.torch_state(model).items()}
    for size in SIZES if native else SIZES[:1]:
        state = fam.transformers_aimv2_to_timm(fam.torch_state(model)) if not native else dict(
            fam.transformers_aimv2_to_timm(dict(fam.torch_state(model), **{
                "embeddings.position_embedding.weight": ref.aimv2_sincos((size[0] // 4, size[1] // 4), 32)})))
        model_args = dict(img_size=size, patch_size=4, embed_dim=32, depth=2, num_heads=2, mlp_ratio=1.5)
        arch = fam.resolve_timm("aimv2_large_patch14_224", model_args)
        x = _images(size)
        want = fam.run_torch(model, x)
        out = ref.eva_forward(state, x, arch)
        np.testing.assert_allclose(out["tokens"], want.last_hidden_state.numpy(), atol=2e-5)
        pooled = ref.aimv2_attention_pool(out["tokens"], hf_state, heads=2)
        np.testing.assert_allclose(pooled, want.pooler_output.numpy(), atol=2e-5)


@pytest.mark.parametrize("grid", [(4, 4), (5, 7)])
def test_aimv2_table_is_maes_sincos_without_prefix_row(grid):
    from transformers.models.aimv2.modeling_aimv2 import build_2d_sinusoidal_position_embedding

    table = build_2d_sinusoidal_position_embedding(*grid, embed_dim=32).numpy()
    # Aimv2VisionEmbeddings swaps the halves to [x | y].
    table = np.concatenate([table[:, 16:], table[:, :16]], axis=-1)
    np.testing.assert_allclose(ref.aimv2_sincos(grid, 32), table, atol=1e-6)
    ours = to_numpy(sincos_position_embedding(grid, 32, "mae", num_prefix_rows=0))
    np.testing.assert_allclose(ours[0], table, atol=1e-6)


# --- timm layouts ----------------------------------------------------------------

# Block 0's and the model's own keys in timm's `Eva` / `VisionTransformer`
# for each architecture (from timm's source), leaves "weight"/"bias" joined.
_LN = ("weight", "bias")
BLOCK_KEYS = {
    "eva02_tiny_patch14_224": ["norm1", "attn.qkv.weight", "attn.q_bias", "attn.v_bias", "attn.proj", "norm2",
                               "mlp.fc1", "mlp.fc2"],
    "eva02_base_patch14_448": ["norm1", "attn.q_proj", "attn.k_proj.weight", "attn.v_proj", "attn.proj", "norm2",
                               "mlp.fc1_g", "mlp.fc1_x", "mlp.norm", "mlp.fc2"],
    "eva02_base_patch16_clip_224": ["norm1", "attn.q_proj", "attn.k_proj.weight", "attn.v_proj", "attn.norm",
                                    "attn.proj", "norm2", "mlp.fc1_g", "mlp.fc1_x", "mlp.norm", "mlp.fc2"],
    "vit_pe_core_base_patch16_224": ["norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2"],
    "vit_base_patch16_rope_224": ["norm1", "attn.qkv", "attn.proj", "gamma_1.", "norm2", "mlp.fc1", "mlp.fc2",
                                  "gamma_2."],
    "vit_base_patch16_dinov3": ["norm1", "attn.qkv.weight", "attn.proj", "gamma_1.", "norm2", "mlp.fc1", "mlp.fc2",
                                "gamma_2."],
    "vit_base_patch16_dinov3_qkvb": ["norm1", "attn.qkv.weight", "attn.q_bias", "attn.v_bias", "attn.proj",
                                     "gamma_1.", "norm2", "mlp.fc1", "mlp.fc2", "gamma_2."],
    "aimv2_large_patch14_224": ["norm1.weight", "attn.qkv.weight", "attn.proj.weight", "norm2.weight",
                                "mlp.fc1_g.weight", "mlp.fc1_x.weight", "mlp.fc2.weight"],
}
BLOCK_KEYS["vit_base_patch16_rope_mixed_224"] = BLOCK_KEYS["vit_base_patch16_rope_224"]
BLOCK_KEYS["vit_base_patch16_rope_ape_224"] = BLOCK_KEYS["vit_base_patch16_rope_224"]
TOP_KEYS = {
    "eva02_tiny_patch14_224": ["patch_embed.proj", "cls_token", "pos_embed", "fc_norm", "head"],
    "eva02_base_patch14_448": ["patch_embed.proj", "cls_token", "pos_embed", "fc_norm", "head"],
    "eva02_base_patch16_clip_224": ["patch_embed.proj", "cls_token", "pos_embed", "norm", "head"],
    "vit_pe_core_base_patch16_224": ["patch_embed.proj.weight", "cls_token", "pos_embed", "norm_pre", "norm",
                                     "attn_pool.latent", "attn_pool.q", "attn_pool.kv", "attn_pool.proj",
                                     "attn_pool.norm", "attn_pool.mlp.fc1", "attn_pool.mlp.fc2", "head"],
    "vit_base_patch16_rope_224": ["patch_embed.proj", "cls_token", "norm", "head"],
    "vit_base_patch16_rope_mixed_224": ["patch_embed.proj", "cls_token", "rope.freqs", "norm", "head"],
    "vit_base_patch16_rope_ape_224": ["patch_embed.proj", "cls_token", "pos_embed", "norm", "head"],
    "vit_base_patch16_dinov3": ["patch_embed.proj", "cls_token", "reg_token", "norm", "head"],
    "vit_base_patch16_dinov3_qkvb": ["patch_embed.proj", "cls_token", "reg_token", "norm", "head"],
    "aimv2_large_patch14_224": ["patch_embed.proj", "patch_embed.norm.weight", "pos_embed", "norm.weight", "head"],
}


def _expand(names):
    keys = set()
    for name in names:
        if name.endswith((".weight", ".bias", "_bias", "_token", "pos_embed", ".latent", ".freqs", ".")):
            keys.add(name.rstrip("."))
        else:
            keys.update(f"{name}.{leaf}" for leaf in _LN)
    return keys


@pytest.mark.parametrize("architecture", sorted(fam.TIMM_ARCHITECTURES))
def test_timm_layouts_hold_timms_keys(architecture):
    state, arch = fam.random_timm_state(np.random.default_rng(0), architecture, num_classes=5)
    block = {k[len("blocks.0."):] for k in state if k.startswith("blocks.0.")}
    assert block == _expand(BLOCK_KEYS[architecture])
    top = {k for k in state if not k.startswith("blocks.")}
    assert top == _expand(TOP_KEYS[architecture])
    assert {int(k.split(".")[1]) for k in state if k.startswith("blocks.")} == {0, 1}


@pytest.mark.parametrize("architecture", sorted(fam.TIMM_ARCHITECTURES))
def test_timm_fixture_directories_and_reference_outputs(tmp_path, architecture):
    state, arch = fam.random_timm_state(np.random.default_rng(1), architecture, num_classes=5)
    folder = fam.write_timm_family(tmp_path, architecture, state, num_classes=5)
    config = json.load(open(os.path.join(folder, "config.json")))
    assert config["architecture"] == architecture and config["model_args"] == dict(
        fam.TINY_TIMM, img_size=28) and config["num_classes"] == 5
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]
    for size in [(28, 28), (35, 42)]:
        out = ref.eva_forward(state, _images(size), arch)
        tokens = arch["num_prefix_tokens"] + (size[0] // 7) * (size[1] // 7)
        assert out["tokens"].shape == (2, tokens, 16) and out["logits"].shape == (2, 5)
        assert np.all(np.isfinite(out["logits"])) and np.abs(out["logits"]).max() > 1e-3


@pytest.mark.parametrize("architecture", [a for a in sorted(fam.TIMM_ARCHITECTURES) if "rope" in
                                          fam.resolve_timm(a, fam.TINY_TIMM)])
def test_reference_uses_each_architectures_rotary_settings(architecture):
    """Another rotation layout or axis order changes the reference's output:
    the tests built on it can tell a wrong RoPE variant."""
    state, arch = fam.random_timm_state(np.random.default_rng(2), architecture, num_classes=5)
    x = _images((35, 42))
    base = ref.eva_forward(state, x, arch)["logits"]
    changes = [dict(rope_rotate_half=not arch["rope_rotate_half"])]
    if arch["rope"] != "dinov3":
        changes.append(dict(rope_grid_indexing="ij" if arch["rope_grid_indexing"] == "xy" else "xy"))
    for change in changes:
        other = ref.eva_forward(state, x, dict(arch, **change))["logits"]
        assert np.abs(other - base).max() > 1e-3, change


# --- SigLIP 2 --------------------------------------------------------------------


@pytest.fixture(scope="module")
def siglip2(tmp_path_factory):
    folder = tmp_path_factory.mktemp("siglip2")
    return folder, fam.save_siglip2(folder, seed=4)


def test_siglip2_padded_batch_equals_each_image_alone(siglip2):
    folder, model = siglip2
    rng = np.random.default_rng(5)
    images = [rng.integers(0, 256, (24, 40, 3), dtype=np.uint8), rng.integers(0, 256, (40, 12, 3), dtype=np.uint8)]
    batch = naflex_inputs(images, 4, 16)
    assert batch["patch_valid"].sum(axis=1).tolist() == [15, 14]  # 3 x 5 and 7 x 2 patches
    pooled, tokens = fam.siglip2_forward(model, batch)
    for i, image in enumerate(images):
        alone = naflex_inputs([image], 4, 16)
        one_pooled, one_tokens = fam.siglip2_forward(model, alone)
        valid = alone["patch_valid"][0]
        np.testing.assert_allclose(pooled[i], one_pooled[0], atol=1e-5)
        np.testing.assert_allclose(tokens[i][valid], one_tokens[0][valid], atol=1e-5)


def test_siglip2_fixture_reloads_with_its_processor(siglip2):
    folder, model = siglip2
    from transformers.models.siglip2.image_processing_pil_siglip2 import Siglip2ImageProcessorPil

    processor = Siglip2ImageProcessorPil.from_pretrained(folder)
    assert (processor.patch_size, processor.max_num_patches) == (4, 16)
    reloaded = transformers.Siglip2VisionModel.from_pretrained(folder).eval()
    batch = naflex_inputs([np.zeros((20, 20, 3), "uint8")], 4, 16)
    np.testing.assert_allclose(fam.siglip2_forward(reloaded, batch)[0], fam.siglip2_forward(model, batch)[0],
                               atol=1e-5)
    assert json.load(open(folder / "config.json"))["num_patches"] == 16
