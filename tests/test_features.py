"""Feature maps of chosen blocks (`keras_vit.feature_model`): equal to the
reshaped block outputs, inside other models, exported to ONNX."""

import keras
import numpy as np
import pytest

import keras_vit
from conftest import TINY, every_backend, per_backend, spread, to_numpy
from keras_vit import export
from keras_vit.models.features import feature_model

pytestmark = spread("feature maps are the blocks' outputs reshaped, over layers held on every backend; each "
                    "case once")

FAMILIES = {
    "plain": lambda: keras_vit.ViT(**dict(TINY, num_layers=4), include_top=False),
    # Stem (stride 4) and one stage, 2x2 patches: stride 8, a 4x4 grid at 32 px.
    "hybrid": lambda: keras_vit.ViTHybrid(
        resnet_layers=(1,), resnet_width=0.5, **dict(TINY, num_layers=3, patch_size=2), classes=5
    ),
    "tokens": lambda: keras_vit.ViT(
        **dict(TINY, num_layers=3), distillation_token=True, num_register_tokens=2, classes=5
    ),
}


def _randomised(model, seed=0):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(scale=0.3, size=variable.shape).astype(variable.dtype))
    return model


def _reference(model, x, block, norm=False):
    """The earlier way: the block's output tokens by layer name, reshaped by hand."""
    tokens = keras.Model(model.input, model.get_layer(f"encoderblock_{block}").output)(x)
    tokens = to_numpy(tokens)
    if norm:
        tokens = to_numpy(model.get_layer("encoder_norm")(tokens))
    prefix = model.num_prefix_tokens
    rows, cols = x.shape[1] // model.effective_patch_size[0], x.shape[2] // model.effective_patch_size[1]
    return tokens[:, prefix:].reshape(len(x), rows, cols, -1), tokens[:, :prefix]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("norm", [False, True])
def test_maps_equal_reshaped_block_outputs(family, norm):
    model = _randomised(FAMILIES[family]())
    x = np.random.default_rng(1).normal(size=(2, 32, 32, 3)).astype("float32")
    blocks = (0, -1, 1)  # any order, negative allowed
    features = feature_model(model, feature_blocks=blocks, norm=norm, prefix_tokens="separate")
    outputs = features.predict_on_batch(x)
    assert len(outputs) == 3
    for block, (grid, prefix) in zip((0, model.num_layers - 1, 1), outputs):
        expected_grid, expected_prefix = _reference(model, x, block, norm)
        stride = model.effective_patch_size[0]
        assert grid.shape == (2, 32 // stride, 32 // stride, model.hidden_size)
        assert prefix.shape == (2, model.num_prefix_tokens, model.hidden_size)
        np.testing.assert_allclose(grid, expected_grid, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(prefix, expected_prefix, atol=1e-5, rtol=1e-5)
    dropped = feature_model(model, feature_blocks=-1)(x)  # one block: the map itself
    expected = _reference(model, x, model.num_layers - 1)[0]
    np.testing.assert_allclose(to_numpy(dropped), expected, atol=1e-5, rtol=1e-5)


def test_inside_another_model_trains_the_backbone():
    backbone = keras_vit.ViT(**TINY, include_top=False)
    features = feature_model(backbone, feature_blocks=(0, 1))
    inputs = keras.Input((32, 32, 3))
    maps = features(inputs)
    x = keras.layers.Concatenate()(maps)
    outputs = keras.layers.Conv2D(3, 1)(x)
    segmenter = keras.Model(inputs, outputs)
    before = to_numpy(backbone.get_layer("embedding").kernel).copy()
    segmenter.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    rng = np.random.default_rng(0)
    segmenter.fit(rng.normal(size=(2, 32, 32, 3)), rng.normal(size=(2, 4, 4, 3)), verbose=0)
    assert not np.array_equal(to_numpy(backbone.get_layer("embedding").kernel), before)


def test_other_image_sizes():
    features = feature_model(keras_vit.ViT(**TINY, include_top=False), feature_blocks=1)
    assert tuple(features(np.zeros((1, 48, 64, 3), "float32")).shape) == (1, 6, 8, 16)


@pytest.mark.parametrize(
    "blocks, match",
    [
        (2, r"\[-2, 1\].*feature_blocks=2"),
        ((0, -3), r"feature_blocks=\(0, -3\)"),
        ((), "feature_blocks=()"),
        ((1, -1), "twice"),
        ((True,), "feature_blocks"),
        ("0", "feature_blocks"),
    ],
)
def test_bad_feature_blocks(blocks, match):
    with pytest.raises(ValueError, match=match):
        feature_model(keras_vit.ViT(**TINY, include_top=False), feature_blocks=blocks)


def test_bad_options():
    model = keras_vit.ViT(**TINY, include_top=False)
    with pytest.raises(ValueError, match="prefix_tokens"):
        feature_model(model, feature_blocks=0, prefix_tokens="keep")
    pooled = keras_vit.ViT(**TINY, pooled_norm=True)
    with pytest.raises(ValueError, match="pooled_norm"):
        feature_model(pooled, feature_blocks=0, norm=True)


# One family per backend's job, both over the three: the feature model adds
# outputs, not operations, and tests/test_export.py exports both families'
# whole models from every backend.
@every_backend("one family's ONNX export per backend's job")
@pytest.mark.skipif(
    "onnx" not in export.BACKEND_FORMATS.get(keras.backend.backend(), ()),
    reason=f"the {keras.backend.backend()} backend has no ONNX exporter here",
)
@pytest.mark.parametrize("family", [per_backend(jax="hybrid", tensorflow="plain", torch="plain")])
def test_onnx_export_parity(tmp_path, family):
    import onnxruntime

    model = _randomised(FAMILIES[family]())
    features = feature_model(model, feature_blocks=(0, -1))
    path = export.export_model(features, str(tmp_path / "features.onnx"), "onnx")
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(2).normal(size=(3, 32, 32, 3)).astype("float32")
    outputs = session.run(None, {session.get_inputs()[0].name: x})
    expected = features.predict_on_batch(x)
    assert len(outputs) == 2
    # Match by value (exporters may name and order outputs their own way).
    for ref in expected:
        diffs = [np.abs(out - ref).max() for out in outputs if out.shape == ref.shape]
        assert min(diffs) <= 1e-4, diffs
    assert np.abs(expected[0] - expected[1]).max() > 1e-2  # the two maps differ


def test_named_constructor_feature_blocks(tmp_path):
    model = keras_vit.ViTTi16(include_top=False, image_size=32)
    path = str(tmp_path / "ti16.weights.h5")
    model.save_weights(path)
    features = keras_vit.ViTTi16(include_top=False, image_size=32, weights=path, feature_blocks=(3, -1),
                                  mlp_activation="gelu_tanh")
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    got = features(x)
    assert [tuple(m.shape) for m in got] == [(2, 2, 2, 192)] * 2
    for block, value in zip((3, 11), got):
        expected = _reference(model, x, block)[0]
        np.testing.assert_allclose(to_numpy(value), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(include_top=True, feature_blocks=(3,)), "include_top=False"),
        (dict(include_top=False, feature_blocks=12), r"\[-12, 11\].*feature_blocks=12"),
    ],
)
def test_named_constructor_feature_blocks_refusals(kwargs, match):
    with pytest.raises(ValueError, match=match):
        keras_vit.ViTTi16(image_size=32, **kwargs)
