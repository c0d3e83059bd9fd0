"""Tests of `keras_vit.inspection` and `keras_vit.plots`.

Tiny random models are checked against NumPy written from the definitions
(attention softmax, rollout, distances, cosine similarity, PCA); the real
DeiT-Tiny weights are checked for the behaviour the paper reports (§4.5).
"""

import io
import math

import keras
import numpy as np
import pytest
import reference
from conftest import DEIT_NPZ, IMAGENET_MEAN as MEAN, IMAGENET_STD as STD, TINY, requires_shared, spread
from PIL import Image

import keras_vit
from keras_vit import inspection
from keras_vit.inspection import plots

pytestmark = spread("the inspection functions over models held on every backend; each case once")

# Where the 144x96 cat goes on the 224x224 background: (top, left), pixels
# of the model input. Both boxes are patch-aligned and off-centre.
CAT_BOXES = ((16, 16), (112, 64))
CAT_SIZE = (96, 144)


def _random_tiny(**kwargs):
    config = dict(TINY, mlp_activation="gelu")
    config.update(kwargs)
    model = keras_vit.ViT(**config)
    rng = np.random.default_rng(1)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))
    return model


def _params(model, prefix):
    """The model's weights under `prefix`, renamed to the official layout."""
    out = {}
    for v in model.weights:
        if v.path.startswith(prefix):
            key = v.path[len(prefix):].replace("gamma", "scale").replace("beta", "bias")
            out[key] = keras.ops.convert_to_numpy(v).astype("float64")
    return out


def _numpy_attention(model, images, final_tokens=False):
    """Per-block probabilities from the official equations, in NumPy (and,
    with `final_tokens`, the tokens after the encoder's norm)."""
    emb = _params(model, "embedding/")
    x = reference.embed_patches(images.astype("float64"), emb["kernel"], emb["bias"])
    if "cls" in emb:
        x = np.concatenate([np.broadcast_to(emb["cls"], (len(x), 1, x.shape[-1])), x], 1)
    x = x + emb["pos_embedding"]
    maps = []
    for i in range(model.num_layers):
        p = _params(model, f"encoderblock_{i}/")
        y = reference.layer_norm(x, p["LayerNorm_0/scale"], p["LayerNorm_0/bias"])
        att = "MultiHeadDotProductAttention_1/"
        q = np.einsum("btd,dhk->bhtk", y, p[att + "query/kernel"]) + p[att + "query/bias"][:, None]
        k = np.einsum("btd,dhk->bhtk", y, p[att + "key/kernel"]) + p[att + "key/bias"][:, None]
        logits = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
        e = np.exp(logits - logits.max(-1, keepdims=True))
        maps.append(e / e.sum(-1, keepdims=True))
        x = reference.encoder_block(x, p, gelu_approximate=False)
    if final_tokens:
        norm = _params(model, "encoder_norm/")
        return maps, reference.layer_norm(x, norm["scale"], norm["bias"])
    return maps


def test_attention_maps_match_numpy_reference():
    model = _random_tiny()
    images = np.random.default_rng(2).normal(size=(3, 32, 32, 3)).astype("float32")
    expected = _numpy_attention(model, images)
    maps = inspection.attention_maps(model, images, batch_size=2)
    assert sorted(maps) == [0, 1]
    for i, probs in maps.items():
        assert probs.shape == (3, 2, 17, 17) and probs.dtype == np.float32
        np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(probs, expected[i], atol=2e-5)
    only_last = inspection.attention_maps(model, images, layers=-1)
    assert list(only_last) == [1]
    np.testing.assert_allclose(only_last[1], maps[1], atol=1e-6)


def test_inspection_leaves_inference_unchanged():
    model = _random_tiny()
    images = np.random.default_rng(3).normal(size=(2, 32, 32, 3)).astype("float32")
    before = keras.ops.convert_to_numpy(model(images))
    inspection.attention_rollout(model, images)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model(images)), before)


