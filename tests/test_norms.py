"""The norm factory (`keras_vit.layers.norms`): every norm site goes through it.

A kind registered in `NORMS` reaches every norm of a model: a marked kind
registered for the test must be the class of every normalisation layer of a
ViT that has every norm site (blocks, `pre_norm`, `qk_norm`, the final norm,
`fc_norm`, the MAP head), so that a site building its own norm fails here.
"""

import keras
import numpy as np
import pytest
import reference
from conftest import TINY, to_numpy
from harness import run_layer_test

import keras_vit
from keras_vit import export
from keras_vit.layers import norms
from keras_vit.layers.config import BlockConfig
from keras_vit.layers.qk_norm import QKNorm
from keras_vit.validation import UnknownArgumentError
from keras_vit.weights.mapping import model_state

# Every option that adds a norm site; `pooled_norm` moves the final norm to `fc_norm`.
ALL_SITES = dict(pre_norm=True, qk_norm=True, classifier="map")
# The norm layers of such a model, by variable path, with `pooled_norm` False / True.
SITES = {
    False: ["pre_norm", "encoder_norm", "pool/LayerNorm_0"],
    True: ["pre_norm", "fc_norm", "pool/LayerNorm_0"],
}
BLOCK_SITES = ["LayerNorm_0", "LayerNorm_2", "MultiHeadDotProductAttention_1/qk_norm/query_norm",
               "MultiHeadDotProductAttention_1/qk_norm/key_norm"]


class MarkedNorm(keras.layers.LayerNormalization):
    """A LayerNormalization that only the registered test kind makes."""


def _norm_layers(model):
    normalising = (keras.layers.LayerNormalization, keras.layers.GroupNormalization)
    return [layer for layer in model._flatten_layers() if isinstance(layer, normalising)]


def _expected_paths(pooled_norm):
    blocks = [f"encoderblock_{i}/{site}" for i in range(TINY["num_layers"]) for site in BLOCK_SITES]
    return sorted(SITES[pooled_norm] + blocks)


@pytest.fixture
def marked_kind(monkeypatch):
    made = []

    def marked(epsilon, center, name, dtype):
        made.append(name)
        return MarkedNorm(epsilon=epsilon, center=center, name=name, dtype=dtype)

    monkeypatch.setitem(norms.NORMS, "marked", marked)
    return made


@pytest.mark.parametrize("pooled_norm", [False, True])
def test_every_norm_site_takes_the_records_kind(marked_kind, pooled_norm):
    model = keras_vit.ViT(**TINY, classes=3, norm_kind="marked", pooled_norm=pooled_norm,
                          layer_norm_epsilon=1e-5, **ALL_SITES)
    found = _norm_layers(model)
    assert found and all(type(layer) is MarkedNorm for layer in found), [type(n) for n in found]
    assert all(layer.epsilon == 1e-5 for layer in found)
    paths = sorted(layer.gamma.path.rpartition("/")[0] for layer in found)
    assert paths == _expected_paths(pooled_norm)
    assert len(marked_kind) == len(paths)


def test_the_hybrids_resnet_keeps_its_group_norms(marked_kind):
    """BiT's GroupNorms are the ResNet's own, not the encoder's kind of norm."""
    model = keras_vit.ViTHybrid(resnet_layers=(), resnet_width=0.5, **dict(TINY, patch_size=2),
                                classes=3, norm_kind="marked")
    kinds = {type(layer).__name__ for layer in _norm_layers(model)}
    assert kinds == {"MarkedNorm", "GroupNorm"}, kinds


def test_layernorm_keeps_the_checkpoint_weight_names():
    model = keras_vit.ViT(**TINY, classes=3, **ALL_SITES)
    names = {w.path for w in model.weights if "norm" in w.path.lower()}
    expected = {f"{path}/{weight}" for path in _expected_paths(False) for weight in ("gamma", "beta")}
    assert names == expected
    assert all(type(layer) is keras.layers.LayerNormalization for layer in _norm_layers(model))


def test_norm_kind_is_a_serialised_field():
    config = BlockConfig(norm_kind="layernorm")
    assert config.get_config()["norm_kind"] == "layernorm"
    model = keras_vit.ViT(**TINY, classes=3)
    assert model.get_config()["block_config"]["norm_kind"] == "layernorm"
    assert model.norm_kind == "layernorm"
    # A config written before the field existed reads the default.
    older = dict(model.get_config()["block_config"])
    del older["norm_kind"]
    assert BlockConfig.from_config(older).norm_kind == "layernorm"


def test_an_unknown_kind_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"`norm_kind` must be one of \(.*'layernorm'.*Received: norm_kind='batch'"):
        keras_vit.ViT(**TINY, norm_kind="batch")
    with pytest.raises(ValueError, match="norm_kind"):
        keras_vit.layers.MapHead(2, 8, norm_kind="batch")
    with pytest.raises(UnknownArgumentError, match="norm_kind"):
        keras_vit.ViT(**TINY, norm_knd="layernorm")


def test_norm_layer_names_and_center():
    layer = norms.norm_layer("layernorm", 1e-3, "query_norm", center=False)
    layer.build((1, 4))
    assert layer.name == "query_norm" and [w.name for w in layer.weights] == ["gamma"]
    x = np.random.default_rng(0).normal(size=(2, 4)).astype("float32")
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x)), expected, atol=1e-5)


# RMSNorm ---------------------------------------------------------------------


def _rms_norm(x, gamma, epsilon):
    """transformers' / timm's RMSNorm, in float64."""
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + epsilon) * gamma


