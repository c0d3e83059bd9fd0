"""The norm factory (`keras_vit.layers.norms`): every norm site goes through it.

A kind registered in `NORMS` reaches every norm of a model: a marked kind
registered for the test must be the class of every normalisation layer of a
ViT that has every norm site (blocks, `pre_norm`, `qk_norm`, the final norm,
`fc_norm`, the MAP head), so that a site building its own norm fails here.
"""

import keras
import numpy as np
import pytest
from conftest import TINY

import keras_vit
from keras_vit.layers import norms
from keras_vit.layers.config import BlockConfig
from keras_vit.validation import UnknownArgumentError

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
