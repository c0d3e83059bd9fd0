"""The relative position bias (`keras_vit.layers.relative_position`) against
NumPy written from timm's `RelPosMlp` ("cr" mode): a table of log-spaced
coordinates of every offset `(2h - 1, 2w - 1)`, gathered through the
relative position index of every pair of patches, an MLP, zero rows and
columns for the prefix tokens; then in the attention's logits. The layers'
contracts (`harness.run_layer_test` does not fit a per-grid output: checked
here by hand)."""

import json

import keras
import numpy as np
import pytest
from conftest import to_numpy

import keras_vit
from keras_vit.layers import MultiHeadSelfAttention, RelativePositionMlp, RelativePositionTable
from keras_vit.layers.relative_position import relative_log_coordinates

RNG = np.random.default_rng(0)


def _timm_table_and_index(h, w):
    """timm's `gen_relative_log_coords(mode="cr")` and `gen_relative_position_index`."""
    dy = np.arange(-(h - 1), h, dtype="float64")
    dx = np.arange(-(w - 1), w, dtype="float64")
    table = np.stack(np.meshgrid(dy, dx, indexing="ij"), axis=-1)  # (2h-1, 2w-1, 2)
    table = np.sign(table) * np.log1p(np.abs(table))
    coords = np.stack(np.meshgrid(np.arange(h), np.arange(w), indexing="ij")).reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0)
    index = (rel[..., 0] + h - 1) * (2 * w - 1) + rel[..., 1] + w - 1
    return table, index


def _mlp(x, weights):
    k0, b0, k1, b1 = weights
    return np.maximum(x @ k0 + b0, 0) @ k1 + b1


def _bias(mlp, h, w, prefix=0):
    """`(heads, P + N, P + N)`: the MLP on timm's table, gathered, padded."""
    table, index = _timm_table_and_index(h, w)
    heads = mlp.num_heads
    values = _mlp(table.reshape(-1, 2), [to_numpy(v).astype("float64") for v in mlp.weights])
    bias = values.reshape(-1, heads)[index.reshape(-1)].reshape(h * w, h * w, heads).transpose(2, 0, 1)
    return np.pad(bias, ((0, 0), (prefix, 0), (prefix, 0)))


def _randomise(layer, scale=0.5):
    rng = np.random.default_rng(1)
    for weight in layer.weights:
        weight.assign(rng.normal(scale=scale, size=weight.shape).astype("float32"))
    return layer


@pytest.mark.parametrize("grid", [(2, 3), (3, 3)])
def test_coordinates_and_mlp_are_timms_gathered_table(grid):
    mlp = _randomise(RelativePositionMlp(num_heads=3, hidden_dim=8))
    out = to_numpy(mlp(relative_log_coordinates(grid)))
    np.testing.assert_allclose(out, _bias(mlp, *grid), atol=1e-5, rtol=0)


def test_shared_table_holds_the_mlp_and_the_other_hands_out_coordinates():
    shared = RelativePositionTable(num_heads=2, hidden_dim=4, shared=True)
    shared(np.zeros((1, 2, 3, 5), "float32"))
    _randomise(shared)
    np.testing.assert_allclose(to_numpy(shared.tables((2, 3))), _bias(shared.mlp, 2, 3), atol=1e-5, rtol=0)
    plain = RelativePositionTable(num_heads=2)
    assert not plain.weights
    np.testing.assert_allclose(to_numpy(plain(np.zeros((1, 2, 3, 5), "float32"))),
                               to_numpy(relative_log_coordinates((2, 3))))


