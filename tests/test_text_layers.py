"""The text tower's layers and `TextEncoder` against NumPy, and their
contracts (config round trips, `.keras` saving, mixed precision, gradients)."""

import keras
import numpy as np
import pytest

from conftest import to_numpy
from harness import run_layer_test
from keras_vit.text import AttentionMask, TextEmbedding, TextEncoder, TextPooling

RNG = np.random.default_rng(0)
IDS = np.array([[3, 7, 9, 2, 0, 0], [3, 5, 2, 0, 0, 0]], "int32")


def test_text_embedding_adds_token_and_position_rows():
    layer, outputs = run_layer_test(lambda **kw: TextEmbedding(10, 8, 4, **kw), IDS, (2, 6, 4))
    tokens, positions = (to_numpy(w) for w in (layer.token_embedding, layer.position_embedding))
    np.testing.assert_allclose(outputs, tokens[IDS] + positions[None, :6], rtol=0, atol=1e-6)


@pytest.mark.parametrize("mask_padding", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_mask_hides_padding_and_later_tokens(causal, mask_padding):
    padding = (IDS > 0).astype("int32")
    mask = to_numpy(AttentionMask(causal, mask_padding)(padding))
    expected = np.broadcast_to(padding[:, None, :] > 0 if mask_padding else True, (2, 6, 6))
    if causal:
        expected = expected & np.tril(np.ones((6, 6), bool))
    np.testing.assert_array_equal(mask, expected)
    layer = AttentionMask.from_config(AttentionMask(causal, mask_padding).get_config())
    assert (layer.causal, layer.mask_padding) == (causal, mask_padding)


@pytest.mark.parametrize("mode, rows", [("eos", [3, 2]), ("argmax", [2, 1]), ("last", [5, 5])])
def test_text_pooling_reads_one_token(mode, rows):
    tokens = RNG.normal(size=(2, 6, 4)).astype("float32")
    layer = TextPooling(mode, eos_token_id=2 if mode == "eos" else None)
    pooled = to_numpy(layer([tokens, IDS]))
    np.testing.assert_array_equal(pooled, tokens[np.arange(2), rows])
    assert TextPooling.from_config(layer.get_config()).get_config() == layer.get_config()


def test_text_pooling_needs_its_eos_id():
    with pytest.raises(ValueError, match="eos_token_id"):
        TextPooling("eos")
    with pytest.raises(ValueError, match="`mode` must be one of"):
        TextPooling("first")


def _encoder(**kw):
    return TextEncoder(vocabulary_size=12, max_length=8, hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16,
                       eos_token_id=2, projection_dim=4, **kw)


def test_text_encoder_saves_and_reloads(tmp_path):
    encoder = _encoder(qkv_bias=False, mlp_activation="quick_gelu", mask_padding=False, final_norm_epsilon=1e-3)
    inputs = [IDS, (IDS > 0).astype("int32")]
    expected = encoder.predict(inputs, verbose=0)
    assert TextEncoder.from_config(encoder.get_config()).get_config() == encoder.get_config()
    encoder.save(tmp_path / "text.keras")
    again = keras.saving.load_model(tmp_path / "text.keras")
    assert isinstance(again, TextEncoder) and again.block_config.qkv_bias is False
    assert again.get_layer("encoder_norm").epsilon == 1e-3 and not again.get_layer("attention_mask").mask_padding
    assert _encoder().get_layer("encoder_norm").epsilon == 1e-6
    np.testing.assert_allclose(again.predict(inputs, verbose=0), expected, rtol=0, atol=1e-6)


def test_text_encoder_ignores_padding_and_later_tokens():
    """The embedding of a text does not change with the padding after it, nor
    (causal) with the tokens after its end-of-text token."""
    encoder = _encoder()
    short = np.array([[3, 7, 2, 0, 0, 0]], "int32")
    other = np.array([[3, 7, 2, 9, 9, 9]], "int32")
    out = [encoder.predict([ids, np.array([[1, 1, 1, 0, 0, 0]], "int32")], verbose=0) for ids in (short, other)]
    np.testing.assert_allclose(out[0], out[1], rtol=0, atol=1e-6)
    longer = encoder.predict([short[:, :4], np.array([[1, 1, 1, 0]], "int32")], verbose=0)
    np.testing.assert_allclose(longer, out[0], rtol=0, atol=1e-5)


def test_text_encoder_runs_in_bfloat16():
    encoder = _encoder(dtype="mixed_bfloat16")
    out = encoder.predict([IDS, (IDS > 0).astype("int32")], verbose=0)
    reference = _encoder()
    reference.set_weights(encoder.get_weights())
    np.testing.assert_allclose(out, reference.predict([IDS, (IDS > 0).astype("int32")], verbose=0), atol=0.1)


def test_text_encoder_refuses_unknown_arguments():
    with pytest.raises(TypeError, match="did you mean 'projection_dim'"):
        _encoder(projection_dims=3)