@pytest.mark.parametrize("classifier", ["token", "gap", "token_avg"])
def test_attention_rollout_matches_numpy_reference(classifier):
    model = _random_tiny(classifier=classifier)
    images = np.random.default_rng(4).normal(size=(2, 32, 32, 3)).astype("float32")
    prefix = int(classifier != "gap")
    joint = None
    for probs in _numpy_attention(model, images):
        a = probs.mean(axis=1) + np.eye(probs.shape[-1])
        a = a / a.sum(-1, keepdims=True)
        joint = a if joint is None else np.einsum("bij,bjk->bik", a, joint)
    readout = {
        "token": joint[:, 0],
        "gap": joint.mean(axis=1),
        "token_avg": (joint[:, 0] + joint[:, 1:].mean(axis=1)) / 2,
    }[classifier]
    expected = readout[:, prefix:].reshape(2, 4, 4)
    maps, grid = inspection.attention_rollout(model, images, return_grid=True)
    np.testing.assert_allclose(grid, expected, atol=1e-5)
    assert maps.shape == (2, 32, 32)
    # Bilinear upsampling keeps each patch's value near its centre.
    np.testing.assert_allclose(maps[:, 4::8, 4::8], expected, rtol=0.3)


def test_attention_rollout_reads_a_map_head_through_its_probe():
    model = _random_tiny(classifier="map")
    assert model.num_prefix_tokens == 0
    images = np.random.default_rng(5).normal(size=(3, 32, 32, 3)).astype("float32")
    maps, tokens = _numpy_attention(model, images, final_tokens=True)
    joint = None
    for probs in maps:
        a = probs.mean(axis=1) + np.eye(probs.shape[-1])
        a = a / a.sum(-1, keepdims=True)
        joint = a if joint is None else np.einsum("bij,bjk->bik", a, joint)
    # The probe's attention on the final tokens, from the MAP head's weights.
    head = _params(model, "pool/")
    att = "MultiHeadDotProductAttention_0/"
    q = np.einsum("d,dhk->hk", head["probe"][0, 0], head[att + "query/kernel"]) + head[att + "query/bias"]
    k = np.einsum("btd,dhk->bthk", tokens, head[att + "key/kernel"]) + head[att + "key/bias"]
    logits = np.einsum("hk,bthk->bht", q, k) / math.sqrt(q.shape[-1])
    probe = np.exp(logits - logits.max(-1, keepdims=True))
    probe = (probe / probe.sum(-1, keepdims=True)).mean(axis=1)
    expected = np.einsum("bt,btu->bu", probe, joint).reshape(3, 4, 4)
    grid = inspection.attention_rollout(model, images, return_grid=True, batch_size=2)[1]
    np.testing.assert_allclose(grid, expected, atol=1e-5)
    # Not the patch mean that a "gap" model is read through.
    assert np.abs(grid - joint.mean(axis=1).reshape(3, 4, 4)).max() > 1e-3


def test_position_embedding_similarity_of_a_fixed_sincos_table():
    model = keras_vit.ViT(**dict(TINY, num_layers=1), position_embedding="sincos")
    # MAE's table for a 4x4 grid, written from its formula: per axis, half the
    # width; sin then cos of position * 10000^(-i / (D/4)), i < D/4.
    dim, quarter = TINY["hidden_size"], TINY["hidden_size"] // 4
    omega = 1.0 / 10000 ** (np.arange(quarter) / quarter)
    rows, cols = np.meshgrid(np.arange(4.0), np.arange(4.0), indexing="ij")

    def axis(pos):
        angles = pos.reshape(-1)[:, None] * omega
        return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)

    table = np.concatenate([axis(cols), axis(rows)], axis=1)
    assert table.shape == (16, dim)
    unit = table / np.linalg.norm(table, axis=-1, keepdims=True)
    similarity = inspection.position_embedding_similarity(model)
    np.testing.assert_allclose(similarity.reshape(16, 16), unit @ unit.T, atol=1e-5)


