"""The block and encoder options of later checkpoints, in a whole `ViT`.

MAP pooling (SigLIP), the SwiGLU MLP (DINOv2-giant), QK-norm (ViT-22B), the
fixed sin-cos position embedding (MAE) and each family's position
interpolation: each wired through the option records, checked against an
independent computation (NumPy, or the option's layer applied by hand to the
model's own intermediate tensors), then all together through `.keras`
saving and ONNX export. The layers themselves are checked against
transformers in test_map_head.py, test_swiglu.py, test_qk_norm.py,
test_sincos.py and test_posemb_interpolation.py.
"""

import os

import keras
import numpy as np
import pytest
from conftest import spread, TINY, to_numpy

import keras_vit
from keras_vit import export
from keras_vit.layers.interpolation import interpolate_position_embedding
from keras_vit.layers.map_head import MapHead
from keras_vit.layers.sincos import sincos_position_embedding
from keras_vit.layers.swiglu import SwiGluMlp

pytestmark = spread("each option is a layer held on every backend by its layer contract; the options together, "
                    "each case once")

ALL_OPTIONS = dict(
    classifier="map", mlp_kind="swiglu", qk_norm=True, position_embedding="sincos",
    position_interpolation="dinov2",
)
# The block options of timm's zoo, in two combinations (parallel blocks
# have one norm, so no post-norm).
TIMM_OPTIONS = {
    "post-differential": dict(norm_position="post", differential_attention=True, final_norm=False,
                              classifier="gap", class_token=True),
    "post-relpos": dict(norm_position="post", relative_position="mlp", relative_position_dim=8,
                        position_embedding="none", classifier="gap", class_token=True),
    "grouped-query-qk-norm": dict(num_kv_heads=(2, 1), qk_norm=True, norm_kind="rmsnorm", rope="dinov3",
                                  position_embedding="none", num_register_tokens=2),
    "parallel-shared-relpos": dict(
        parallel=True, layer_scale_init=0.1, relative_position="shared_mlp", relative_position_dim=8,
        position_embedding="none", classifier="gap"),
}
RNG = np.random.default_rng(0)


def _images(size=32, batch=2):
    return RNG.normal(size=(batch, size, size, 3)).astype("float32")


def _randomise(model, scale=0.3):
    # Zero-initialised heads and unit norms hide wiring mistakes.
    rng = np.random.default_rng(3)
    for weight in model.weights:
        weight.assign(rng.normal(scale=scale, size=weight.shape).astype(weight.dtype))
    return model


def _layer_norm(x, gamma, beta, epsilon=1e-6):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + epsilon) * gamma + beta


def test_map_pooling_is_the_map_head_on_the_encoder_output():
    model = _randomise(keras_vit.ViT(**TINY, include_top=False, pooling="map", classifier="map"))
    assert isinstance(model.get_layer("pool"), MapHead) and model.num_prefix_tokens == 0
    assert "embedding/cls" not in {w.path for w in model.weights}
    x = _images()
    tokens = keras.Model(model.input, model.get_layer("encoder_norm").output)(x)
    assert tokens.shape[1] == 16  # no class token
    np.testing.assert_allclose(
        to_numpy(model(x)), to_numpy(model.get_layer("pool")(tokens)), atol=1e-5, rtol=0
    )


def test_map_classifier_with_a_class_token():
    model = _randomise(keras_vit.ViT(**TINY, classes=3, classifier="map", class_token=True))
    assert model.num_prefix_tokens == 1 and "embedding/cls" in {w.path for w in model.weights}
    x = _images()
    tokens = keras.Model(model.input, model.get_layer("encoder_norm").output)(x)
    assert tokens.shape[1] == 17
    pooled = to_numpy(model.get_layer("pool")(tokens))
    head = model.get_layer("head")
    logits = pooled @ to_numpy(head.kernel) + to_numpy(head.bias)
    np.testing.assert_allclose(to_numpy(model(x)), to_numpy(keras.ops.softmax(logits)), atol=1e-5)


def _block_input(model, x):
    return keras.Model(model.input, model.get_layer("dropout").output)(x)


