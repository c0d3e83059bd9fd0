"""Masked patch prediction: targets, corruption, loss, the task model."""

import json

import keras
import numpy as np
import pytest

import keras_vit
from conftest import TINY, every_backend, inference, spread, to_numpy
from keras_vit import pretraining, training
from keras_vit.pretraining import KEPT, MASKED, REPLACED, UNTOUCHED

pytestmark = spread("the task is Keras layers and losses over keras.ops, each case once; its training under each "
                    "backend's trainer, seeds and fine-tuning run in every job (every_backend)")

# TINY at 32 px, patch 8: a 4x4 grid.
GRID = 16


def tiny_encoder(**kwargs):
    return keras_vit.ViT(**{**TINY, **kwargs}, include_top=False)


def random_images(rng, n=4, size=32):
    return rng.integers(0, 256, (n, size, size, 3)).astype("uint8")


# ---------------------------------------------------------------- targets
# Independent references: per-patch loops and exact integer arithmetic.


def np_mean_color(images, patch, bits):
    ph, pw = patch
    batch, height, width, _ = images.shape
    out = np.zeros((batch, (height // ph) * (width // pw)), "int64")
    for b in range(batch):
        for i in range(height // ph):
            for j in range(width // pw):
                block = images[b, i * ph : (i + 1) * ph, j * pw : (j + 1) * pw].astype("int64")
                # floor(mean * 2**bits / 256) with Python integers, exactly.
                bins = [min(int(block[..., c].sum()) * 2**bits // (256 * ph * pw), 2**bits - 1) for c in range(3)]
                out[b, i * (width // pw) + j] = (bins[0] << 2 * bits) | (bins[1] << bits) | bins[2]
    return out


def np_downsized(images, patch, bits, size=4):
    ph, pw = patch
    batch, height, width, _ = images.shape
    cells = []
    for i in range(height // ph):
        for j in range(width // pw):
            block = images[:, i * ph : (i + 1) * ph, j * pw : (j + 1) * pw]
            cells.append(np_mean_color(block, (ph // size, pw // size), bits))
    return np.stack(cells, axis=1)


def np_pixels(images, patch):
    ph, pw = patch
    x = images.astype("float64") / 127.5 - 1.0
    rows = []
    for i in range(images.shape[1] // ph):
        for j in range(images.shape[2] // pw):
            rows.append(x[:, i * ph : (i + 1) * ph, j * pw : (j + 1) * pw].reshape(len(x), -1))
    return np.stack(rows, axis=1)


def edge_images(bits, patch=(4, 8), count=3):
    """Patches whose means sit exactly on, just below and just above bin edges."""
    ph, pw = patch
    n = ph * pw
    edges = [k * 256 // 2**bits for k in range(2**bits)] + [255]
    patches = []
    for edge in edges:
        for total in (edge * n, edge * n - 1, edge * n + 1):
            total = min(max(total, 0), 255 * n)
            values = np.full(n, total // n)
            values[: total % n] += 1  # not constant, same exact sum
            patches.append(values)
    rng = np.random.default_rng(bits)
    images = []
    for _ in range(count):
        chosen = [patches[k] for k in rng.integers(0, len(patches), 3 * 4)]
        grid = np.stack(chosen).reshape(4, 3, ph, pw)  # 4 patches x RGB
        image = grid.transpose(0, 2, 3, 1).reshape(2, 2, ph, pw, 3).transpose(0, 2, 1, 3, 4)
        images.append(image.reshape(2 * ph, 2 * pw, 3))
    return np.stack(images).astype("uint8")


@pytest.mark.parametrize("bits", range(1, 9))
def test_mean_color_targets_match_numpy(rng, bits):
    patch = (4, 8)
    images = np.concatenate([edge_images(bits, patch), rng.integers(0, 256, (3, 8, 16, 3))]).astype("uint8")
    expected = np_mean_color(images, patch, bits)
    out = pretraining.mean_color_targets(images, patch, bits)
    assert isinstance(out, np.ndarray) and out.dtype == np.int32
    np.testing.assert_array_equal(out, expected)
    as_float = pretraining.mean_color_targets(images.astype("float32"), patch, bits)
    np.testing.assert_array_equal(as_float, expected)
    tensor = pretraining.mean_color_targets(keras.ops.convert_to_tensor(images), patch, bits)
    assert keras.backend.standardize_dtype(tensor.dtype) == "int32"
    np.testing.assert_array_equal(to_numpy(tensor), expected)
    # One image without a batch axis.
    np.testing.assert_array_equal(pretraining.mean_color_targets(images[0], patch, bits), expected[0])


def test_mean_color_targets_paper_numbers():
    """3 bits: 512 classes; values 0-31 are bin 0 and 224-255 bin 7."""
    assert pretraining.num_color_classes(3) == 512
    image = np.zeros((1, 2, 4, 3), "uint8")
    image[0, :, :2] = (31, 32, 255)
    image[0, :, 2:] = (224, 223, 0)
    ids = pretraining.mean_color_targets(image, 2, bits=3)
    assert ids.tolist() == [[(0 << 6) | (1 << 3) | 7, (7 << 6) | (6 << 3) | 0]]
    # Out-of-range values are clipped to the end bins.
    assert pretraining.mean_color_targets(np.full((1, 2, 2, 3), 300.0), 2).tolist() == [[511]]


@pytest.mark.parametrize("bits", [1, 3, 8])
def test_downsized_and_pixel_targets_match_numpy(rng, bits):
    images = rng.integers(0, 256, (2, 16, 24, 3)).astype("uint8")
    expected = np_downsized(images, (8, 8), bits)
    out = pretraining.downsized_patch_targets(images, 8, bits=bits)
    assert out.shape == (2, 6, 16) and out.dtype == np.int32
    np.testing.assert_array_equal(out, expected)
    tensor = pretraining.downsized_patch_targets(keras.ops.convert_to_tensor(images), 8, bits=bits)
    np.testing.assert_array_equal(to_numpy(tensor), expected)
    pixels = pretraining.pixel_targets(images, 8)
    np.testing.assert_allclose(pixels, np_pixels(images, (8, 8)), atol=1e-6)
    np.testing.assert_allclose(
        to_numpy(pretraining.pixel_targets(keras.ops.convert_to_tensor(images), 8)), pixels, atol=1e-6
    )


def test_targets_inside_tf_data(rng):
    tf = pytest.importorskip("tensorflow", reason="tf.data needs TensorFlow")
    images = np.concatenate([edge_images(3, (8, 8), count=2), rng.integers(0, 256, (2, 16, 16, 3))]).astype("uint8")
    ds = tf.data.Dataset.from_tensor_slices(images)
    # Per image (no batch axis, shape unknown as after decoding), then batched.
    dynamic = ds.map(lambda x: tf.reshape(x, tf.concat([tf.shape(x)[:2], [3]], 0)))
    per_image = np.stack(list(dynamic.map(lambda x: pretraining.mean_color_targets(x, 8)).as_numpy_iterator()))
    np.testing.assert_array_equal(per_image, np_mean_color(images, (8, 8), 3))
    batched = next(iter(ds.batch(4).map(lambda x: (
        pretraining.downsized_patch_targets(x, 8, bits=2), pretraining.pixel_targets(x, 8)
    )).as_numpy_iterator()))
    np.testing.assert_array_equal(batched[0], np_downsized(images, (8, 8), 2))
    np.testing.assert_allclose(batched[1], np_pixels(images, (8, 8)), atol=1e-6)


# ------------------------------------------------------------- corruption


def test_corruption_proportions_over_many_images():
    """Exact counts per image; kinds and positions within 5 standard deviations.

    Kinds: each corrupted patch is MASKED with p = 0.8 independently, so over
    N = 4000 * 25 patches the MASKED fraction has sd sqrt(p (1 - p) / N) =
    0.0013; a 5-sd miss has probability below 1e-6. Positions: every position
    is corrupted in each image with p = 25/49 (a uniform 25-subset), so its
    count over 4000 images has sd sqrt(4000 p (1 - p)) = 31.6; 49 positions at
    5 sd each fail together with probability below 3e-5.
    """
    batch, n = 4000, 49
    plan = to_numpy(pretraining.corruption_plan(batch, n, seed=123))
    assert plan.shape == (batch, n) and plan.dtype == np.int32
    assert set(np.unique(plan)) <= {UNTOUCHED, MASKED, REPLACED, KEPT}
    k = pretraining.num_corrupted(n, 0.5)
    assert k == 25
    np.testing.assert_array_equal((plan > 0).sum(axis=1), k)
    corrupted = plan[plan > 0]
    total = corrupted.size
    for code, p in ((MASKED, 0.8), (REPLACED, 0.1), (KEPT, 0.1)):
        share = (corrupted == code).mean()
        assert abs(share - p) < 5 * np.sqrt(p * (1 - p) / total), (code, share)
    p = k / n
    per_position = (plan > 0).sum(axis=0)
    assert np.all(np.abs(per_position - batch * p) < 5 * np.sqrt(batch * p * (1 - p))), per_position


def test_corruption_plan_follows_its_arguments():
    plan = to_numpy(pretraining.corruption_plan(2000, 20, rate=0.25, mask_rate=0.5, replace_rate=0.3, seed=1))
    np.testing.assert_array_equal((plan > 0).sum(axis=1), 5)
    corrupted = plan[plan > 0]
    for code, p in ((MASKED, 0.5), (REPLACED, 0.3), (KEPT, 0.2)):
        assert abs((corrupted == code).mean() - p) < 5 * np.sqrt(p * (1 - p) / corrupted.size)
    only_mask = to_numpy(pretraining.corruption_plan(50, 10, mask_rate=1.0, replace_rate=0.0, seed=2))
    assert set(np.unique(only_mask)) == {UNTOUCHED, MASKED}


def test_corruption_is_seeded():
    a = to_numpy(pretraining.corruption_plan(8, 16, seed=5))
    np.testing.assert_array_equal(a, to_numpy(pretraining.corruption_plan(8, 16, seed=5)))
    assert not np.array_equal(a, to_numpy(pretraining.corruption_plan(8, 16, seed=6)))
    gen = keras.random.SeedGenerator(9)
    first = to_numpy(pretraining.corruption_plan(8, 16, seed=gen))
    second = to_numpy(pretraining.corruption_plan(8, 16, seed=gen))
    assert not np.array_equal(first, second)  # the generator advances
    again = to_numpy(pretraining.corruption_plan(8, 16, seed=keras.random.SeedGenerator(9)))
    np.testing.assert_array_equal(first, again)


def test_other_patch_indices_are_uniform_over_the_other_patches():
    """Offsets 1..n-1 each with p = 1/(n-1); 5 sd bounds over 20000 draws."""
    batch, n = 2000, 10
    idx = to_numpy(pretraining.other_patch_indices(batch, n, seed=3))
    assert idx.shape == (batch, n) and idx.min() >= 0 and idx.max() < n
    offset = (idx - np.arange(n)) % n
    assert offset.min() >= 1  # never the patch itself
    counts = np.bincount(offset.ravel(), minlength=n)[1:]
    p = 1 / (n - 1)
    assert np.all(np.abs(counts - batch * n * p) < 5 * np.sqrt(batch * n * p * (1 - p))), counts
    np.testing.assert_array_equal(to_numpy(pretraining.other_patch_indices(3, 1, seed=0)), 0)


def test_apply_corruption_lands_only_where_the_plan_says(rng):
    batch, n, d = 6, 12, 5
    tokens = rng.normal(size=(batch, n, d)).astype("float32")
    plan = to_numpy(pretraining.corruption_plan(batch, n, mask_rate=0.4, replace_rate=0.4, seed=0))
    others = to_numpy(pretraining.other_patch_indices(batch, n, seed=1))
    mask = rng.normal(size=(d,)).astype("float32")
    out = to_numpy(pretraining.apply_corruption(
        keras.ops.convert_to_tensor(tokens), plan, keras.ops.convert_to_tensor(mask), others
    ))
    for b in range(batch):
        for i in range(n):
            if plan[b, i] == MASKED:
                expected = mask
            elif plan[b, i] == REPLACED:
                expected = tokens[b, others[b, i]]
            else:
                expected = tokens[b, i]
            np.testing.assert_array_equal(out[b, i], expected)
    assert {MASKED, REPLACED, KEPT, UNTOUCHED} <= set(np.unique(plan))


# -------------------------------------------------------- patch encoder


@pytest.mark.parametrize(
    "options",
    [dict(classifier="token"), dict(classifier="gap"),
     dict(classifier="token", distillation_token=True, num_register_tokens=2)],
    ids=["token", "gap", "distilled-registers"],
)
def test_patch_encoder_call_is_embed_then_add_positions(rng, options):
    encoder = tiny_encoder(**options)
    embedding = encoder.get_layer("embedding")
    for grid in ((4, 4), (3, 5)):
        patches = keras.ops.convert_to_tensor(rng.normal(size=(2,) + grid + (192,)).astype("float32"))
        tokens = embedding.embed_patches(patches)
        assert tuple(tokens.shape) == (2, grid[0] * grid[1], 16)
        np.testing.assert_array_equal(
            to_numpy(embedding.add_positions(tokens, grid)), inference(embedding, patches)
        )


def test_encoders_with_extra_tokens_or_a_pooled_norm_pre_train(rng):
    images = random_images(rng)
    for options in (dict(distillation_token=True, num_register_tokens=2),
                    dict(classifier="gap", pooled_norm=True)):
        task = pretraining.MaskedPatchPrediction(tiny_encoder(**options), seed=0)
        out = task(images)
        # One prediction per patch of the 4x4 grid, whatever tokens precede them.
        assert tuple(out["logits"].shape) == (4, 16, 512)
        assert tuple(out["targets"].shape) == (4, 16)


# ------------------------------------------------------------- the model


def np_log_softmax(logits):
    logits = logits.astype("float64")
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def np_patch_losses(out, target):
    logits, targets = to_numpy(out["logits"]), to_numpy(out["targets"])
    if target == "pixels":
        return ((logits.astype("float64") - targets) ** 2).mean(-1)
    picked = np.take_along_axis(np_log_softmax(logits), targets[..., None].astype("int64"), -1)[..., 0]
    return -(picked.mean(-1) if target == "downsized" else picked)


@pytest.mark.parametrize("target", pretraining.TARGETS)
def test_loss_counts_only_the_corrupted_patches(rng, target):
    task = pretraining.MaskedPatchPrediction(tiny_encoder(), target=target, bits=2, seed=0)
    images = random_images(rng)
    out = task(images)
    plan = to_numpy(out["plan"])
    # Predictions four times worse on the untouched patches than on the
    # corrupted ones, so that averaging over all patches is far off.
    scale = np.where(plan > 0, 1.0, 4.0).reshape(plan.shape + (1,) * (len(out["logits"].shape) - 2))
    logits = scale * rng.normal(size=out["logits"].shape)
    out = dict(out, logits=keras.ops.convert_to_tensor(logits.astype("float32")))
    losses = np_patch_losses(out, target)
    expected = losses[plan > 0].mean()
    loss = float(to_numpy(task.compute_loss(images, None, out)))
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    # Discriminating: averaging over every patch gives another number.
    assert losses.mean() > 1.2 * expected
    # Changing the predictions of untouched patches changes nothing.
    untouched = (plan == 0).reshape(plan.shape + (1,) * (len(out["logits"].shape) - 2))
    noise = np.where(untouched, 5 * rng.normal(size=out["logits"].shape), 0).astype("float32")
    changed = dict(out, logits=keras.ops.convert_to_tensor(to_numpy(out["logits"]) + noise))
    assert float(to_numpy(task.compute_loss(images, None, changed))) == pytest.approx(loss, rel=1e-6)
    # Image weights: a zero-weight image is left out.
    weights = np.array([1.0, 0.0, 1.0, 1.0], "float32")
    weighted = float(to_numpy(task.compute_loss(images, None, out, sample_weight=weights)))
    keep = (plan > 0) & (weights[:, None] > 0)
    np.testing.assert_allclose(weighted, losses[keep].mean(), rtol=1e-5)


def test_corruption_is_applied_before_the_position_embedding(rng, monkeypatch):
    """The model's tokens equal a NumPy embedding corrupted as planned, then positioned."""
    encoder = tiny_encoder()
    for w in encoder.weights:
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))
    task = pretraining.MaskedPatchPrediction(encoder, seed=0)
    images = random_images(rng, n=3)
    task(images)  # builds the mask token
    plan = np.zeros((3, GRID), "int32")
    plan[0, [1, 5]] = MASKED
    plan[1, [2, 7, 8]] = REPLACED
    plan[2, [0, 3]] = KEPT
    plan[2, 9] = MASKED
    others = (np.arange(GRID)[None] + np.array([[3], [5], [1]])) % GRID
    monkeypatch.setattr(task, "sample_corruption", lambda b, n: (plan, others.astype("int32")))
    out = task(images)

    embedding = encoder.get_layer("embedding")
    x = images.astype("float64") / 127.5 - 1.0
    patches = x.reshape(3, 4, 8, 4, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(3, GRID, -1)
    tokens = patches @ to_numpy(embedding.kernel).reshape(-1, 16) + to_numpy(embedding.bias)
    corrupted = tokens.copy()
    mask = to_numpy(task.mask_token)
    for b, i in zip(*np.nonzero(plan)):
        if plan[b, i] == MASKED:
            corrupted[b, i] = mask
        elif plan[b, i] == REPLACED:
            corrupted[b, i] = tokens[b, others[b, i]]
    (cls,) = [w for w in embedding.weights if w.path.endswith("/cls")]
    cls = np.broadcast_to(to_numpy(cls), (3, 1, 16))
    sequence = np.concatenate([cls, corrupted], axis=1) + to_numpy(embedding.pos_embedding)
    h = keras.ops.convert_to_tensor(sequence.astype("float32"))
    for block in encoder.encoder_blocks:
        h = block(h)
    expected = to_numpy(task.head(encoder.get_layer("encoder_norm")(h)[:, 1:]))
    np.testing.assert_allclose(to_numpy(out["logits"]), expected, atol=2e-4)
    np.testing.assert_array_equal(to_numpy(out["plan"]), plan)


@every_backend("fit and the fine-tuning after it under each backend's trainer")
def test_fit_trains_the_encoder_in_place_and_it_fine_tunes(rng, tmp_path):
    encoder = tiny_encoder(name="encoder")
    before = [to_numpy(w).copy() for w in encoder.weights]
    task = pretraining.MaskedPatchPrediction(encoder, seed=0)
    training.compile_for_masked_patch_prediction(
        task, total_steps=3, base_lr=1e-2, warmup_steps=0, global_batch_size=4
    )
    images = random_images(rng, n=12)
    history = task.fit(images, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert {id(w) for w in encoder.weights} <= {id(w) for w in task.weights}
    # Every encoder variable received a gradient (class token and position
    # embedding through attention, the norm through the head).
    for w, old in zip(encoder.weights, before):
        assert not np.array_equal(to_numpy(w), old), w.path
    path = str(tmp_path / "encoder.weights.h5")
    encoder.save_weights(path)
    classifier = keras_vit.ViT(**TINY, classes=3, classifier_activation=None, weights=path,
                                 mlp_activation="gelu_tanh")
    np.testing.assert_array_equal(
        to_numpy(classifier.get_layer("embedding").kernel), to_numpy(encoder.get_layer("embedding").kernel)
    )
    training.compile_for_finetuning(classifier, total_steps=8, base_lr=0.05, warmup_steps=1, global_batch_size=12)
    x = keras_vit.preprocess_input(images.astype("float32"))
    y = np.arange(12) % 3
    loss = [classifier.train_on_batch(x, y, return_dict=True)["loss"] for _ in range(8)]
    assert loss[-1] < loss[0], loss


def test_evaluate_returns_the_masked_prediction_loss(rng):
    task = pretraining.MaskedPatchPrediction(tiny_encoder(), seed=4)
    task.compile(optimizer="adam")
    images = random_images(rng, n=6)
    task(images)
    state = to_numpy(task.seed_generator.state).copy()
    loss = task.evaluate(images, batch_size=6, verbose=0)
    task.seed_generator.state.assign(state)
    out = task(images)
    expected = np_patch_losses(out, "mean_color")[to_numpy(out["plan"]) > 0].mean()
    assert np.isscalar(loss) or np.ndim(loss) == 0
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


@every_backend("the corruption draws from each backend's random generator")
def test_seeded_runs_reproduce(rng):
    images = random_images(rng, n=8)

    def run(seed=None, global_seed=0, fit=False):
        keras.utils.set_random_seed(global_seed)
        task = pretraining.MaskedPatchPrediction(tiny_encoder(), seed=seed)
        plan = to_numpy(task(images)["plan"])
        if fit:
            task.compile(optimizer=keras.optimizers.Adam(1e-2))
            task.fit(images, batch_size=4, epochs=1, verbose=0, shuffle=False)
        return plan, [to_numpy(w) for w in task.weights]

    a, b = run(seed=3, fit=True), run(seed=3, fit=True)
    # No seed: derived from keras.utils.set_random_seed.
    c, d = run(global_seed=11), run(global_seed=11)
    for first, second in ((a, b), (c, d)):
        np.testing.assert_array_equal(first[0], second[0])
        for x, y in zip(first[1], second[1]):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
    assert not np.array_equal(a[0], c[0])  # another seed, another plan


def test_config_and_keras_file_round_trip(rng, tmp_path):
    encoder = tiny_encoder(classifier="gap", dropout_rate=0.1)
    task = pretraining.MaskedPatchPrediction(
        encoder, target="downsized", rate=0.3, mask_rate=0.7, replace_rate=0.2, bits=2,
        preprocessing="imagenet", seed=8,
    )
    config = task.get_config()
    assert {k: config[k] for k in ("target", "rate", "mask_rate", "replace_rate", "bits", "preprocessing", "seed")} == dict(
        target="downsized", rate=0.3, mask_rate=0.7, replace_rate=0.2, bits=2, preprocessing="imagenet", seed=8
    )
    clone = pretraining.MaskedPatchPrediction.from_config(json.loads(json.dumps(config)))
    assert json.loads(json.dumps(clone.get_config())) == json.loads(json.dumps(config))
    assert clone.encoder.get_config() == encoder.get_config()

    task.compile(optimizer="adam")
    task.optimizer.build(task.trainable_variables)
    images = random_images(rng)
    for w in task.weights:  # not the initial values
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))
    task(images)  # moves the corruption stream on
    path = tmp_path / "task.keras"
    task.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is pretraining.MaskedPatchPrediction
    assert isinstance(restored.encoder, keras_vit.ViT)
    assert len(restored.weights) == len(task.weights)
    for a, b in zip(task.weights, restored.weights):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    # Keras saves no seed-generator position (as for Dropout): a loaded task
    # restarts its corruption stream from `seed`.
    np.testing.assert_array_equal(to_numpy(restored.seed_generator.state), [8, 0])
    restored.seed_generator.state.assign(task.seed_generator.state)
    expected = task(images)
    out = restored(images)
    np.testing.assert_array_equal(to_numpy(out["plan"]), to_numpy(expected["plan"]))
    np.testing.assert_allclose(to_numpy(out["logits"]), to_numpy(expected["logits"]), atol=1e-6)
    assert restored.optimizer is not None and type(restored.optimizer) is type(task.optimizer)


def _np_patch_embeddings(encoder, x):
    """NumPy patch projection of scaled images `x` (TINY: 4x4 grid of 8 px)."""
    embedding = encoder.get_layer("embedding")
    patches = x.reshape(len(x), 4, 8, 4, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(len(x), GRID, -1)
    return patches @ to_numpy(embedding.kernel).reshape(-1, TINY["hidden_size"]) + to_numpy(embedding.bias)


def test_the_encoder_s_own_input_scaling_is_the_default(rng, tmp_path):
    """An encoder carrying a preprocessing record (registered weights, presets) is fed as it was trained."""
    images = random_images(rng, n=3)
    # No mode has these statistics: only the encoder's record can give them.
    mean, std = np.array([0.2, 0.4, 0.6]), np.array([0.1, 0.2, 0.3])
    encoder = tiny_encoder(preprocessing=dict(mean=mean.tolist(), std=std.tolist()))
    expected = (images / 255.0 - mean) / std
    for target in ("mean_color", "pixels"):
        task = pretraining.MaskedPatchPrediction(encoder, target=target, seed=0)
        tokens, _ = task.embed(images)
        np.testing.assert_allclose(to_numpy(tokens), _np_patch_embeddings(encoder, expected), atol=1e-4)
    # The regression targets are the patches as the encoder sees them.
    pixels = expected.reshape(3, 4, 8, 4, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(3, GRID, -1)
    np.testing.assert_allclose(to_numpy(task.compute_targets(images)), pixels, rtol=1e-5, atol=1e-5)
    # The record travels with the encoder's config: a reloaded task scales alike.
    task.save(tmp_path / "task.keras")
    restored = keras.saving.load_model(tmp_path / "task.keras")
    assert restored.preprocessing is None
    np.testing.assert_allclose(to_numpy(restored.embed(images)[0]), to_numpy(tokens), atol=1e-5)

    # Without a record: "inception", [-1, 1].
    plain = tiny_encoder()
    tokens, _ = pretraining.MaskedPatchPrediction(plain, seed=0).embed(images)
    np.testing.assert_allclose(to_numpy(tokens), _np_patch_embeddings(plain, images / 127.5 - 1.0), atol=1e-4)


def test_a_mode_that_contradicts_the_encoder_s_record_is_refused():
    deit_like = tiny_encoder(preprocessing=keras_vit.preprocessing.Preprocessing.from_mode("imagenet"))
    with pytest.raises(ValueError, match=r"`preprocessing` disagrees.*mean=\(0.485.*Received: preprocessing='inception'"):
        pretraining.MaskedPatchPrediction(deit_like, preprocessing="inception")
    # The record's own mode, or None, is accepted.
    for preprocessing in ("imagenet", None):
        task = pretraining.MaskedPatchPrediction(deit_like, preprocessing=preprocessing)
        assert task.preprocessing == preprocessing


def test_hybrid_encoder(rng):
    encoder = keras_vit.ViTHybrid(
        resnet_layers=(), resnet_width=0.5, image_size=32, patch_size=2, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=32, include_top=False,
    )
    task = pretraining.MaskedPatchPrediction(encoder, seed=1)
    assert task.patch_size == (8, 8)  # stride-4 root, 2x2 patches
    images = random_images(rng)
    out = task(images)
    assert tuple(out["logits"].shape) == (4, 16, 512)
    np.testing.assert_array_equal(to_numpy(out["targets"]), np_mean_color(images, (8, 8), 3))
    root = to_numpy(encoder.get_layer("conv_root").kernel).copy()
    task.compile(optimizer=keras.optimizers.Adam(1e-2))
    assert np.isfinite(task.fit(images, batch_size=4, epochs=1, verbose=0).history["loss"]).all()
    assert not np.array_equal(to_numpy(encoder.get_layer("conv_root").kernel), root)


@pytest.mark.parametrize("policy,atol", [("mixed_float16", 5e-3), ("mixed_bfloat16", 4e-2)])
def test_mixed_precision(rng, policy, atol):
    """Same weights and plan as float32: logits within the policy's rounding
    (measured max: 1.7e-3 float16, 1.4e-2 bfloat16, on logits near 1), loss
    and logits in float32."""
    images = random_images(rng)
    reference = tiny_encoder()
    low = tiny_encoder(dtype=policy)
    low.set_weights(reference.get_weights())
    tasks = [pretraining.MaskedPatchPrediction(encoder, seed=2) for encoder in (reference, low)]
    for task in tasks:
        task(images)  # builds the head and mask token
    tasks[1].head.set_weights(tasks[0].head.get_weights())
    tasks[1].mask_token.assign(tasks[0].mask_token)
    assert tasks[1].head.compute_dtype == policy.split("_")[1]
    outs = [task(images) for task in tasks]
    np.testing.assert_array_equal(to_numpy(outs[1]["plan"]), to_numpy(outs[0]["plan"]))
    assert keras.backend.standardize_dtype(outs[1]["logits"].dtype) == "float32"
    np.testing.assert_allclose(to_numpy(outs[1]["logits"]), to_numpy(outs[0]["logits"]), atol=atol)
    losses = [task.compute_loss(images, None, out) for task, out in zip(tasks, outs)]
    assert keras.backend.standardize_dtype(losses[1].dtype) == "float32"
    np.testing.assert_allclose(to_numpy(losses[1]), to_numpy(losses[0]), rtol=1e-3)
    if policy == "mixed_float16":  # Keras wraps the optimizer in loss scaling
        tasks[1].compile(optimizer="adam")
        loss = tasks[1].fit(images, batch_size=4, epochs=1, verbose=0).history["loss"]
        assert np.isfinite(loss).all()


def test_fit_in_the_single_device_distribution(rng):
    dist = training.get_distribution("none")
    # One colour per image: a corrupted patch's colour is that of the
    # visible patches, which the model learns to copy.
    images = np.broadcast_to(rng.integers(0, 256, (8, 1, 1, 3)), (8, 32, 32, 3)).astype("uint8")
    with dist.scope():
        keras.utils.set_random_seed(0)
        task = pretraining.MaskedPatchPrediction(tiny_encoder(), seed=0)
        training.compile_for_masked_patch_prediction(
            task, total_steps=32, base_lr=1e-2, warmup_steps=0, global_batch_size=8
        )
        # 8 epochs of 4 updates (the images four times each).
        loss = task.fit(np.tile(images, (4, 1, 1, 1)), batch_size=8, epochs=8, verbose=0).history["loss"]
    # Measured on jax with 30 single-update epochs: 6.29 -> 1.97 (0.31x).
    assert loss[-1] < 0.5 * loss[0], loss


# ------------------------------------------------------------- bad input


def test_bad_arguments_raise_clear_errors(rng):
    encoder = tiny_encoder()
    task = pretraining.MaskedPatchPrediction(encoder)
    cases = [
        (lambda: pretraining.mean_color_targets(np.zeros((1, 30, 32, 3)), 8), r"images\.shape=\(1, 30, 32, 3\).*patch_size=\(8, 8\)"),
        (lambda: task(np.zeros((1, 36, 32, 3), "uint8")), r"images\.shape=\(1, 36, 32, 3\)"),
        (lambda: pretraining.mean_color_targets(np.zeros((1, 32, 32, 1)), 8), r"RGB.*images\.shape=\(1, 32, 32, 1\)"),
        (lambda: pretraining.mean_color_targets(np.zeros((1, 32, 32, 4)), 8), r"RGB.*images\.shape=\(1, 32, 32, 4\)"),
        (lambda: task(np.zeros((1, 32, 32, 1), "uint8")), r"RGB.*images\.shape=\(1, 32, 32, 1\)"),
        (lambda: task.fit(np.zeros((2, 36, 32, 3), "uint8"), epochs=1, verbose=0), r"x\.shape=\(2, 36, 32, 3\)"),
        (lambda: task.evaluate(np.zeros((2, 32, 32, 4), "uint8"), verbose=0), r"RGB.*x\.shape=\(2, 32, 32, 4\)"),
        (lambda: pretraining.mean_color_targets(np.zeros((32, 32)), 8), r"images\.shape=\(32, 32\)"),
        (lambda: pretraining.downsized_patch_targets(np.zeros((1, 12, 12, 3)), 6), r"`patch_size`.*patch_size=\(6, 6\), size=\(4, 4\)"),
        (lambda: pretraining.pixel_targets(np.zeros((1, 8, 8, 3)), 4, mode="caffe"), r"`mode`.*mode='caffe'"),
        (lambda: pretraining.MaskedPatchPrediction(keras_vit.ViT(**TINY, classes=3)), r"include_top=False.*include_top=True"),
        (lambda: pretraining.MaskedPatchPrediction(tiny_encoder(input_shape=(32, 32, 1))), r"RGB.*input_shape=\(32, 32, 1\)"),
        (lambda: pretraining.MaskedPatchPrediction(keras.Sequential([keras.layers.Dense(2)])), r"`encoder`.*Received: encoder=Sequential"),
        (lambda: pretraining.MaskedPatchPrediction(encoder, target="edges"), r"`target`.*target='edges'"),
        (lambda: pretraining.MaskedPatchPrediction(encoder, preprocessing="tf"), r"`preprocessing`.*preprocessing='tf'"),
        (lambda: pretraining.MaskedPatchPrediction(encoder, seed=1.5), r"`seed`.*seed=1\.5"),
        (lambda: pretraining.MaskedPatchPrediction(encoder, mask_rate=0.8, replace_rate=0.3), r"mask_rate=0\.8, replace_rate=0\.3"),
        (lambda: pretraining.corruption_plan(0, 16), r"`batch`.*batch=0"),
        (lambda: pretraining.corruption_plan(2, 16, mask_rate=1.5), r"`mask_rate`.*\[0, 1\].*mask_rate=1\.5"),
        (lambda: pretraining.MaskedPatchPrediction(encoder, replace_rate=-0.1), r"`replace_rate`.*replace_rate=-0\.1"),
        (lambda: training.compile_for_masked_patch_prediction(keras_vit.ViT(**TINY), 10), r"`task`.*task=ViT"),
    ]
    for rate in (0, 1, 1.5, -0.1, True, "half"):
        cases.append((lambda r=rate: pretraining.corruption_plan(2, 16, rate=r), rf"`rate`.*\(0, 1\).*rate={rate!r}"))
        cases.append((lambda r=rate: pretraining.MaskedPatchPrediction(encoder, rate=r), rf"`rate`.*rate={rate!r}"))
    for bits in (0, 9, 2.5, None):
        cases.append((lambda b=bits: pretraining.mean_color_targets(np.zeros((1, 8, 8, 3)), 8, bits=b), rf"`bits`.*\[1, 8\].*bits={bits!r}"))
        cases.append((lambda b=bits: pretraining.MaskedPatchPrediction(encoder, bits=b), rf"`bits`.*bits={bits!r}"))
    for call, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            call()


# ----------------------------------------------- recipe, pipeline, docs


def test_masked_patch_recipe():
    opt = training.masked_patch_optimizer(100, warmup_steps=10, global_batch_size=64)
    schedule = opt._learning_rate  # the WarmupDecay the recipe built
    assert isinstance(schedule, training.WarmupDecay)
    rates = [float(inference(schedule, s)) for s in (0, 5, 10, 55, 100)]
    np.testing.assert_allclose(rates, [0.0, 1e-4, 2e-4, 1e-4, 0.0], atol=1e-9)
    assert float(to_numpy(opt.weight_decay)) == 0.0 and opt.global_clipnorm == 1.0
    accumulate = training.masked_patch_optimizer(100, global_batch_size=4096, device_batch_size=1024)
    assert accumulate.gradient_accumulation_steps == 4


def test_raw_value_range_pipeline():
    tf = pytest.importorskip("tensorflow", reason="the pipelines need TensorFlow")
    from keras_vit.training import data

    images = np.full((4, 8, 8, 3), 200, "uint8")
    ds = tf.data.Dataset.from_tensor_slices((images, np.arange(4)))
    x, _ = next(iter(data.train_pipeline(ds, 16, 2, mode=None, area_range=(1, 1), flip=False)))
    np.testing.assert_allclose(x.numpy(), 200.0)
    x, _, w = next(iter(data.eval_pipeline(ds, 16, 3, mode=None)))
    np.testing.assert_allclose(x.numpy(), 200.0)

# Fitting over several devices (mirrored, data_parallel): test_training_distribute.py.