def test_rmsnorm_layer_is_the_reference():
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 3.0, size=(2, 5, 8)).astype("float32")
    layer = norms.RMSNorm(epsilon=1e-5)
    layer.build(x.shape)
    gamma = rng.normal(size=8).astype("float32")
    layer.gamma.assign(gamma)
    assert [w.name for w in layer.weights] == ["gamma"]
    np.testing.assert_allclose(to_numpy(layer(x)), _rms_norm(x, gamma, 1e-5), rtol=1e-5, atol=1e-6)


def test_rmsnorm_computes_in_float32_under_bfloat16():
    """The float32 result is rounded once: within bfloat16's step of the reference."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 64)).astype("float32")
    layer = norms.RMSNorm(dtype="bfloat16")
    y = layer(keras.ops.cast(x, "bfloat16"))
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    rounded = to_numpy(keras.ops.cast(x, "bfloat16")).astype("float64")
    expected = _rms_norm(rounded, 1.0, 1e-6)
    np.testing.assert_allclose(to_numpy(keras.ops.cast(y, "float32")), expected, rtol=2**-8, atol=0)


def test_rmsnorm_layer_contract():
    run_layer_test(lambda **kw: norms.RMSNorm(epsilon=1e-5, **kw),
                   np.random.default_rng(2).normal(size=(2, 5, 8)).astype("float32"), (2, 5, 8))


def test_rmsnorm_qk_norm_is_the_reference():
    rng = np.random.default_rng(3)
    q, k = (rng.normal(1.0, 2.0, size=(2, 5, 2, 4)).astype("float32") for _ in range(2))
    layer = QKNorm(epsilon=1e-6, norm_kind="rmsnorm")
    nq, nk = layer(q, k)
    assert sorted(w.path for w in layer.weights) == ["qk_norm/key_norm/gamma", "qk_norm/query_norm/gamma"]
    np.testing.assert_allclose(to_numpy(nq), _rms_norm(q, 1.0, 1e-6), atol=1e-5)
    np.testing.assert_allclose(to_numpy(nk), _rms_norm(k, 1.0, 1e-6), atol=1e-5)


def _rms_vit(**options):
    model = keras_vit.ViT(**TINY, classes=3, classifier_activation=None, norm_kind="rmsnorm",
                          layer_norm_epsilon=1e-5, **options)
    rng = np.random.default_rng(4)
    for weight in model.weights:
        weight.assign(rng.normal(scale=0.3, size=weight.shape).astype("float32"))
    return model


def _numpy_vit(params, images, epsilon):
    """The ViT forward pass with RMSNorm at every norm, in float64."""
    x = reference.embed_patches(images.astype(np.float64), params["embedding/kernel"], params["embedding/bias"])
    cls = np.broadcast_to(params["cls"], (x.shape[0], 1, x.shape[-1]))
    x = np.concatenate([cls, x], axis=1) + params["Transformer/posembed_input/pos_embedding"]
    for i in range(TINY["num_layers"]):
        prefix = f"Transformer/encoderblock_{i}/"
        p = {key[len(prefix):]: value for key, value in params.items() if key.startswith(prefix)}
        attention = {key.partition("/")[2]: value for key, value in p.items()
                     if key.startswith("MultiHeadDotProductAttention_1/")}
        x = x + reference.self_attention(_rms_norm(x, p["LayerNorm_0/scale"], epsilon), attention)
        y = _rms_norm(x, p["LayerNorm_2/scale"], epsilon)
        y = reference.activation(y @ p["MlpBlock_3/Dense_0/kernel"] + p["MlpBlock_3/Dense_0/bias"], "gelu_tanh")
        x = x + y @ p["MlpBlock_3/Dense_1/kernel"] + p["MlpBlock_3/Dense_1/bias"]
    x = _rms_norm(x, params["Transformer/encoder_norm/scale"], epsilon)
    return x[:, 0] @ params["head/kernel"] + params["head/bias"]


def test_rmsnorm_vit_is_the_numpy_reference():
    model = _rms_vit()
    params = {key: value.astype(np.float64) for key, value in model_state(model).items()}
    assert not [key for key in params if "norm" in key.lower() and key.endswith("/bias")]
    x = np.random.default_rng(5).normal(size=(2, 32, 32, 3)).astype("float32")
    expected = _numpy_vit(params, x, 1e-5)
    np.testing.assert_allclose(to_numpy(model(x)), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, rtol=1e-4, atol=1e-4)
    assert np.abs(expected[0] - expected[1]).max() > 1e-3


def test_rmsnorm_vit_with_every_norm_site_saves_and_reloads(tmp_path):
    model = _rms_vit(**ALL_SITES)
    assert _norm_layers(model) == []  # no LayerNormalization left
    rms = sorted(layer.gamma.path.rpartition("/")[0] for layer in model._flatten_layers()
                 if isinstance(layer, norms.RMSNorm))
    assert rms == _expected_paths(False)
    x = np.random.default_rng(6).normal(size=(2, 32, 32, 3)).astype("float32")
    expected = to_numpy(model(x))
    path = tmp_path / "rms.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.norm_kind == "rmsnorm"
    np.testing.assert_allclose(to_numpy(loaded(x)), expected, atol=1e-6)


@pytest.mark.skipif("onnx" not in export.BACKEND_FORMATS.get(keras.backend.backend(), ()),
                    reason="this backend exports no ONNX")
def test_rmsnorm_vit_exports_to_onnx(tmp_path):
    model = _rms_vit(**ALL_SITES)
    path = model.export(str(tmp_path / "rms.onnx"), format="onnx")
    x = np.random.default_rng(7).normal(size=(3, 32, 32, 3)).astype("float32")
    diff, outputs, expected = export.verify_export(path, "onnx", model, x)
    assert outputs.shape == (3, 3) and diff <= 1e-4, diff
    assert np.abs(expected[0] - expected[1]).max() > 1e-3
