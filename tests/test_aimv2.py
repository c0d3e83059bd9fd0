"""AIMv2: a transformers `Aimv2VisionModel` (random, `save_pretrained`) and a
timm `aimv2_*` Hub directory (random state in timm's names) load with
`from_preset` and reproduce their references (transformers, and the NumPy
pass of timm's formulas in `reference_families`) at the checkpoint's size and
a larger non-square one: pooled output and last hidden state within 1e-4;
written back to transformers and exported."""

import json
import os

import numpy as np
import pytest

import families_2025 as fam
import keras_vit
import reference_families as ref
from conftest import spread, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit import export
from keras_vit.layers import AttentionPoolHead

pytestmark = spread("AIMv2's parity: its layers are held on every backend by their contracts; each case once")

transformers = pytest.importorskip("transformers", reason="transformers makes the AIMv2 references")
torch = pytest.importorskip("torch")

ATOL = 1e-4
HEADS = fam.AIMV2_TINY["num_attention_heads"]


def _images(size, seed=0):
    return np.random.default_rng(seed).normal(size=(2,) + size + (3,)).astype("float32")


@pytest.fixture(scope="module", params=[False, True], ids=["learned", "native"])
def aimv2(request, tmp_path_factory):
    """A learned position table, or the fixed sin-cos one (`is_native`)."""
    folder = tmp_path_factory.mktemp("aimv2")
    reference = fam.save_aimv2(folder, seed=21, is_native=request.param)
    return str(folder), reference, keras_vit.from_preset(str(folder)), request.param


