"""Relative positions on the attention logits (`keras_vit.layers.relative_position`).

timm's relative position bias against NumPy written from timm's `RelPosMlp`
("cr" mode): a table of log-spaced coordinates of every offset `(2h - 1,
2w - 1)`, gathered through the relative position index of every pair of
patches, an MLP, zero rows and columns for the prefix tokens; then in the
attention's logits. The layers' contracts (`harness.run_layer_test` does not
fit a per-grid output: checked here by hand).

Windowed attention, decomposed relative positions and the convolutional
neck (SAM's image encoder) as `keras_vit.ViT` options: the layers against
NumPy, the options' checks, and timm's `samvit_*` Hub directories loaded
with `keras_vit.from_preset` against transformers' SAM vision encoder (the
same computation; timm is not installed)."""

import functools
import json

import keras
import numpy as np
import pytest
from conftest import to_numpy

import keras_vit
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.layers import MultiHeadSelfAttention, RelativePositionMlp, RelativePositionTable
from keras_vit.layers.config import BlockConfig
from keras_vit.layers.neck import ConvNeck
from keras_vit.layers.relative_position import (
    DecomposedRelativePosition,
    relative_log_coordinates,
    relative_table,
    window_merge,
    window_partition,
)
from sam_dirs import IMAGE_SIZE, sam_dir, timm_state, write_timm_samvit

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


# --- windows, decomposed relative positions, the neck (SAM) ---

def _numpy_relative(table, q_size, k_size):
    """The reference's rule in NumPy: resize linearly (half-pixel centres)
    to `2 max - 1` rows, then index by the scaled offset."""
    length = 2 * max(q_size, k_size) - 1
    if table.shape[0] != length:
        rows = table.shape[0]
        x = np.clip((np.arange(length) + 0.5) * rows / length - 0.5, 0, None)
        lo = np.minimum(np.floor(x).astype(int), rows - 1)
        hi = np.minimum(lo + 1, rows - 1)
        table = table[lo] * (1 - (x - lo))[:, None] + table[hi] * (x - lo)[:, None]
    q = np.arange(q_size)[:, None] * max(k_size / q_size, 1.0)
    k = np.arange(k_size)[None, :] * max(q_size / k_size, 1.0)
    return table[(q - k + (k_size - 1) * max(q_size / k_size, 1.0)).astype(int)]


@pytest.mark.parametrize("rows, queries, keys", [(7, 4, 4), (5, 4, 4), (9, 3, 3), (13, 7, 7), (9, 3, 5), (7, 4, 2)])
def test_relative_table_matches_numpy(rows, queries, keys):
    table = RNG.normal(size=(rows, 3)).astype("float32")
    out = keras.ops.convert_to_numpy(relative_table(table, queries, keys))
    # The resize's weights in float32 (as torch's interpolate), the reference's in float64.
    np.testing.assert_allclose(out, _numpy_relative(table, queries, keys), rtol=0, atol=1e-5)


def test_decomposed_bias_matches_numpy():
    layer = DecomposedRelativePosition(size=(2, 3), head_dim=4)
    layer.build()
    heights, widths = RNG.normal(size=(3, 4)), RNG.normal(size=(5, 4))
    layer.height.assign(heights)
    layer.width.assign(widths)
    q = RNG.normal(size=(1, 6, 2, 4)).astype("float32")
    bias = keras.ops.convert_to_numpy(layer(q, grid=(2, 3)))
    rh, rw = _numpy_relative(heights, 2, 2), _numpy_relative(widths, 3, 3)
    grid_q = q.reshape(1, 2, 3, 2, 4)
    expected = (np.einsum("byxnc,ykc->bnyxk", grid_q, rh)[..., :, None]
                + np.einsum("byxnc,xkc->bnyxk", grid_q, rw)[..., None, :]).reshape(1, 2, 6, 6)
    np.testing.assert_allclose(bias, expected, rtol=0, atol=1e-5)


