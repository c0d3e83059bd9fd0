"""The one forward pass (`keras_vit.models.forward`): `forward_intermediates`,
`forward_features` and `forward_head` against the model's own graph, eagerly
and on symbolic inputs, for plain ViTs, hybrids and models with prefix
tokens."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from conftest import TINY, inference, spread, to_numpy
from keras_vit.layers.pooling import TokenGrid
from keras_vit.models import forward

pytestmark = spread("the forward pass's bookkeeping over layers held on every backend by their contracts; "
                    "each case once")

MODELS = {
    "plain": lambda: keras_vit.ViT(**TINY, classes=5),
    "distilled-registers": lambda: keras_vit.ViT(
        **TINY, classes=5, distillation_token=True, num_register_tokens=2
    ),
    "gap-pooled-norm": lambda: keras_vit.ViT(**TINY, classes=5, classifier="gap", pooled_norm=True),
    "hybrid": lambda: keras_vit.ViTHybrid(
        resnet_layers=(1,), resnet_width=0.5, image_size=32, patch_size=1, hidden_size=16,
        num_layers=2, num_heads=2, mlp_dim=32, classes=5,
    ),
    "features": lambda: keras_vit.ViT(**TINY, include_top=False, num_register_tokens=1),
}


def _randomised(model):
    rng = np.random.default_rng(0)
    for v in model.weights:  # tokens, heads and scales start at zero or one
        v.assign(np.asarray(v) + rng.normal(0, 0.3, v.shape).astype("float32"))
    return model


def _images(height=32, width=32, n=2):
    return np.random.default_rng(1).normal(size=(n, height, width, 3)).astype("float32")


def _graph_output(model, name, x):
    return to_numpy(keras.Model(model.input, model.get_layer(name).output)(x))


@pytest.mark.parametrize("kind", list(MODELS))
def test_features_are_the_blocks_outputs_reshaped(kind):
    model = _randomised(MODELS[kind]())
    x = _images()
    final, features = model.forward_intermediates(x, return_prefix_tokens=True)
    prefix = model.num_prefix_tokens
    gh, gw = (32 // p for p in model.effective_patch_size)
    assert len(features) == model.num_layers
    for i, (spatial, prefix_tokens) in enumerate(features):
        block = _graph_output(model, f"encoderblock_{i}", x)
        np.testing.assert_array_equal(to_numpy(spatial), block[:, prefix:].reshape(2, gh, gw, -1))
        np.testing.assert_array_equal(to_numpy(prefix_tokens), block[:, :prefix])
    norm = "fc_norm" if model.pooled_norm else "encoder_norm"
    if model.pooled_norm:  # no norm on the tokens: they leave the last block as they are
        np.testing.assert_array_equal(to_numpy(final), _graph_output(model, "encoderblock_1", x))
    else:
        np.testing.assert_array_equal(to_numpy(final), _graph_output(model, norm, x))
    # The head on the final tokens is the model.
    np.testing.assert_allclose(to_numpy(model.forward_head(final)), inference(model, x), rtol=0, atol=1e-6)
    np.testing.assert_allclose(
        to_numpy(model.forward_head(model.forward_features(x))), inference(model, x), rtol=0, atol=1e-6
    )


def test_norm_and_formats():
    model = _randomised(MODELS["distilled-registers"]())
    x = _images()
    normed = model.forward_intermediates(x, indices=[-1], norm=True, output_fmt="NLC", intermediates_only=True)
    tokens = _graph_output(model, "encoderblock_1", x)
    expected = to_numpy(model.get_layer("encoder_norm")(tokens))[:, model.num_prefix_tokens :]
    np.testing.assert_array_equal(to_numpy(normed[0]), expected)
    # Another image size: another grid, the position embedding resized.
    final, (grid,) = model.forward_intermediates(_images(48, 32), indices=1)
    assert tuple(grid.shape) == (2, 6, 4, 16) and tuple(final.shape) == (2, 4 + 24, 16)
    with pytest.raises(ValueError, match=r"`output_fmt` must be one of \('NHWC', 'NLC'\). Received: output_fmt='NCHW'"):
        model.forward_intermediates(x, output_fmt="NCHW")


def test_logits_without_the_activation():
    model = _randomised(keras_vit.ViT(**TINY, classes=5, representation_size=8))
    x = _images()
    tokens = model.forward_features(x)
    logits = to_numpy(model.forward_head(tokens, activation=False))
    np.testing.assert_allclose(to_numpy(keras.ops.softmax(logits)), inference(model, x), atol=1e-6)
    pre_logits = to_numpy(model.forward_head(tokens, pre_logits=True))
    np.testing.assert_array_equal(pre_logits, _graph_output(model, "pre_logits", x))


@pytest.mark.parametrize(
    "indices,expected",
    [(None, [0, 1, 2]), (2, [1, 2]), (0, []), ([0, -1], [0, 2]), ((2, 0, 2), [0, 2]), ([-3], [0]),
     (np.int64(1), [2]), (np.array([0, -2]), [0, 1])],
)
def test_indices_follow_timm(indices, expected):
    assert forward.block_indices(3, indices) == expected


@pytest.mark.parametrize("indices", [4, -1, [3], [-4], "all", [0.5], True])
def test_bad_indices_are_refused(indices):
    with pytest.raises(ValueError, match=r"`indices`.*Received: indices="):
        forward.block_indices(3, indices)


def test_intermediates_only_stops_after_the_last_requested_block(monkeypatch):
    model = keras_vit.ViT(**{**TINY, "num_layers": 3})
    calls = []
    for block in model.encoder_blocks:
        monkeypatch.setattr(block, "call", lambda x, training=None, b=block, f=block.call: calls.append(b.name) or f(x, training))
    model.forward_intermediates(_images(), indices=[0], intermediates_only=True)
    assert calls == ["encoderblock_0"]


@pytest.mark.parametrize("kind", ["distilled-registers", "hybrid"])
def test_symbolic_feature_model_inside_another_model(kind, tmp_path):
    model = _randomised(MODELS[kind]())
    inputs = keras.Input((None, None, 3))
    features = model.forward_intermediates(inputs, indices=[0, 1], intermediates_only=True)
    feature_model = keras.Model(inputs, features)
    x = _images(64, 32)
    eager = model.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
    for got, want in zip(feature_model(x), eager):
        np.testing.assert_array_equal(to_numpy(got), to_numpy(want))
    # A functional model used as a layer of another, trained end to end.
    outer_in = keras.Input((32, 32, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(feature_model(outer_in)[-1])
    outer = keras.Model(outer_in, keras.layers.Dense(2)(pooled))
    outer.compile(optimizer="sgd", loss="mse")
    before = to_numpy(model.get_layer("encoderblock_0").weights[0]).copy()
    outer.fit(_images(), np.ones((2, 2), "float32"), epochs=1, verbose=0)
    assert np.abs(to_numpy(model.get_layer("encoderblock_0").weights[0]) - before).max() > 0
    path = os.path.join(tmp_path, "features.keras")
    feature_model.save(path)
    loaded = keras.saving.load_model(path)
    for got, want in zip(loaded(x), feature_model(x)):
        np.testing.assert_array_equal(to_numpy(got), to_numpy(want))


def test_images_are_checked():
    model = keras_vit.ViT(**TINY)
    with pytest.raises(ValueError, match="multiple of 8"):
        model.forward_intermediates(_images(36, 32))


@pytest.mark.parametrize("spatial", [True, False])
def test_token_grid_layer(spatial):
    """The layer that splits the features (two inputs, two outputs: outside
    the single-tensor contract of tests/test_layer_contracts.py)."""
    layer = TokenGrid(2, spatial=spatial)
    tokens = np.arange(2 * 8 * 3, dtype="float32").reshape(2, 8, 3)
    grid_like = np.zeros((2, 2, 3, 5), "float32")
    patches, prefix = layer([tokens, grid_like])
    want = tokens[:, 2:].reshape(2, 2, 3, 3) if spatial else tokens[:, 2:]
    np.testing.assert_array_equal(to_numpy(patches), want)
    np.testing.assert_array_equal(to_numpy(prefix), tokens[:, :2])
    shapes = layer.compute_output_shape([(None, 8, 3), (None, 2, 3, 5)])
    assert [tuple(s) for s in shapes] == [(None,) + want.shape[1:], (None, 2, 3)]
    clone = TokenGrid.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    with pytest.raises(ValueError, match="num_prefix_tokens"):
        TokenGrid(-1)
    half = TokenGrid(2, spatial=spatial, dtype="mixed_bfloat16")
    out, _ = half([tokens, grid_like])
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