def test_swiglu_blocks():
    model = _randomise(keras_vit.ViT(**TINY, include_top=False, mlp_kind="swiglu"))
    block = model.get_layer("encoderblock_0")
    assert isinstance(block.mlp, SwiGluMlp) and block.mlp_kind == "swiglu"
    x = to_numpy(_block_input(model, _images()))
    after_attention = x + to_numpy(block.attention(block.norm_0(x)))
    y = to_numpy(block.norm_2(after_attention))
    weights = {n: [to_numpy(w) for w in getattr(block.mlp, n).weights] for n in ("gate", "up", "down")}
    gate = y @ weights["gate"][0] + weights["gate"][1]
    hidden = gate / (1.0 + np.exp(-gate)) * (y @ weights["up"][0] + weights["up"][1])
    expected = after_attention + hidden @ weights["down"][0] + weights["down"][1]
    np.testing.assert_allclose(to_numpy(block(x)), expected, atol=1e-4, rtol=1e-4)


def test_qk_norm_attention_matches_numpy():
    model = _randomise(keras_vit.ViT(**TINY, include_top=False, qk_norm=True))
    attention = model.get_layer("encoderblock_1").attention
    x = RNG.normal(size=(2, 5, 16)).astype("float32")
    w = {layer: [to_numpy(v) for v in getattr(attention, layer).weights] for layer in ("query", "key", "value", "out")}
    heads, head_dim = 2, 8
    q, k, v = (np.einsum("btd,dhk->bthk", x, w[n][0]) + w[n][1] for n in ("query", "key", "value"))
    norms = attention.qk_norm
    q = _layer_norm(q, *(to_numpy(t) for t in (norms.query_norm.gamma, norms.query_norm.beta)))
    k = _layer_norm(k, *(to_numpy(t) for t in (norms.key_norm.gamma, norms.key_norm.beta)))
    logits = np.einsum("bqhk,bthk->bhqt", q, k) / np.sqrt(head_dim)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum("bhqt,bthk->bqhk", probs, v)
    expected = np.einsum("bthk,hkd->btd", context, w["out"][0]) + w["out"][1]
    assert heads == attention.num_heads
    np.testing.assert_allclose(to_numpy(attention(x)), expected, atol=1e-4, rtol=1e-4)
    # Without the norms the same weights give other numbers.
    plain = keras_vit.layers.MultiHeadSelfAttention(2, 8)
    plain.build(x.shape)
    for a, b in zip(plain.weights, [t for n in ("query", "key", "value", "out") for t in w[n]]):
        a.assign(b)
    assert np.abs(to_numpy(plain(x)) - expected).max() > 1e-3


