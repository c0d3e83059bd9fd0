"""Layer tests: NumPy references, shapes, serialisation and argument checks."""

import numpy as np
import pytest
import scipy.ndimage

from conftest import to_numpy
from keras_vit import layers


def np_patches(images, ph, pw):
    """Patches by explicit slicing, flattened in (row, col, channel) order."""
    b, h, w, c = images.shape
    out = np.zeros((b, h // ph, w // pw, ph * pw * c), images.dtype)
    for i in range(h // ph):
        for j in range(w // pw):
            out[:, i, j] = images[:, i * ph : (i + 1) * ph, j * pw : (j + 1) * pw].reshape(b, -1)
    return out


def np_conv_embedding(images, kernel, bias):
    """The official embedding: a VALID convolution with stride = kernel size."""
    ph, pw, c, d = kernel.shape
    b, h, w, _ = images.shape
    out = np.zeros((b, h // ph, w // pw, d))
    for i in range(h // ph):
        for j in range(w // pw):
            window = images[:, i * ph : (i + 1) * ph, j * pw : (j + 1) * pw]
            out[:, i, j] = np.einsum("bxyc,xycd->bd", window, kernel) + bias
    return out


@pytest.mark.parametrize("patch_size,size", [(4, (8, 12)), ((2, 4), (6, 8))])
def test_patches_match_slicing(rng, patch_size, size):
    images = rng.normal(size=(2, *size, 3)).astype("float32")
    layer = layers.Patches(patch_size)
    out = layer(images)
    ph, pw = layer.patch_size
    np.testing.assert_array_equal(to_numpy(out), np_patches(images, ph, pw))


def test_patches_reject_indivisible_size():
    with pytest.raises(ValueError, match="patch_size"):
        layers.Patches(4)(np.zeros((1, 10, 8, 3), "float32"))


@pytest.mark.parametrize("bad", [0, -2, (4,), (4, 0), "4", 2.5, True])
def test_patches_reject_bad_patch_size(bad):
    with pytest.raises(ValueError, match="patch_size"):
        layers.Patches(bad)


def test_patch_encoder_equals_official_conv_embedding(rng):
    images = rng.normal(size=(2, 8, 12, 3)).astype("float32")
    encoder = layers.PatchEncoder(hidden_size=5, patch_size=4, grid_size=(2, 3))
    patches = layers.Patches(4)(images)
    out = to_numpy(encoder(patches))
    kernel, bias, cls, pos = (to_numpy(w) for w in encoder.weights)
    assert kernel.shape == (4, 4, 3, 5) and cls.shape == (1, 1, 5) and pos.shape == (1, 7, 5)
    tokens = np_conv_embedding(images, kernel, bias).reshape(2, 6, 5)
    expected = np.concatenate([np.repeat(cls, 2, axis=0), tokens], axis=1) + pos
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_patch_encoder_without_class_token(rng):
    encoder = layers.PatchEncoder(hidden_size=4, patch_size=2, grid_size=2, class_token=False)
    out = encoder(rng.normal(size=(1, 2, 2, 12)).astype("float32"))
    assert tuple(out.shape) == (1, 4, 4)
    assert [w.name for w in encoder.weights] == ["kernel", "bias", "pos_embedding"]


@pytest.mark.parametrize("new_grid", [(5, 5), (3, 7), (2, 2), (1, 4)])
def test_position_embedding_resize_equals_scipy_zoom(rng, new_grid):
    encoder = layers.PatchEncoder(hidden_size=6, patch_size=2, grid_size=(3, 4))
    encoder.build((None, 3, 4, 12))
    pos = rng.normal(size=(1, 13, 6)).astype("float32")
    encoder.pos_embedding.assign(pos)
    resized = to_numpy(encoder.position_embedding_for(new_grid))
    grid = pos[0, 1:].reshape(3, 4, 6).astype("float64")
    zoom = (new_grid[0] / 3, new_grid[1] / 4, 1)
    expected = scipy.ndimage.zoom(grid, zoom, order=1).reshape(1, -1, 6)
    np.testing.assert_array_equal(resized[:, :1], pos[:, :1])
    np.testing.assert_allclose(resized[:, 1:], expected, atol=1e-5)


def test_position_embedding_unchanged_on_built_grid(rng):
    encoder = layers.PatchEncoder(hidden_size=3, patch_size=2, grid_size=(2, 3))
    encoder.build((None, 2, 3, 12))
    np.testing.assert_array_equal(
        to_numpy(encoder.position_embedding_for((2, 3))), to_numpy(encoder.pos_embedding)
    )


def np_layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def np_gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def np_attention(x, w):
    q = np.einsum("btd,dhk->bthk", x, w["query/kernel"]) + w.get("query/bias", 0.0)
    k = np.einsum("btd,dhk->bthk", x, w["key/kernel"]) + w.get("key/bias", 0.0)
    v = np.einsum("btd,dhk->bthk", x, w["value/kernel"]) + w.get("value/bias", 0.0)
    logits = np.einsum("bqhk,bthk->bhqt", q, k) / np.sqrt(q.shape[-1])
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum("bhqt,bthk->bqhk", probs, v)
    return np.einsum("bqhk,hkd->bqd", context, w["out/kernel"]) + w["out/bias"], probs


def randomise(layer, rng):
    for v in layer.weights:
        v.assign(rng.normal(scale=0.5, size=v.shape).astype("float32"))


def weights_by_path(layer):
    prefix = layer.name + "/"
    return {v.path.split(prefix, 1)[-1]: to_numpy(v).astype("float64") for v in layer.weights}


def test_attention_matches_numpy(rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = layers.MultiHeadSelfAttention(num_heads=2, head_dim=4, name="mhsa")
    layer(x)
    randomise(layer, rng)
    w = weights_by_path(layer)
    assert w["query/kernel"].shape == (8, 2, 4) and w["out/kernel"].shape == (2, 4, 8)
    expected, probs = np_attention(x.astype("float64"), w)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=2e-5, rtol=1e-5)
    got_probs = to_numpy(layer.attention_probs(x))
    np.testing.assert_allclose(got_probs, probs, atol=1e-5)
    np.testing.assert_allclose(got_probs.sum(-1), 1.0, atol=1e-5)


def test_attention_without_qkv_bias(rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = layers.MultiHeadSelfAttention(num_heads=2, head_dim=4, qkv_bias=False, name="mhsa")
    layer(x)  # builds; the layer contract is checked in test_layer_contracts.py
    randomise(layer, rng)
    w = weights_by_path(layer)
    assert sorted(w) == ["key/kernel", "out/bias", "out/kernel", "query/kernel", "value/kernel"]
    np.testing.assert_allclose(to_numpy(layer(x)), np_attention(x.astype("float64"), w)[0], atol=2e-5, rtol=1e-5)
    assert layer.get_config()["qkv_bias"] is False
    with pytest.raises(ValueError, match="qkv_bias"):
        layers.MultiHeadSelfAttention(num_heads=2, head_dim=4, qkv_bias="no")


@pytest.mark.parametrize("approximate", [True, False])
def test_transformer_block_matches_paper_equations(rng, approximate):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    block = layers.TransformerBlock(
        num_heads=2, mlp_dim=16, layer_norm_epsilon=1e-6,
        mlp_activation="gelu_tanh" if approximate else "gelu", name="blk",
    )
    block(x)
    randomise(block, rng)
    w = weights_by_path(block)
    x64 = x.astype("float64")
    attn = {k.split("/", 1)[1]: v for k, v in w.items() if k.startswith("MultiHeadDotProductAttention_1/")}
    y = np_layer_norm(x64, w["LayerNorm_0/gamma"], w["LayerNorm_0/beta"], 1e-6)
    x1 = x64 + np_attention(y, attn)[0]  # eq. 2
    y = np_layer_norm(x1, w["LayerNorm_2/gamma"], w["LayerNorm_2/beta"], 1e-6)
    y = np_gelu(y @ w["MlpBlock_3/Dense_0/kernel"] + w["MlpBlock_3/Dense_0/bias"], approximate)
    expected = x1 + y @ w["MlpBlock_3/Dense_1/kernel"] + w["MlpBlock_3/Dense_1/bias"]  # eq. 3
    np.testing.assert_allclose(to_numpy(block(x)), expected, atol=5e-5, rtol=1e-5)


def test_transformer_block_layer_scale(rng):
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16, qkv_bias=False, layer_scale_init=1e-5, name="blk")
    block(x)  # builds; the layer contract is checked in test_layer_contracts.py
    assert np.allclose(to_numpy(block.attention_scale), 1e-5)
    randomise(block, rng)
    w = weights_by_path(block)
    x64 = x.astype("float64")
    attn = {k.split("/", 1)[1]: v for k, v in w.items() if k.startswith("MultiHeadDotProductAttention_1/")}
    assert "query/bias" not in attn
    y = np_layer_norm(x64, w["LayerNorm_0/gamma"], w["LayerNorm_0/beta"], 1e-6)
    x1 = x64 + w["attention_scale"] * np_attention(y, attn)[0]
    y = np_layer_norm(x1, w["LayerNorm_2/gamma"], w["LayerNorm_2/beta"], 1e-6)
    y = np_gelu(y @ w["MlpBlock_3/Dense_0/kernel"] + w["MlpBlock_3/Dense_0/bias"], True)
    expected = x1 + w["mlp_scale"] * (y @ w["MlpBlock_3/Dense_1/kernel"] + w["MlpBlock_3/Dense_1/bias"])
    np.testing.assert_allclose(to_numpy(block(x)), expected, atol=5e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="layer_scale_init"):
        layers.TransformerBlock(num_heads=2, mlp_dim=16, layer_scale_init=0.0)


def test_gelu_flavours_differ():
    # The two flavours are distinguishable, so the flag really reaches the MLP.
    x = np.linspace(-3, 3, 50, dtype="float32")[None, None]
    outs = []
    for approximate in (True, False):
        mlp = layers.MlpBlock(mlp_dim=50, activation="gelu_tanh" if approximate else "gelu")
        mlp.build((1, 1, 50))
        mlp.dense_0.kernel.assign(np.eye(50, dtype="float32"))
        mlp.dense_0.bias.assign(np.zeros(50, "float32"))
        mlp.dense_1.kernel.assign(np.eye(50, dtype="float32"))
        mlp.dense_1.bias.assign(np.zeros(50, "float32"))
        outs.append(to_numpy(mlp(x))[0, 0])
        np.testing.assert_allclose(outs[-1], np_gelu(x[0, 0].astype("float64"), approximate), atol=1e-6)
    assert np.abs(outs[0] - outs[1]).max() > 1e-4


def test_dropout_and_stochastic_depth_only_in_training(rng):
    x = rng.normal(size=(8, 5, 8)).astype("float32")
    block = layers.TransformerBlock(
        num_heads=2, mlp_dim=16, dropout_rate=0.3, attention_dropout_rate=0.3, stochastic_depth_rate=0.5
    )
    a, b = to_numpy(block(x)), to_numpy(block(x))
    np.testing.assert_array_equal(a, b)
    trained = to_numpy(block(x, training=True))
    assert np.abs(trained - a).max() > 1e-3
    # Stochastic depth drops whole samples' branches: with dropout off, a
    # dropped sample comes out exactly equal to its input.
    # 64 samples at rate 0.5: some are dropped and some kept with
    # overwhelming probability (each sample loses both branches w.p. 0.25).
    x = rng.normal(size=(64, 5, 8)).astype("float32")
    depth_only = layers.TransformerBlock(num_heads=2, mlp_dim=16, stochastic_depth_rate=0.5)
    out = to_numpy(depth_only(x, training=True))
    identical = [np.array_equal(out[i], x[i]) for i in range(len(x))]
    assert any(identical) and not all(np.allclose(out[i], x[i]) for i in range(len(x)))


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(num_heads=0, mlp_dim=4), "num_heads"),
        (dict(num_heads=2, mlp_dim=-1), "mlp_dim"),
        (dict(num_heads=2, mlp_dim=4, dropout_rate=1.5), "dropout_rate"),
        (dict(num_heads=2, mlp_dim=4, attention_dropout_rate=-0.1), "attention_dropout_rate"),
        (dict(num_heads=2, mlp_dim=4, stochastic_depth_rate=1.0), "stochastic_depth_rate"),
        (dict(num_heads=2, mlp_dim=4, layer_norm_epsilon=0), "layer_norm_epsilon"),
    ],
)
def test_transformer_block_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        layers.TransformerBlock(**kwargs)


def test_transformer_block_rejects_heads_not_dividing_width():
    with pytest.raises(ValueError, match="num_heads"):
        layers.TransformerBlock(num_heads=3, mlp_dim=4)(np.zeros((1, 2, 8), "float32"))


def test_token_pooling_modes(rng):
    x = rng.normal(size=(2, 5, 3)).astype("float32")
    expected = {
        "token": x[:, 0],
        "avg": x[:, 1:].mean(1),
        "max": x[:, 1:].max(1),
        # The official classifier's name for the patch-token average.
        "gap": x[:, 1:].mean(1),
    }
    for mode, want in expected.items():
        out = layers.TokenPooling(mode, num_prefix_tokens=1)(x)
        np.testing.assert_allclose(to_numpy(out), want, atol=1e-6)
    with pytest.raises(ValueError, match="mode"):
        layers.TokenPooling("mean")


def test_attention_error_names_its_own_argument():
    with pytest.raises(ValueError, match=r"`dropout_rate` must be.*dropout_rate=1\.5"):
        layers.MultiHeadSelfAttention(num_heads=2, head_dim=4, dropout_rate=1.5)
