"""CLIP's encoder options (a LayerNorm before the blocks, a patch embedding
without bias, quick GELU) and models without class token: numerics against
the NumPy reference and against transformers' CLIP vision tower (weights
copied in by hand), `.keras` round trips, ONNX export, and the forward pass
that inspection and pre-training share."""

import os

import keras
import numpy as np
import pytest

import keras_vit
import reference
from conftest import TINY, spread, to_numpy
from families import make_model
from keras_vit import export, pretraining
from keras_vit.weights.mapping import model_state

pytestmark = spread("CLIP's options are layers held on every backend by their contracts; each case once")

OPTIONS = {
    "pre_norm": dict(pre_norm=True),
    "no_patch_bias": dict(patch_bias=False),
    "quick_gelu": dict(mlp_activation="quick_gelu"),
    # No class token, mean of the patch tokens, with every option.
    "gap_every_option": dict(
        classifier="gap", pre_norm=True, patch_bias=False, mlp_activation="quick_gelu",
        num_register_tokens=2, pooled_norm=True, qkv_bias=False, layer_scale_init=0.1,
    ),
}


def _model(options, **extra):
    """A two-block ViT of the registry (tests/families.py) with `options`, every weight moved."""
    return make_model("vit", num_layers=2, classes=5, scale=0.3, **options, **extra)


def _images(n=2, size=32):
    return np.random.default_rng(1).uniform(-1, 1, (n, size, size, 3)).astype("float32")


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_options_match_the_numpy_reference(kind):
    model = _model(OPTIONS[kind])
    x = _images()
    expected = reference.forward(model_state(model), x, model.mlp_activation, model.layer_norm_epsilon)
    np.testing.assert_allclose(to_numpy(model(x)), expected, rtol=0, atol=3e-5)


def test_the_options_change_the_model():
    paths = lambda m: {v.path for v in m.weights}  # noqa: E731
    plain, pre, unbiased = (keras_vit.ViT(**TINY, **o) for o in ({}, dict(pre_norm=True), dict(patch_bias=False)))
    assert paths(pre) - paths(plain) == {"pre_norm/gamma", "pre_norm/beta"}
    assert paths(plain) - paths(unbiased) == {"embedding/bias"}
    # Quick GELU is another function than either GELU (x * sigmoid(1.702 x)).
    x = np.linspace(-3, 3, 13)
    quick = reference.activation(x, "quick_gelu")
    np.testing.assert_allclose(quick, x / (1 + np.exp(-1.702 * x)))
    assert np.abs(quick - reference.activation(x, "gelu")).max() > 1e-3
    mlp = keras_vit.layers.MlpBlock(mlp_dim=13, activation="quick_gelu")
    mlp.build((1, 1, 13))
    for dense in (mlp.dense_0, mlp.dense_1):
        dense.kernel.assign(np.eye(13, dtype="float32"))
        dense.bias.assign(np.zeros(13, "float32"))
    np.testing.assert_allclose(to_numpy(mlp(x[None, None].astype("float32")))[0, 0], quick, atol=1e-6)


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_keras_file_round_trip(kind, tmp_path):
    model = _model(OPTIONS[kind])
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(to_numpy(loaded(_images())), to_numpy(model(_images())))


def test_onnx_export_with_every_option(tmp_path):
    if "onnx" not in export.BACKEND_FORMATS.get(keras.backend.backend(), ()):
        pytest.skip(f"keras_vit exports no ONNX on {keras.backend.backend()}")
    pytest.importorskip("onnxruntime")
    for kind in ("gap_every_option", "quick_gelu"):
        model = _model(OPTIONS[kind])
        path = model.export(str(tmp_path / f"{kind}.onnx"), format="onnx")
        diff, outputs, _ = export.verify_export(path, "onnx", model, _images(3))
        assert outputs.shape == (3, 5) and diff <= 1e-4, (kind, diff)