def _numpy_reference(reference, native, x):
    """The NumPy pass in timm's layout (`eva_forward`; a learned table
    resized as timm does) and transformers' head: `(pooled, tokens)`."""
    state = fam.torch_state(reference)
    grid = (x.shape[1] // 4, x.shape[2] // 4)
    if native:
        state["embeddings.position_embedding.weight"] = ref.aimv2_sincos(grid, 32)
    model_args = dict(img_size=16 if not native else x.shape[1:3], patch_size=4, embed_dim=32, depth=2,
                      num_heads=HEADS, mlp_ratio=1.5)
    arch = fam.resolve_timm("aimv2_large_patch14_224", model_args)
    tokens = ref.eva_forward(fam.transformers_aimv2_to_timm(state), x, arch)["tokens"]
    return ref.aimv2_attention_pool(tokens, {k: v.astype(np.float64) for k, v in state.items()}, HEADS), tokens


@pytest.mark.parametrize("size", [(16, 16), (20, 28)], ids=["checkpoint", "larger-non-square"])
def test_transformers_aimv2(aimv2, size):
    """transformers' outputs where it runs (the learned table at its own
    grid, the sin-cos table at any); the NumPy reference everywhere."""
    _, reference, model, native = aimv2
    x = _images(size, seed=size[1])
    pooled, hidden = to_numpy(model(x)), to_numpy(model.forward_features(x))
    if native or size == (16, 16):
        want = fam.run_torch(reference, x)
        np.testing.assert_allclose(pooled, want.pooler_output.numpy(), rtol=0, atol=ATOL)
        np.testing.assert_allclose(hidden, want.last_hidden_state.numpy(), rtol=0, atol=ATOL)
    ref_pooled, ref_tokens = _numpy_reference(reference, native, x)
    np.testing.assert_allclose(pooled, ref_pooled, rtol=0, atol=ATOL)
    np.testing.assert_allclose(hidden, ref_tokens, rtol=0, atol=ATOL)


def test_aimv2_arguments(aimv2):
    _, _, model, native = aimv2
    assert model.block_config.norm_kind == "rmsnorm" and model.mlp_kind == "swiglu"
    assert model.qkv_bias is False and model.attention_out_bias is False and model.mlp_bias is False
    assert model.encoder_config.patch_norm and model.num_prefix_tokens == 0
    assert model.position_embedding == ("sincos" if native else "learned")
    assert isinstance(model.get_layer("pool"), AttentionPoolHead)


def test_aimv2_writes_back_to_transformers(aimv2, tmp_path):
    """`save_to_preset(format="transformers")`: an `Aimv2VisionModel` with
    every key used, the same config fields, the same outputs."""
    folder, reference, model, native = aimv2
    model.save_to_preset(tmp_path, format="transformers", preprocessing="imagenet")
    again, info = transformers.Aimv2VisionModel.from_pretrained(str(tmp_path), output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    written, original = (json.load(open(os.path.join(f, "config.json"))) for f in (tmp_path, folder))
    for field in ("is_native", "use_head", "qkv_bias", "mlp_bias", "rms_norm_eps", "hidden_act", "image_size"):
        assert written[field] == original[field], field
    assert json.load(open(tmp_path / "preprocessor_config.json"))["image_processor_type"] == "CLIPImageProcessor"
    x = _images((16, 16), seed=5)
    ours, theirs = fam.run_torch(again.eval(), x), fam.run_torch(reference, x)
    np.testing.assert_allclose(ours.pooler_output.numpy(), theirs.pooler_output.numpy(), rtol=0, atol=1e-5)


def test_aimv2_exports(aimv2, tmp_path):
    """ONNX for both tables, OpenVINO for the learned one (the sin-cos
    table's graph differs in its embedding alone)."""
    _, _, model, native = aimv2
    for format in ("onnx",) if native else ("onnx", "openvino"):
        path = str(tmp_path / f"aimv2{export.SUFFIXES[format]}")
        model.export(path, format=format)
        diff, _, _ = export.verify_export(path, format, model, _images((16, 16), seed=6))
        assert diff <= ATOL, format


# --- timm ----------------------------------------------------------------------


@pytest.fixture(scope="module", params=[0, 5], ids=["features", "classifier"])
def timm_aimv2(request, tmp_path_factory):
    state, arch = fam.random_timm_state(np.random.default_rng(22), "aimv2_large_patch14_224",
                                        num_classes=request.param)
    folder = fam.write_timm_family(tmp_path_factory.mktemp("timm_aimv2"), "aimv2_large_patch14_224", state,
                                   num_classes=request.param)
    return state, arch, keras_vit.from_preset(folder), request.param


@pytest.mark.parametrize("size", [(28, 28), (35, 42)], ids=["checkpoint", "larger-non-square"])
def test_timm_aimv2(timm_aimv2, size):
    """timm's `aimv2_*`: the mean of the tokens after `norm` (or the head's
    logits on it), the position table resized as timm resizes it."""
    state, arch, model, classes = timm_aimv2
    x = _images(size, seed=size[0])
    want = ref.eva_forward(state, x, arch)
    np.testing.assert_allclose(to_numpy(model(x)), want["logits"] if classes else want["pooled"], rtol=0, atol=ATOL)
    np.testing.assert_allclose(to_numpy(model.forward_features(x)), want["tokens"], rtol=0, atol=ATOL)
    assert model.mlp_dim == int(16 * 2.75) and model.position_interpolation == "timm"


# --- the head and what is refused -----------------------------------------------------


def test_attention_pool_head_equals_numpy_and_reads_the_mask():
    rng = np.random.default_rng(0)
    head = AttentionPoolHead(num_heads=2, qkv_bias=True)
    tokens = rng.normal(size=(2, 5, 8)).astype("float32")
    head(tokens)
    for v in head.weights:
        v.assign(rng.normal(size=v.shape).astype("float32"))
    state = {"head.cls_token": to_numpy(head.query),
             "head.k_proj.weight": to_numpy(head.key.kernel).reshape(8, 8).T,
             "head.k_proj.bias": to_numpy(head.key.bias).reshape(8),
             "head.v_proj.weight": to_numpy(head.value.kernel).reshape(8, 8).T,
             "head.v_proj.bias": to_numpy(head.value.bias).reshape(8),
             "head.output_proj.weight": to_numpy(head.out.kernel).reshape(8, 8).T,
             "head.output_proj.bias": to_numpy(head.out.bias)}
    state = {k: v.astype(np.float64) for k, v in state.items()}
    np.testing.assert_allclose(to_numpy(head(tokens)), ref.aimv2_attention_pool(tokens, state, 2), atol=1e-5)
    mask = np.array([[True, True, True, False, False]] * 2)
    np.testing.assert_allclose(to_numpy(head(tokens, token_mask=mask)),
                               ref.aimv2_attention_pool(tokens[:, :3], state, 2), atol=1e-5)


@pytest.mark.parametrize("change, match", [
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(architectures=["Aimv2Model"]), "architecture"),
])
def test_configs_keras_vit_cannot_build_are_refused(aimv2, tmp_path, change, match):
    with open(os.path.join(aimv2[0], "config.json")) as f:
        config = json.load(f)
    (tmp_path / "config.json").write_text(json.dumps(dict(config, **change)))
    with pytest.raises(ValueError, match=match):
        keras_vit.presets.describe_preset(str(tmp_path))


@pytest.mark.parametrize("change, match", [
    (dict(attention_out_bias=True), "Aimv2VisionModel has query, key, value and output biases together"),
    (dict(pooling="avg"), "attention-pool head or not at all"),
    (dict(norm_kind="layernorm"), r"norm_kind='layernorm' \(Aimv2VisionModel holds"),
])
def test_models_aimv2_cannot_hold_are_refused(tmp_path, change, match):
    arguments = dict(image_size=16, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=24,
                     norm_kind="rmsnorm", mlp_kind="swiglu", qkv_bias=False, attention_out_bias=False,
                     mlp_bias=False, patch_norm=True, classifier="gap", include_top=False,
                     pooling="attention_pool")
    model = keras_vit.ViT(**{**arguments, **change})
    with pytest.raises(ValueError, match=match):
        model.save_to_preset(tmp_path / "hf", format="transformers", preprocessing="imagenet")
    assert not (tmp_path / "hf" / "config.json").exists()