def _numpy_distances(maps, cell, grid=4):
    """Mean attention distance by explicit loops over query and key patches."""
    batch, heads = maps[0].shape[:2]
    tokens = grid * grid
    expected = np.zeros((batch, len(maps), heads))
    for layer, probs in enumerate(maps):
        for b in range(batch):
            for h in range(heads):
                total = 0.0
                for q in range(tokens):
                    w = probs[b, h, 1 + q, 1:]
                    w = w / w.sum()
                    for k in range(tokens):
                        dy = cell * (q // grid - k // grid)
                        dx = cell * (q % grid - k % grid)
                        total += w[k] * math.hypot(dy, dx)
                expected[b, layer, h] = total / tokens
    return expected


def test_mean_attention_distance_matches_numpy_reference():
    model = _random_tiny()
    images = np.random.default_rng(5).normal(size=(2, 32, 32, 3)).astype("float32")
    expected = _numpy_distances(_numpy_attention(model, images), cell=8)
    per_image = inspection.mean_attention_distance(model, images, per_image=True)
    np.testing.assert_allclose(per_image, expected, rtol=1e-4)
    np.testing.assert_allclose(
        inspection.mean_attention_distance(model, images), expected.mean(0), rtol=1e-4
    )


def test_hybrid_distances_count_the_stem_stride():
    from keras_vit.models.hybrid import ViTHybrid

    # Stem stride 4 times patch 2: each token covers 8x8 pixels.
    model = ViTHybrid(
        resnet_layers=(1,), resnet_width=0.5, image_size=32, patch_size=2,
        hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
    )
    assert inspection.effective_patch_size(model) == (8, 8)
    images = np.random.default_rng(7).uniform(size=(1, 32, 32, 3)).astype("float32")
    maps = inspection.attention_maps(model, images)
    expected = _numpy_distances([maps[0], maps[1]], cell=8)
    np.testing.assert_allclose(
        inspection.mean_attention_distance(model, images, per_image=True), expected, rtol=1e-4
    )
    rollout, grid = inspection.attention_rollout(model, images, return_grid=True)
    assert rollout.shape == (1, 32, 32) and grid.shape == (1, 4, 4)
    with pytest.raises(ValueError, match="feature map"):
        inspection.embedding_filters(model)


def test_position_embedding_similarity_matches_cosine():
    model = _random_tiny()
    pos = _params(model, "embedding/")["pos_embedding"][0, 1:]
    norms = np.sqrt((pos**2).sum(-1))
    expected = np.array([[a @ b / (na * nb) for b, nb in zip(pos, norms)] for a, na in zip(pos, norms)])
    similarity = inspection.position_embedding_similarity(model)
    assert similarity.shape == (4, 4, 4, 4)
    np.testing.assert_allclose(similarity.reshape(16, 16), expected, atol=1e-5)


def test_embedding_filters_are_principal_components():
    from sklearn.decomposition import PCA

    model = _random_tiny()
    kernel = _params(model, "embedding/")["kernel"]
    components = PCA(n_components=5).fit(kernel.reshape(-1, 16).T).components_
    filters = inspection.embedding_filters(model, n=5)
    assert filters.shape == (5, 8, 8, 3)
    assert filters.min() >= 0.0 and filters.max() <= 1.0
    for got, want in zip(filters.reshape(5, -1), components):
        # Same direction (up to sign) once rescaled to [0, 1] for display.
        want = want * np.sign(want[np.abs(want).argmax()])
        want = (want - want.min()) / (want.max() - want.min())
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_argument_errors():
    model = _random_tiny()
    images = np.zeros((1, 32, 32, 3), "float32")
    with pytest.raises(ValueError, match="layers"):
        inspection.attention_maps(model, images, layers=[2])
    with pytest.raises(ValueError, match="head_fusion"):
        inspection.attention_rollout(model, images, head_fusion="median")
    with pytest.raises(ValueError, match="images"):
        inspection.attention_maps(model, np.zeros((32, 32)))
    with pytest.raises(ValueError, match="`n`"):
        inspection.embedding_filters(model, n=17)


def test_plots_write_png_files(tmp_path):
    model = _random_tiny()
    images = np.random.default_rng(6).uniform(size=(1, 32, 32, 3)).astype("float32")
    paths = [
        plots.plot_attention_rollout(
            images[0], inspection.attention_rollout(model, images)[0], tmp_path / "a.png"
        ),
        plots.plot_mean_attention_distance(
            inspection.mean_attention_distance(model, images), tmp_path / "b.png"
        ),
        plots.plot_position_embedding_similarity(
            inspection.position_embedding_similarity(model), tmp_path / "c.png"
        ),
        plots.plot_embedding_filters(inspection.embedding_filters(model, n=7), tmp_path / "d.png"),
    ]
    for path in paths:
        data = open(path, "rb").read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert 2_000 < len(data) < 300_000
        width, height = Image.open(io.BytesIO(data)).size
        assert 200 <= width <= 2000 and 100 <= height <= 2000


# --- Real DeiT-Tiny weights -------------------------------------------------


@pytest.fixture(scope="module")
def deit():
    return keras_vit.ViTTi16(
        weights=str(DEIT_NPZ), mlp_activation="gelu", classifier_activation=None
    )


def _resized(array, size):
    return np.asarray(Image.fromarray(array).resize(size[::-1], Image.BICUBIC))


@pytest.fixture(scope="module")
def cat_scenes():
    """Chelsea the cat (shrunk to 96x144) on a gravel texture, two places."""
    import skimage.data

    cat = _resized(skimage.data.chelsea(), CAT_SIZE)
    background = np.repeat(_resized(skimage.data.gravel(), (224, 224))[..., None], 3, -1)
    scenes = []
    for top, left in CAT_BOXES:
        scene = background.copy()
        scene[top : top + CAT_SIZE[0], left : left + CAT_SIZE[1]] = cat
        scenes.append((scene / 255.0 - MEAN) / STD)
    return np.stack(scenes).astype("float32")


@requires_shared
def test_real_rollout_concentrates_on_the_cat(deit, cat_scenes):
    maps, grid = inspection.attention_rollout(deit, cat_scenes, return_grid=True)
    area_share = CAT_SIZE[0] * CAT_SIZE[1] / 224**2  # 0.276
    for (top, left), image_map, grid_map in zip(CAT_BOXES, maps, grid):
        rows = slice(top // 16, (top + CAT_SIZE[0]) // 16)
        cols = slice(left // 16, (left + CAT_SIZE[1]) // 16)
        share = grid_map[rows, cols].sum() / grid_map.sum()
        # A uniform map gives the area share; measured about 1.7x on DeiT-Ti.
        assert share > 1.4 * area_share, (top, left, share)
        pixels = image_map[top : top + CAT_SIZE[0], left : left + CAT_SIZE[1]]
        assert pixels.sum() / image_map.sum() > 1.3 * area_share


@requires_shared
def test_real_attention_distance_grows_with_depth(deit, cat_scenes):
    import skimage.data

    chelsea = (skimage.data.chelsea()[38:262, 113:337] / 255.0 - MEAN) / STD
    images = np.concatenate([cat_scenes, chelsea[None].astype("float32")])
    distances = inspection.mean_attention_distance(deit, images)
    assert distances.shape == (12, 3)
    # Attending uniformly to all patches gives the mean distance between
    # patch centres, about 117 px at 224: the ceiling of a "global" head.
    uniform = inspection.patch_distances(deit).mean()
    per_layer = distances.mean(axis=1)
    assert per_layer[-4:].mean() > per_layer[:4].mean() + 20
    assert per_layer[-4:].mean() > 0.85 * uniform
    assert np.corrcoef(np.arange(12), per_layer)[0, 1] > 0.7
    early = distances[:4]
    # Local: within 2.5 patches (40 px) on average; global: over 3/4 of the
    # uniform-attention distance. Both kinds appear in the first 4 layers.
    assert early.min() < 40.0, early
    assert early.max() > 0.75 * uniform, early


@requires_shared
def test_real_position_embeddings_are_local(deit):
    similarity = inspection.position_embedding_similarity(deit)
    assert similarity.shape == (14, 14, 14, 14)
    flat = similarity.reshape(196, 196)
    rows, cols = np.divmod(np.arange(196), 14)
    steps = np.maximum(abs(rows[:, None] - rows[None]), abs(cols[:, None] - cols[None]))
    near = np.array([flat[i][steps[i] == 1].mean() for i in range(196)])
    far = np.array([flat[i][steps[i] >= 4].mean() for i in range(196)])
    assert np.all(near > far)
    assert near.mean() > far.mean() + 0.2