@pytest.mark.parametrize("mode", ["mlp", "shared_mlp"])
def test_attention_adds_the_bias_to_its_logits(mode):
    """Softmax of `q k / sqrt(d) + bias`, the bias zero for the class token."""
    heads, head_dim, grid = 2, 4, (2, 2)
    layer = MultiHeadSelfAttention(heads, head_dim, relative_position=mode, relative_position_dim=8)
    x = RNG.normal(size=(2, 5, heads * head_dim)).astype("float32")
    table = RelativePositionTable(heads, 8, shared=mode == "shared_mlp")
    tables = table.tables(grid)
    layer(x, rope=tables)
    _randomise(layer, 0.3)
    if mode == "shared_mlp":
        _randomise(table)
        tables = table.tables(grid)
    mlp = layer.rel_pos if mode == "mlp" else table.mlp
    w = {n: [to_numpy(v) for v in getattr(layer, n).weights] for n in ("query", "key", "value", "out")}
    q, k, v = (np.einsum("btd,dhk->bthk", x, w[n][0]) + w[n][1] for n in ("query", "key", "value"))
    logits = np.einsum("bqhk,bthk->bhqt", q, k) / np.sqrt(head_dim) + _bias(mlp, *grid, prefix=1)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    expected = np.einsum("bthk,hkd->btd", np.einsum("bhqt,bthk->bqhk", probs, v), w["out"][0]) + w["out"][1]
    np.testing.assert_allclose(to_numpy(layer(x, rope=tables)), expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(to_numpy(layer(x, rope=tables, query_tokens=1)), expected[:, :1], atol=1e-5)
    with pytest.raises(ValueError, match="relative position bias"):
        layer(x)


@pytest.mark.parametrize("make", [
    lambda **kw: RelativePositionMlp(num_heads=2, hidden_dim=8, **kw),
    lambda **kw: RelativePositionTable(num_heads=2, hidden_dim=8, shared=True, **kw),
])
def test_layer_contract_config_mixed_precision_and_gradients(make):
    """What `harness.run_layer_test` checks, for a layer whose output is per
    grid: config and serialisation round trips, mixed precision, a gradient
    for every weight."""
    layer = make()
    inputs = relative_log_coordinates((2, 3)) if isinstance(layer, RelativePositionMlp) else np.zeros(
        (1, 2, 3, 4), "float32")
    expected = to_numpy(layer(inputs))
    assert expected.shape == tuple(layer.compute_output_shape(tuple(inputs.shape))) == (2, 6, 6)
    config = layer.get_config()
    restored = keras.saving.deserialize_keras_object(json.loads(json.dumps(keras.saving.serialize_keras_object(layer))))
    assert restored.get_config() == config
    restored(inputs)
    for a, b in zip(layer.weights, restored.weights):
        b.assign(a)
    np.testing.assert_allclose(to_numpy(restored(inputs)), expected, atol=1e-6)
    mixed = make(dtype="mixed_bfloat16")
    mixed(inputs)
    for a, b in zip(layer.weights, mixed.weights):
        b.assign(a)
    assert all(keras.backend.standardize_dtype(w.dtype) == "float32" for w in mixed.weights)
    np.testing.assert_allclose(to_numpy(mixed(inputs)).astype("float32"), expected, atol=0.1)
    # Every weight moves the output (finite differences of a squared sum).
    _randomise(layer)
    base = float((to_numpy(layer(inputs)).astype("float64") ** 2).sum())
    for weight in layer.weights:
        value = to_numpy(weight)
        weight.assign(value + 1e-2)
        assert abs(float((to_numpy(layer(inputs)).astype("float64") ** 2).sum()) - base) > 1e-6, weight.path
        weight.assign(value)


def test_a_model_with_relative_positions_takes_any_grid_and_saves(tmp_path):
    model = keras_vit.ViT(image_size=16, patch_size=4, hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16,
                          classes=3, class_token=True, classifier="gap", position_embedding="none",
                          relative_position="shared_mlp", relative_position_dim=8)
    assert [w.path for w in model.get_layer("rel_pos").weights][0] == "rel_pos/mlp/Dense_0/kernel"
    x = RNG.normal(size=(2, 20, 12, 3)).astype("float32")
    expected = to_numpy(model(x))
    path = str(tmp_path / "relpos.keras")
    model.save(path)
    np.testing.assert_allclose(to_numpy(keras.saving.load_model(path)(x)), expected, atol=1e-6)
