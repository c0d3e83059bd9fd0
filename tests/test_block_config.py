"""The option records (`keras_vit.layers.config`): checks, serialisation as a
unit, every field a keyword of the models and layers."""

import dataclasses
import os

import keras
import numpy as np
import pytest

import keras_vit
from conftest import TINY, runs_once, to_numpy
from keras_vit import layers, presets
from keras_vit.layers.config import RECORDS, BlockConfig, EncoderConfig

pytestmark = runs_once("torch", "the option records are Python dataclasses")


@pytest.mark.parametrize(
    "fields,name",
    [
        (dict(layer_norm_epsilon=0), "layer_norm_epsilon"),
        (dict(mlp_activation="relu"), "mlp_activation"),
        (dict(qkv_bias="yes"), "qkv_bias"),
        (dict(layer_scale_init=-1.0), "layer_scale_init"),
        (dict(dropout_rate=1.0), "dropout_rate"),
        (dict(attention_dropout_rate=-0.1), "attention_dropout_rate"),
    ],
)
def test_block_config_names_the_bad_field(fields, name):
    value = next(iter(fields.values()))
    with pytest.raises(ValueError, match=rf"`{name}` must be .*Received: {name}={value!r}"):
        BlockConfig(**fields)
    # The same check answers the models' keywords.
    with pytest.raises(ValueError, match=rf"`{name}`"):
        keras_vit.ViT(**TINY, **fields)


def test_records_are_frozen_and_round_trip():
    config = BlockConfig(qkv_bias=False, layer_scale_init=1e-5, mlp_activation="quick_gelu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.qkv_bias = True
    assert BlockConfig.from_config(config.get_config()) == config
    assert EncoderConfig.from_config({"patch_bias": False}).patch_bias is False
    with pytest.raises(ValueError, match="no field 'qkv_biass'"):
        BlockConfig.from_config({"qkv_biass": False})
    assert BlockConfig.from_arguments(config, mlp_activation="gelu").mlp_activation == "gelu"
    assert BlockConfig.from_arguments(config, classes=3) == config  # not a field: not read
    with pytest.raises(TypeError, match="gelu_approximate"):
        BlockConfig(gelu_approximate=False)
    with pytest.raises(keras_vit.validation.UnknownArgumentError, match="gelu_approximate"):
        keras_vit.ViT(**TINY, gelu_approximate=False)


def test_every_field_is_a_model_keyword_attribute_and_config_entry():
    names = keras_vit.ViT.argument_names()
    for key, record in RECORDS.items():
        assert key in names
        for field in record.field_names():
            assert field in names and field in keras_vit.ViTHybrid.argument_names()
    model = keras_vit.ViT(**TINY, qkv_bias=False, layer_scale_init=0.1, mlp_activation="gelu")
    config = model.get_config()
    assert config["block_config"] == BlockConfig(
        qkv_bias=False, layer_scale_init=0.1, mlp_activation="gelu"
    ).get_config()
    assert not set(BlockConfig.field_names()) & set(config)  # one unit, no flat copies
    assert model.qkv_bias is False and model.mlp_activation == "gelu"
    assert all(b.block_config == model.block_config for b in model.encoder_blocks)
    with pytest.raises(keras_vit.validation.UnknownArgumentError, match="qkv_bias"):
        keras_vit.ViT(**TINY, qkv_biass=False)


def test_a_whole_record_or_keywords_build_the_same_model():
    record = BlockConfig(qkv_bias=False, layer_norm_epsilon=1e-5)
    a = keras_vit.ViT(**TINY, block_config=record, seed=1)
    b = keras_vit.ViT(**TINY, qkv_bias=False, layer_norm_epsilon=1e-5, seed=1)
    c = keras_vit.ViT(**TINY, block_config=record.get_config(), seed=1)
    assert a.get_config() == b.get_config() == c.get_config()
    # A keyword replaces the record's field.
    d = keras_vit.ViT(**TINY, block_config=record, qkv_bias=True)
    assert d.block_config == record.replace(qkv_bias=True)


def test_preset_overrides_derive_from_the_records():
    assert set(presets.OVERRIDES) >= {"dropout_rate", "attention_dropout_rate"}
    assert not set(presets.OVERRIDES) & {"qkv_bias", "layer_scale_init", "mlp_activation", "norm_kind"}


def test_transformer_block_reads_fields_as_keywords(rng):
    flat = dict(
        name="blk", trainable=True, dtype="float32", num_heads=2, mlp_dim=16,
        dropout_rate=0.1, attention_dropout_rate=0.2, stochastic_depth_rate=0.3,
        layer_norm_epsilon=1e-5, mlp_activation="gelu", qkv_bias=False,
        layer_scale_init=0.5, seed=4,
    )
    block = layers.TransformerBlock.from_config(flat)
    assert block.block_config == BlockConfig(
        layer_norm_epsilon=1e-5, mlp_activation="gelu", qkv_bias=False, layer_scale_init=0.5,
        dropout_rate=0.1, attention_dropout_rate=0.2,
    )
    assert block.stochastic_depth_rate == 0.3 and block.seed == 4
    again = layers.TransformerBlock.from_config(block.get_config())
    assert again.get_config() == block.get_config()
    x = rng.normal(size=(1, 3, 8)).astype("float32")
    block(x), again(x)
    for a, b in zip(block.weights, again.weights):
        assert a.path == b.path
        b.assign(a)
    np.testing.assert_array_equal(to_numpy(block(x)), to_numpy(again(x)))


def test_keras_file_round_trip_with_records(tmp_path):
    model = keras_vit.ViT(**TINY, qkv_bias=False, mlp_activation="quick_gelu", patch_bias=False)
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config() == model.get_config()
    x = np.random.default_rng(0).normal(size=(1, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))
