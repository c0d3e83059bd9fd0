"""Windowed attention, decomposed relative positions and the convolutional
neck (SAM's image encoder) as `keras_vit.ViT` options: the layers against
NumPy, the options' checks, and timm's `samvit_*` Hub directories loaded
with `keras_vit.from_preset` against transformers' SAM vision encoder (the
same computation; timm is not installed)."""

import functools

import keras
import numpy as np
import pytest

import keras_vit
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.layers.config import BlockConfig
from keras_vit.layers.neck import ConvNeck
from keras_vit.layers.relative_position import (
    DecomposedRelativePosition,
    relative_table,
    window_merge,
    window_partition,
)
from sam_dirs import IMAGE_SIZE, sam_dir, timm_state, write_timm_samvit

RNG = np.random.default_rng(0)


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


@pytest.mark.parametrize("rows, size", [(7, 4), (5, 4), (9, 3)])
def test_relative_table_matches_numpy(rows, size):
    table = RNG.normal(size=(rows, 3)).astype("float32")
    out = keras.ops.convert_to_numpy(relative_table(table, size, size))
    np.testing.assert_allclose(out, _numpy_relative(table, size, size), rtol=0, atol=1e-6)


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
])
def test_bad_window_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        BlockConfig(**options)


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