def test_windows_cover_the_grid_once():
    tokens = RNG.normal(size=(2, 5 * 7, 3)).astype("float32")
    windows, padded = window_partition(tokens, (5, 7), 3)
    assert tuple(windows.shape) == (2 * 2 * 3, 9, 3) and padded == (6, 9)
    first = keras.ops.convert_to_numpy(windows)[0].reshape(3, 3, 3)
    np.testing.assert_array_equal(first, tokens[0].reshape(5, 7, 3)[:3, :3])
    back = keras.ops.convert_to_numpy(window_merge(windows, (5, 7), padded, 3))
    np.testing.assert_array_equal(back, tokens)


def test_neck_matches_numpy():
    neck = ConvNeck(channels=3, epsilon=1e-6)
    tokens = RNG.normal(size=(1, 6, 4)).astype("float32")
    out = keras.ops.convert_to_numpy(neck(tokens, grid=(2, 3)))
    k0, k1 = (keras.ops.convert_to_numpy(w) for w in (neck.conv_0.kernel, neck.conv_1.kernel))
    x = tokens.reshape(2, 3, 4) @ k0[0, 0]
    norm = lambda v: (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-6)  # noqa: E731
    x = np.pad(norm(x), ((1, 1), (1, 1), (0, 0)))
    y = sum(x[i:i + 2, j:j + 3] @ k1[i, j] for i in range(3) for j in range(3))
    np.testing.assert_allclose(out[0], norm(y).reshape(6, 3), rtol=0, atol=1e-5)


@pytest.mark.parametrize("options, message", [
    (dict(window_size=0), "window_size"),
    (dict(global_attention_blocks=(1,)), "needs `window_size`"),
    (dict(window_size=4, global_attention_blocks=("1",)), "global_attention_blocks"),
    (dict(relative_position="bias"), "relative_position"),
    (dict(window_size=4, rope="dinov3"), "cannot be combined with `rope`"),
    (dict(window_size=4, relative_position="mlp"), "\"decomposed\" relative positions only"),
])
def test_bad_window_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        BlockConfig(**options)


@pytest.mark.parametrize("options", [dict(relative_position="decomposed"),
                                     dict(relative_position="mlp", relative_position_size=(2, 2))])
def test_decomposed_attention_and_its_table_size_go_together(options):
    with pytest.raises(ValueError, match="relative_position_size"):
        MultiHeadSelfAttention(2, 4, **options)


def test_grid_options_need_a_model_without_prefix_tokens():
    with pytest.raises(ValueError, match="no class, distillation or register token"):
        keras_vit.ViT(image_size=32, patch_size=8, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=8,
                      window_size=2)


def test_windowed_model_saves_and_reloads(tmp_path):
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=8, num_layers=2, num_heads=2, mlp_dim=8,
                          classifier="gap", include_top=False, window_size=3, global_attention_blocks=(1,),
                          relative_position="decomposed", neck_channels=4)
    for variable in model.weights:
        variable.assign(RNG.normal(size=variable.shape))
    x = RNG.normal(size=(1, 32, 32, 3)).astype("float32")
    path = str(tmp_path / "sam.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    np.testing.assert_allclose(again.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6)
    assert again.get_config()["block_config"]["global_attention_blocks"] == (1,)


@functools.lru_cache(maxsize=None)
def _transformers_vision():
    """transformers' SAM vision encoder on two images: the neck's map, NHWC."""
    import torch

    _, model, _ = sam_dir()
    images = RNG.normal(size=(2, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
    with torch.no_grad():
        out = model.vision_encoder(torch.from_numpy(images.transpose(0, 3, 1, 2))).last_hidden_state
    return images, out.numpy().transpose(0, 2, 3, 1), model.state_dict()


@pytest.mark.parametrize("global_pool", ["avg", ""])
def test_timm_samvit_hub_directory_matches_the_sam_encoder(global_pool, tmp_path):
    pytest.importorskip("torch")
    images, expected, state = _transformers_vision()
    folder = write_timm_samvit(str(tmp_path / "samvit"), timm_state(state), global_pool=global_pool)
    model = keras_vit.from_preset(folder)
    out = model.predict(images, verbose=0)
    if global_pool == "avg":  # timm's head without classes: the map's mean
        np.testing.assert_allclose(out, expected.mean(axis=(1, 2)), rtol=0, atol=1e-4)
    else:
        np.testing.assert_allclose(out, expected.reshape(2, -1, expected.shape[-1]), rtol=0, atol=1e-4)
