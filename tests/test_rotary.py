"""Rotary position embeddings against NumPy references of each family's
formulas (`reference_families`) and against transformers' DINOv3 module,
at a checkpoint's grid and at a larger non-square one."""

import json

import keras
import numpy as np
import pytest

import reference_families as ref
from conftest import to_numpy
from harness import run_layer_test
from keras_vit.layers import rotary
from keras_vit.layers.rotary import (
    MixedRopeFrequencies,
    RotaryEmbedding,
    apply_rotary,
    mixed_rope_tables,
    rope_tables,
    rope_tables_at,
)

GRIDS = [(4, 4), (5, 7)]


def _both(tables):
    return [to_numpy(t) for t in tables]


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize(
    "settings, expected",
    [
        (dict(), dict()),
        (dict(base=10000.0), dict(base=10000.0)),
        (dict(normalize_coords="max"), dict(normalize="max")),
        (dict(normalize_coords="min"), dict(normalize="min")),
        (dict(min_period=0.5, max_period=40.0), dict(min_period=0.5, max_period=40.0)),
    ],
)
def test_dinov3_tables_equal_the_numpy_reference(grid, settings, expected):
    sin, cos = _both(rope_tables(grid, 16, "dinov3", **settings))
    want_sin, want_cos = ref.dinov3_rope(grid, 16, **expected)
    np.testing.assert_allclose(sin, want_sin, atol=2e-6)
    np.testing.assert_allclose(cos, want_cos, atol=2e-6)


# variant, settings -> timm_cat_rope arguments
CAT_CASES = {
    "eva02": (dict(reference_grid=(4, 4)), dict(ref_feat_shape=(4, 4))),
    "eva02-no-reference": (dict(), dict()),
    "pe": (dict(reference_grid=(3, 4)), dict(ref_feat_shape=(3, 4), grid_offset=1.0, indexing="xy")),
    "pe-no-class-token": (dict(grid_offset=0.0, reference_grid=(4, 4)), dict(ref_feat_shape=(4, 4), indexing="xy")),
    "axial": (dict(), dict(temperature=100.0, indexing="xy")),
}


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("case", sorted(CAT_CASES))
def test_index_tables_equal_timms_rotary_embedding_cat(grid, case):
    variant = case.split("-")[0]
    settings, expected = CAT_CASES[case]
    sin, cos = _both(rope_tables(grid, 16, variant, **settings))
    want_sin, want_cos = ref.timm_cat_rope(grid, 16, **dict(dict(temperature=10000.0), **expected))
    # Angles reach 10 rad at the larger grid: float32 keeps ~1e-6 of them.
    np.testing.assert_allclose(sin, want_sin, atol=5e-6)
    np.testing.assert_allclose(cos, want_cos, atol=5e-6)


def test_the_variants_differ_where_their_sources_do():
    """Swapping the layout or the axis order changes the tables: a loader that
    picks the wrong variant gives other numbers, not an error."""
    base = _both(rope_tables((3, 5), 16, "axial"))[0]
    for change in (dict(order="yx"), dict(layout="half"), dict(grid_offset=1.0)):
        assert np.abs(_both(rope_tables((3, 5), 16, "axial", **change))[0] - base).max() > 0.1, change


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("order", ["xy", "yx"])
def test_mixed_tables_equal_timms_rotary_embedding_mixed(grid, order, rng):
    freqs = rng.normal(size=(2, 3, 2, 8)).astype("float32")
    sin, cos = _both(mixed_rope_tables(grid, freqs, order))
    want_sin, want_cos = ref.timm_mixed_rope(grid, freqs, "xy" if order == "xy" else "ij")
    # timm's (depth, heads, patches, dim); keras_vit's (depth, patches, heads, dim)
    np.testing.assert_allclose(sin, want_sin.transpose(0, 2, 1, 3), atol=5e-6)
    np.testing.assert_allclose(cos, want_cos.transpose(0, 2, 1, 3), atol=5e-6)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("prefix", [0, 3])
def test_apply_rotary_equals_the_numpy_rotation(layout, prefix, rng):
    grid = (3, 4)
    x = rng.normal(size=(2, prefix + 12, 2, 16)).astype("float32")
    sin, cos = rope_tables(grid, 16, "dinov3", layout=layout)
    out = to_numpy(apply_rotary(x, sin, cos, num_prefix_tokens=prefix, layout=layout))
    want = ref.apply_rope(x.transpose(0, 2, 1, 3).astype("float64"), *_both((sin, cos)), prefix,
                          half=layout == "half").transpose(0, 2, 1, 3)
    np.testing.assert_allclose(out, want, atol=1e-5)
    np.testing.assert_array_equal(out[:, :prefix], x[:, :prefix])