def _clip_pair():
    """A tiny transformers `CLIPVisionModel` at random and the keras_vit
    model with its weights, copied tensor by tensor."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.CLIPVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        image_size=32, patch_size=8, hidden_act="quick_gelu", layer_norm_eps=1e-5,
    )
    torch.manual_seed(0)
    clip = transformers.CLIPVisionModel(config).eval()
    with torch.no_grad():
        for p in clip.parameters():  # LayerNorms start at one and zero
            p.add_(torch.randn_like(p) * 0.3)
    state = {k.removeprefix("vision_model."): v.numpy() for k, v in clip.state_dict().items()}
    model = keras_vit.ViT(
        image_size=32, patch_size=8, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
        include_top=False, pooling="token", pooled_norm=True, pre_norm=True, patch_bias=False,
        mlp_activation="quick_gelu", layer_norm_epsilon=1e-5,
    )
    values = {
        "embedding/kernel": state["embeddings.patch_embedding.weight"].transpose(2, 3, 1, 0),
        "embedding/cls": state["embeddings.class_embedding"].reshape(1, 1, -1),
        "embedding/pos_embedding": state["embeddings.position_embedding.weight"][None],
        "pre_norm/gamma": state["pre_layrnorm.weight"], "pre_norm/beta": state["pre_layrnorm.bias"],
        "fc_norm/gamma": state["post_layernorm.weight"], "fc_norm/beta": state["post_layernorm.bias"],
    }
    for i in range(2):
        src, dst = f"encoder.layers.{i}.", f"encoderblock_{i}/"
        for ours, theirs in (("LayerNorm_0", "layer_norm1"), ("LayerNorm_2", "layer_norm2")):
            values[dst + ours + "/gamma"] = state[src + theirs + ".weight"]
            values[dst + ours + "/beta"] = state[src + theirs + ".bias"]
        attention = dst + "MultiHeadDotProductAttention_1/"
        for ours, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            values[attention + ours + "/kernel"] = state[src + f"self_attn.{theirs}.weight"].T.reshape(16, 2, 8)
            values[attention + ours + "/bias"] = state[src + f"self_attn.{theirs}.bias"].reshape(2, 8)
        values[attention + "out/kernel"] = state[src + "self_attn.out_proj.weight"].T.reshape(2, 8, 16)
        values[attention + "out/bias"] = state[src + "self_attn.out_proj.bias"]
        for ours, theirs in (("Dense_0", "fc1"), ("Dense_1", "fc2")):
            values[dst + f"MlpBlock_3/{ours}/kernel"] = state[src + f"mlp.{theirs}.weight"].T
            values[dst + f"MlpBlock_3/{ours}/bias"] = state[src + f"mlp.{theirs}.bias"]
    assert {v.path for v in model.weights} == set(values)
    for v in model.weights:
        v.assign(values[v.path])
    return torch, clip, model


def test_clip_vision_tower_from_transformers():
    """pre_norm + patch_bias=False + quick GELU + the class token's pooled
    norm is CLIP's vision tower: its `last_hidden_state` is
    `forward_features`, its `pooler_output` the model's output."""
    torch, clip, model = _clip_pair()
    x = _images(2)
    with torch.no_grad():
        out = clip(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))
    np.testing.assert_allclose(to_numpy(model.forward_features(x)), out.last_hidden_state.numpy(), atol=1e-4)
    np.testing.assert_allclose(to_numpy(model(x)), out.pooler_output.numpy(), atol=1e-4)
    # Hidden states after each block are the features of the one forward pass.
    with torch.no_grad():
        hidden = clip(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), output_hidden_states=True)
    features = model.forward_intermediates(x, output_fmt="NLC", intermediates_only=True)
    for feature, theirs in zip(features, hidden.hidden_states[1:]):
        np.testing.assert_allclose(to_numpy(feature), theirs.numpy()[:, 1:], atol=1e-4)


def test_inspection_and_pretraining_run_the_pre_norm():
    """Both consume the model's forward pass, so the norm before the blocks
    reaches them without code of theirs."""
    encoder = _model(dict(pre_norm=True, patch_bias=False), include_top=False)
    task = pretraining.MaskedPatchPrediction(encoder, target="pixels", seed=0)
    images = np.random.default_rng(2).integers(0, 256, (2, 32, 32, 3)).astype("float32")
    tokens, grid = task.embed(images)
    scaled = keras_vit.preprocess_input(images, mode="inception")
    expected = to_numpy(encoder.forward_features(scaled))[:, encoder.num_prefix_tokens :]
    np.testing.assert_allclose(to_numpy(task.encode(tokens, grid)), expected, atol=1e-5)
    x = _images(1)
    maps = keras_vit.inspection.attention_maps(encoder, x, layers=[0])
    first = encoder.get_layer("pre_norm")(encoder.get_layer("embedding")(encoder.get_layer("patches")(x)))
    probs = to_numpy(encoder.encoder_blocks[0].attention_probs(first))
    np.testing.assert_allclose(maps[0], probs, atol=1e-6)


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_transformers_export_refuses_what_its_vit_lacks(kind, tmp_path):
    model = _model(OPTIONS[kind], class_names=list("abcde"), preprocessing=dict(mean=[0.5] * 3, std=[0.5] * 3))
    with pytest.raises(ValueError, match="transformers has no ViT that represents this model"):
        model.save_to_preset(str(tmp_path / "hf"), format="transformers")
    assert not os.path.exists(tmp_path / "hf" / "config.json")
