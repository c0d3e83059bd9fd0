"""Patch dropout (FLIP / timm `patch_drop_rate`): the layer and the model option."""

import keras
import numpy as np
import pytest

import keras_vit
from conftest import TINY, spread, to_numpy
from keras_vit.layers import PatchDropout


def _tokens(batch, prefix, patches):
    """Tokens whose single feature is their identity: prefix -1, -2, ...; patches 0, 1, ..."""
    ids = np.concatenate([-1.0 - np.arange(prefix), np.arange(patches, dtype="float64")])
    return np.tile(ids[None, :, None], (batch, 1, 1)).astype("float32"), ids


@pytest.mark.parametrize("prefix, patches, rate", [(1, 16, 0.5), (3, 49, 0.75), (0, 10, 0.25), (2, 4, 0.9)])
def test_keeps_a_random_subset_and_every_prefix_token(prefix, patches, rate):
    x, ids = _tokens(4, prefix, patches)
    out = to_numpy(PatchDropout(rate, num_prefix_tokens=prefix, seed=1)(x, training=True))[..., 0]
    # timm's count: max(1, int(N * (1 - rate))).
    expected_kept = max(1, int(np.floor(patches * (1 - rate) + 1e-9)))
    assert out.shape == (4, prefix + expected_kept)
    for row in out:
        np.testing.assert_array_equal(row[:prefix], ids[:prefix])  # prefix first, unchanged
        kept = row[prefix:]
        assert set(kept) <= set(range(patches)) and len(set(kept)) == len(kept)  # real, distinct
        assert np.all(np.diff(kept) > 0)  # in token order
    if expected_kept < patches:
        assert len({tuple(r) for r in out}) > 1  # each sample draws its own subset


def test_identity_at_inference(rng):
    x = rng.normal(size=(2, 10, 4)).astype("float32")
    layer = PatchDropout(0.5, num_prefix_tokens=2, seed=0)
    np.testing.assert_array_equal(to_numpy(layer(x)), x)
    np.testing.assert_array_equal(to_numpy(layer(x, training=False)), x)


def test_seeded_draws_repeat_and_config_round_trips():
    x, _ = _tokens(3, 1, 20)
    a = PatchDropout(0.5, num_prefix_tokens=1, seed=7)
    b = PatchDropout.from_config(a.get_config())
    assert b.get_config() == a.get_config()
    np.testing.assert_array_equal(to_numpy(a(x, training=True)), to_numpy(b(x, training=True)))


@spread("the option over each token prefix once; the layer is held on every backend above")
@pytest.mark.parametrize(
    "options", [dict(), dict(distillation_token=True, num_register_tokens=2), dict(classifier="gap")]
)
def test_model_option(rng, options):
    model = keras_vit.ViT(**TINY, classes=3, patch_dropout_rate=0.75, seed=0, **options)
    assert model.encoder_config.patch_dropout_rate == 0.75
    plain = keras_vit.ViT(**TINY, classes=3, seed=0, **options)
    for variable in model.weights:  # random head so the comparison means something
        variable.assign(rng.normal(scale=0.3, size=variable.shape).astype("float32"))
    for source, target in zip(model.weights, plain.weights):
        target.assign(to_numpy(source))
    x = rng.normal(size=(2, 32, 32, 3)).astype("float32")
    # Inference: the model with patch dropout is the model without.
    np.testing.assert_allclose(to_numpy(model(x)), to_numpy(plain(x)), atol=1e-6)
    # Training: the first block sees the prefix tokens and 25% of the 16 patches.
    first = keras.Model(model.input, model.get_layer("patch_dropout").output)
    prefix = model.num_prefix_tokens
    trained, full = to_numpy(first(x, training=True)), to_numpy(first(x))
    assert trained.shape == (2, prefix + 4, 16) and full.shape == (2, prefix + 16, 16)
    np.testing.assert_array_equal(trained[:, :prefix], full[:, :prefix])
    for b in range(2):  # every kept token is one of the image's patch tokens
        distances = np.abs(trained[b, prefix:, None] - full[b, None, prefix:]).max(-1)
        assert np.all(distances.min(-1) == 0)
    # A training step runs and changes the weights.
    before = to_numpy(model.get_layer("embedding").kernel).copy()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    model.fit(x, np.array([0, 2]), epochs=1, batch_size=2, verbose=0)
    assert not np.array_equal(to_numpy(model.get_layer("embedding").kernel), before)
    config = model.get_config()
    assert config["encoder_config"]["patch_dropout_rate"] == 0.75
    assert keras_vit.ViT.from_config(config).encoder_config.patch_dropout_rate == 0.75


def test_bad_rates():
    with pytest.raises(ValueError, match="patch_dropout_rate"):
        keras_vit.ViT(**TINY, patch_dropout_rate=1.0)
    with pytest.raises(ValueError, match="rate"):
        PatchDropout(-0.1)