def test_apply_rotary_takes_per_head_and_per_image_tables(rng):
    x = rng.normal(size=(2, 5, 3, 8)).astype("float32")
    freqs = rng.normal(size=(2, 1, 3, 4)).astype("float32")
    sin, cos = mixed_rope_tables((2, 2), freqs)
    out = to_numpy(apply_rotary(x, sin[0], cos[0], num_prefix_tokens=1, layout="interleaved"))
    for h in range(3):
        one = to_numpy(apply_rotary(x[:, :, h:h + 1], sin[0][:, h], cos[0][:, h], 1, "interleaved"))
        np.testing.assert_allclose(out[:, :, h:h + 1], one, atol=1e-6)
    # Per image: image 1 on a 1 x 4 grid, image 0 on 2 x 2.
    positions = np.array([[[0, 0], [0, 1], [1, 0], [1, 1]], [[0, 0], [0, 1], [0, 2], [0, 3]]])
    sizes = np.array([[[2, 2]], [[1, 4]]])
    sin, cos = rope_tables_at(positions, sizes, 8, "dinov3")
    out = to_numpy(apply_rotary(x, sin[:, :, None], cos[:, :, None], num_prefix_tokens=1))
    for i, grid in enumerate([(2, 2), (1, 4)]):
        s, c = rope_tables(grid, 8, "dinov3")
        np.testing.assert_allclose(out[i:i + 1], to_numpy(apply_rotary(x[i:i + 1], s, c, 1)), atol=1e-6)


def test_float32_compute_dtype_rotates_in_float32(rng):
    x = rng.normal(size=(1, 6, 2, 16)).astype("float32")
    sin, cos = rope_tables((2, 3), 16, "eva02")
    low = keras.ops.cast(x, "float16")
    out = apply_rotary(low, sin, cos, layout="interleaved", compute_dtype="float32")
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    exact = to_numpy(apply_rotary(x, sin, cos, layout="interleaved"))
    np.testing.assert_allclose(to_numpy(out).astype("float32"), exact, atol=5e-3)


# --- transformers' DINOv3 ----------------------------------------------------


@pytest.fixture(scope="module")
def dinov3_rope_module():
    pytest.importorskip("transformers", reason="transformers' DINOv3 is the reference")
    from transformers import DINOv3ViTConfig
    from transformers.models.dinov3_vit.modeling_dinov3_vit import DINOv3ViTRopePositionEmbedding

    config = DINOv3ViTConfig(hidden_size=128, num_attention_heads=2, patch_size=16, image_size=224)
    return DINOv3ViTRopePositionEmbedding(config).eval()


@pytest.mark.parametrize("pixels", [(224, 224), (320, 528)])
def test_dinov3_tables_equal_transformers_module(dinov3_rope_module, pixels):
    import torch

    with torch.no_grad():
        cos, sin = dinov3_rope_module(torch.zeros((1, 3) + pixels))
    grid = (pixels[0] // 16, pixels[1] // 16)
    ours_sin, ours_cos = _both(rope_tables(grid, 64, "dinov3", base=dinov3_rope_module.base))
    np.testing.assert_allclose(ours_sin, sin.numpy(), atol=1e-6)
    np.testing.assert_allclose(ours_cos, cos.numpy(), atol=1e-6)


def test_dinov3_rotation_equals_transformers(dinov3_rope_module, rng):
    import torch
    from transformers.models.dinov3_vit.modeling_dinov3_vit import apply_rotary_pos_emb

    grid, prefix = (14, 11), 5  # class token and four registers
    q = rng.normal(size=(2, 2, prefix + grid[0] * grid[1], 64)).astype("float32")
    k = rng.normal(size=q.shape).astype("float32")
    with torch.no_grad():
        cos, sin = dinov3_rope_module(torch.zeros((1, 3, 16 * grid[0], 16 * grid[1])))
        want_q, want_k = apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(k), cos, sin)
    sin, cos = rope_tables(grid, 64, "dinov3")
    for x, want in ((q, want_q), (k, want_k)):
        out = to_numpy(apply_rotary(x.transpose(0, 2, 1, 3), sin, cos, num_prefix_tokens=prefix))
        np.testing.assert_allclose(out.transpose(0, 2, 1, 3), want.numpy(), atol=2e-5)


# --- the layer ---------------------------------------------------------------


@pytest.mark.parametrize("variant, settings", [
    ("dinov3", {}), ("eva02", dict(reference_grid=(3, 3))), ("pe", dict(reference_grid=(3, 3))), ("axial", {}),
])
def test_layer_contract_and_tables(variant, settings):
    feature_map = np.zeros((2, 3, 4, 8), "float32")
    layer, out = run_layer_test(
        lambda **kw: RotaryEmbedding(8, variant, **settings, **kw), feature_map,
        expected_shape=(2, 12, 8), training=False,
    )
    sin, cos = _both(rope_tables((3, 4), 8, variant, **settings))
    # The layer's tables are traced inside its call, these eagerly: XLA's CPU
    # code generators may round float32 sine and cosine differently there.
    np.testing.assert_allclose(out[0], sin, rtol=0, atol=1e-6)
    np.testing.assert_allclose(out[1], cos, rtol=0, atol=1e-6)
    json.dumps(layer.get_config())