def test_sincos_position_embedding_has_no_weight_and_follows_the_grid():
    model = keras_vit.ViT(**TINY, include_top=False, position_embedding="sincos")
    embedding = model.get_layer("embedding")
    assert embedding.pos_embedding is None
    assert not any("pos_embedding" in w.path for w in model.weights)
    for size in (32, 48):
        grid = (size // 8, size // 8)
        table = to_numpy(sincos_position_embedding(grid, 16, "mae"))
        np.testing.assert_allclose(to_numpy(embedding.position_embedding_for(grid)), table, atol=1e-6)
        patches = model.get_layer("patches")(_images(size))
        tokens = to_numpy(embedding.embed_patches(patches))
        cls = np.broadcast_to(to_numpy(embedding.class_embedding), (2, 1, 16))
        expected = np.concatenate([cls, tokens], axis=1) + table
        np.testing.assert_allclose(to_numpy(embedding(patches)), expected, atol=1e-5)
        assert model(_images(size)).shape == (2, 1 + grid[0] * grid[1], 16)


def test_family_interpolation_on_the_fly_and_for_inference():
    model = _randomise(keras_vit.ViT(**TINY, classes=4, position_interpolation="dinov2"))
    embedding = model.get_layer("embedding")
    table = to_numpy(embedding.pos_embedding)
    resized = to_numpy(embedding.position_embedding_for((6, 5)))
    expected = to_numpy(interpolate_position_embedding(table, (6, 5), (4, 4), 1, "dinov2"))
    np.testing.assert_allclose(resized, expected, atol=1e-6)
    official = to_numpy(interpolate_position_embedding(table, (6, 5), (4, 4), 1, "official"))
    assert np.abs(resized - official).max() > 1e-3
    x = _images(48)
    fast = model.for_inference(image_size=48)
    np.testing.assert_allclose(to_numpy(fast(x)), to_numpy(model(x)), atol=1e-5)


def test_all_options_survive_config_and_keras_saving(tmp_path):
    model = _randomise(keras_vit.ViT(**TINY, classes=3, **ALL_OPTIONS))
    config = model.get_config()
    assert config["block_config"]["mlp_kind"] == "swiglu" and config["block_config"]["qk_norm"]
    assert config["encoder_config"]["position_embedding"] == "sincos"
    assert config["encoder_config"]["position_interpolation"] == "dinov2"
    x = _images()
    expected = to_numpy(model(x))
    clone = keras_vit.ViT.from_config(config)
    assert clone.get_config() == config
    path = os.path.join(tmp_path, "options.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(x)), expected, atol=1e-6)
    np.testing.assert_allclose(to_numpy(loaded(_images(40)))[0].sum(), 1.0, atol=1e-5)


@pytest.mark.parametrize("case", sorted(TIMM_OPTIONS))
def test_timm_block_options_survive_config_and_keras_saving_and_export(case, tmp_path):
    """The options are checked against timm itself in test_timm_zoo.py; here
    they round-trip through the config and `.keras` file and export to ONNX."""
    model = _randomise(keras_vit.ViT(**TINY, classes=3, classifier_activation=None, **TIMM_OPTIONS[case]))
    config = model.get_config()
    assert keras_vit.ViT.from_config(config).get_config() == config
    x = _images(batch=3)
    expected = to_numpy(model(x))
    path = os.path.join(tmp_path, "options.keras")
    model.save(path)
    np.testing.assert_allclose(to_numpy(keras.saving.load_model(path)(x)), expected, atol=1e-5)
    assert to_numpy(model(_images(40))).shape == (2, 3)  # another grid
    if "onnx" in export.BACKEND_FORMATS.get(keras.backend.backend(), ()):
        onnx = model.export(str(tmp_path / "options.onnx"), format="onnx")
        diff, outputs, _ = export.verify_export(onnx, "onnx", model, x)
        assert outputs.shape == (3, 3) and diff <= 1e-4, diff


@pytest.mark.parametrize("option", [dict(mlp_kind="swiglu"), dict(qk_norm=True), dict(classifier="map"),
                                    dict(position_embedding="sincos")])
def test_transformers_export_refuses_the_options_its_vit_lacks(option, tmp_path):
    model = keras_vit.ViT(**TINY, classes=3, **option)
    with pytest.raises(ValueError, match="transformers has no ViT that represents this model"):
        model.save_to_preset(str(tmp_path / "hf"), format="transformers")
    assert not os.path.exists(tmp_path / "hf" / "config.json")


def test_bad_option_values_are_named():
    for name, value in (("mlp_kind", "geglu"), ("position_embedding", "sin"),
                        ("position_interpolation", "bicubic"), ("qk_norm", "yes"), ("class_token", 2),
                        ("norm_position", "middle"), ("parallel", 1), ("differential_attention", "yes"),
                        ("relative_position", "bias"), ("relative_position_dim", 0), ("final_norm", None),
                        ("num_kv_heads", 0), ("num_kv_heads", (2, 2, 2)), ("num_kv_heads", 3),
                        ("crop_to_patches", "yes")):
        with pytest.raises(ValueError, match=name):
            keras_vit.ViT(**TINY, **{name: value})
    with pytest.raises(ValueError, match="classifier"):
        keras_vit.ViT(**TINY, classifier="mapp")
    with pytest.raises(ValueError, match="parallel=True. needs .norm_position='pre'"):
        keras_vit.ViT(**TINY, parallel=True, norm_position="post")
    with pytest.raises(ValueError, match="multiple of 8"):
        keras_vit.ViT(**TINY)(np.zeros((1, 36, 32, 3), "float32"))
    cropping = keras_vit.ViT(**dict(TINY, image_size=36), crop_to_patches=True)
    assert cropping.grid_size == (4, 4) and tuple(cropping(np.zeros((1, 38, 33, 3), "float32")).shape) == (1, 1000)
    with pytest.raises(ValueError, match="relative_position. and .rope. cannot be combined"):
        keras_vit.ViT(**TINY, relative_position="mlp", rope="dinov3")
    with pytest.raises(ValueError, match="relative_position. and .differential_attention. cannot be combined"):
        keras_vit.ViT(**TINY, relative_position="mlp", differential_attention=True)


@pytest.mark.skipif("onnx" not in export.BACKEND_FORMATS.get(keras.backend.backend(), ()),
                    reason="this backend exports no ONNX")
def test_all_options_export_to_onnx(tmp_path):
    model = _randomise(keras_vit.ViT(**TINY, classes=3, classifier_activation=None, **ALL_OPTIONS))
    path = model.export(str(tmp_path / "options.onnx"), format="onnx")
    x = _images(batch=3)
    diff, outputs, expected = export.verify_export(path, "onnx", model, x)
    assert outputs.shape == (3, 3) and diff <= 1e-4, diff
    assert np.abs(expected[0] - expected[1]).max() > 1e-3
