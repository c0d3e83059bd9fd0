"""Fixed sin-cos position embeddings against transformers' ViT-MAE and NumPy."""

import keras
import numpy as np
import pytest

from keras_vit.layers.sincos import sincos_position_embedding

torch = pytest.importorskip("torch", reason="transformers' ViT-MAE is the reference")


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def test_equals_the_table_of_transformers_vit_mae_model():
    from transformers import ViTMAEConfig, ViTMAEModel

    config = ViTMAEConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
        image_size=56, patch_size=4,
    )
    embeddings = ViTMAEModel(config).embeddings
    # transformers 5 leaves the table at zero when it builds a model whose
    # weights it marks as initialised; `initialize_weights` writes it.
    embeddings.patch_embeddings.projection._is_hf_initialized = False
    embeddings.initialize_weights()
    expected = embeddings.position_embeddings.detach().numpy()
    assert expected.shape == (1, 1 + 14 * 14, 32) and np.abs(expected).max() > 0.5
    table = _numpy(sincos_position_embedding((14, 14), 32, "mae", num_prefix_rows=1))
    np.testing.assert_allclose(table, expected, atol=1e-6, rtol=0)


def test_non_square_grid_equals_transformers_function():
    from transformers.models.vit_mae.modeling_vit_mae import build_2d_sinusoidal_position_embedding

    reference = build_2d_sinusoidal_position_embedding(5, 7, embed_dim=16, cls_token=True).numpy()
    # ViTMAEEmbeddings rotates the halves to MAE's [x | y] order.
    reference = np.concatenate([reference[:, 8:], reference[:, :8]], axis=-1)
    table = _numpy(sincos_position_embedding((5, 7), 16, "mae"))
    np.testing.assert_allclose(table[0], reference, atol=1e-6, rtol=0)


def _mocov3(h, w, dim, temperature=10000.0):
    # MoCo v3's build_2d_sincos_position_embedding, in NumPy float64.
    grid_w, grid_h = np.meshgrid(np.arange(w, dtype="float64"), np.arange(h, dtype="float64"), indexing="ij")
    omega = 1.0 / temperature ** (np.arange(dim // 4) / (dim // 4))
    out_w = np.einsum("m,d->md", grid_w.flatten(), omega)
    out_h = np.einsum("m,d->md", grid_h.flatten(), omega)
    table = np.concatenate([np.sin(out_w), np.cos(out_w), np.sin(out_h), np.cos(out_h)], axis=1)
    return np.concatenate([np.zeros((1, dim)), table])


def _big_vision(h, w, dim, temperature=10000.0):
    # big_vision's posemb_sincos_2d, in NumPy float64.
    y, x = np.mgrid[:h, :w]
    omega = 1.0 / temperature ** (np.arange(dim // 4) / (dim // 4 - 1))
    y = np.einsum("m,d->md", y.flatten(), omega)
    x = np.einsum("m,d->md", x.flatten(), omega)
    return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)


def test_mocov3_and_big_vision_styles():
    table = _numpy(sincos_position_embedding((9, 9), 24, "mocov3"))[0]
    np.testing.assert_allclose(table, _mocov3(9, 9, 24), atol=1e-6, rtol=0)
    table = _numpy(sincos_position_embedding((6, 4), 24, "big_vision", num_prefix_rows=0))[0]
    np.testing.assert_allclose(table, _big_vision(6, 4, 24), atol=1e-6, rtol=0)


@pytest.mark.parametrize("in_graph", [False, True])
def test_large_grid_keeps_float64_accuracy(in_graph):
    # 1024 positions: a plain float32 angle would be off by up to ~3e-5. A
    # grid of tensors takes the in-graph path (split float32 angles).
    grid = (4, 1024)
    if in_graph:
        grid = tuple(keras.ops.convert_to_tensor(g, "int32") for g in grid)
    table = _numpy(sincos_position_embedding(grid, 64, "big_vision", num_prefix_rows=0))[0]
    np.testing.assert_allclose(table, _big_vision(4, 1024, 64), atol=2e-6, rtol=0)


def test_grid_known_only_at_run_time():
    inputs = keras.Input((None, None, 3))
    table = keras.layers.Lambda(
        lambda x: sincos_position_embedding((keras.ops.shape(x)[1], keras.ops.shape(x)[2]), 8)
        + keras.ops.zeros_like(x[:1, :1, :1, :1])[0]
    )(inputs)
    model = keras.Model(inputs, table)
    for h, w in ((2, 3), (5, 4)):
        out = _numpy(model(np.zeros((1, h, w, 3), "float32")))
        np.testing.assert_allclose(out, _numpy(sincos_position_embedding((h, w), 8)), atol=1e-6)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="dim=10"):
        sincos_position_embedding((2, 2), 10)
    with pytest.raises(ValueError, match="style"):
        sincos_position_embedding((2, 2), 8, style="moco")