def test_mixed_layer_contract_and_gradients(rng):
    feature_map = rng.normal(size=(2, 3, 2, 8)).astype("float32")
    make = lambda **kw: RotaryEmbedding(8, "mixed", depth=2, num_heads=2, seed=3, **kw)  # noqa: E731
    layer, out = run_layer_test(make, feature_map, expected_shape=(2, 2, 6, 2, 8), training=False)
    sin, cos = _both(mixed_rope_tables((3, 2), layer.frequencies))
    np.testing.assert_allclose(out[0], sin, atol=1e-6)
    # The learned frequencies receive gradients through a rotation.
    inputs = keras.Input((3, 2, 8))
    tokens = keras.Input((6, 2, 8))
    rope = RotaryEmbedding(8, "mixed", depth=2, num_heads=2, seed=3)
    tables = rope(inputs)
    turned = keras.layers.Lambda(lambda t: apply_rotary(t[0], t[1][0, 1], t[1][1, 1], layout="interleaved"))(
        [tokens, tables])
    model = keras.Model([inputs, tokens], turned)
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    before = to_numpy(rope.frequencies).copy()
    x = rng.normal(size=(2, 6, 2, 8)).astype("float32")
    model.fit([feature_map, x], rng.normal(size=x.shape).astype("float32"), epochs=1, verbose=0)
    after = to_numpy(rope.frequencies)
    assert np.all(np.isfinite(after))
    assert not np.array_equal(after[:, 1], before[:, 1]) and np.array_equal(after[:, 0], before[:, 0])


def test_mixed_initial_frequencies_keep_the_axial_magnitudes():
    freqs = to_numpy(MixedRopeFrequencies(temperature=10.0, seed=0)((2, 3, 4, 8)))
    magnitude = 1.0 / 10.0 ** (np.arange(0, 16, 4) / 16)
    np.testing.assert_allclose(np.hypot(freqs[0], freqs[1]), np.broadcast_to(np.tile(magnitude, 2), (3, 4, 8)),
                               rtol=1e-5)
    # The two halves of each head are a quarter turn apart.
    np.testing.assert_allclose((freqs[0, ..., :4] * freqs[0, ..., 4:] + freqs[1, ..., :4] * freqs[1, ..., 4:]),
                               0.0, atol=1e-6)


def test_layer_follows_the_input_grid(rng):
    """In a model with a dynamic grid the tables follow each input's size,
    in `predict` too (compiled by each backend)."""
    inputs = keras.Input((None, None, 8))
    model = keras.Model(inputs, RotaryEmbedding(8, "dinov3")(inputs))
    for grid in [(2, 3), (5, 4)]:
        out = to_numpy(model(np.zeros((1,) + grid + (8,), "float32")))
        np.testing.assert_allclose(out[0], to_numpy(rope_tables(grid, 8, "dinov3")[0]), atol=1e-6)
    tokens = keras.Input((None, 2, 8))
    tables = RotaryEmbedding(8, "pe", reference_grid=(4, 4))(inputs)
    turned = keras.layers.Lambda(lambda t: apply_rotary(t[0], t[1][0], t[1][1], 1, "interleaved"),
                                 output_shape=(None, 2, 8))([tokens, tables])
    model = keras.Model([inputs, tokens], turned)
    for grid in [(2, 3), (5, 4)]:
        x = rng.normal(size=(2, 1 + grid[0] * grid[1], 2, 8)).astype("float32")
        out = model.predict([np.zeros((2,) + grid + (8,), "float32"), x], verbose=0)
        sin, cos = rope_tables(grid, 8, "pe", reference_grid=(4, 4))
        np.testing.assert_allclose(out, to_numpy(apply_rotary(x, sin, cos, 1, "interleaved")), atol=1e-6)


@pytest.mark.parametrize("call, match", [
    (lambda: rope_tables((2, 2), 6), "`head_dim` must be a multiple of 4"),
    (lambda: rope_tables((2, 2), 8, "dinov3", layout="halves"), "`layout` must be one of"),
    (lambda: rope_tables((2, 2), 8, "dinov4"), "`variant` must be one of"),
    (lambda: rope_tables((2, 2), 8, "dinov3", reference_grid=4), "`reference_grid` applies to index"),
    (lambda: rope_tables((2, 2), 8, "dinov3", min_period=1.0), "`min_period` and `max_period` go together"),
    (lambda: rope_tables((2, 2), 8, "dinov3", bas=10.0), "did you mean 'base'"),
    (lambda: rope_tables((2, 2), 8, "mixed"), "use `mixed_rope_tables`"),
    (lambda: RotaryEmbedding(8, "axial", depth=2), "'mixed' variant only"),
    (lambda: RotaryEmbedding(8, "mixed"), "`depth` must be a positive int"),
    (lambda: apply_rotary(np.zeros((1, 2, 1, 8)), np.zeros((2, 8)), np.zeros((2, 8)), layout="x"),
     "`layout` must be one of"),
])
def test_bad_arguments_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_every_variant_is_documented_in_the_module():
    for name in rotary.VARIANTS:
        assert f'"{name}"' in rotary.__doc__ or f"`{name}`" in rotary.__doc__ or name in rotary.rope_tables.__doc__
