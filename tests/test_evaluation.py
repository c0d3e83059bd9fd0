"""Tests of `keras_vit.inspection.evaluation` (few-shot linear evaluation, paper §4.1)."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from conftest import DEIT_NPZ, IMAGENET_MEAN as MEAN, IMAGENET_STD as STD, ROOT, requires_shared, runs_once, spread
from PIL import Image

import keras_vit
from keras_vit.inspection.evaluation import few_shot_linear, fit_least_squares

pytestmark = spread("the few-shot probe is NumPy over features of models held on every backend; each case "
                    "once")



# Five Gaussian blobs far apart (centres ~10 apart, spread 0.5): a linear
# read-out must classify every point.
CENTRES = np.random.default_rng(10).normal(0, 10, (5, 12))


def _clusters(rng, n=300):
    labels = np.arange(n) % len(CENTRES)
    points = CENTRES[labels] + rng.normal(0, 0.5, (n, CENTRES.shape[1]))
    return points.astype("float32"), labels


class _Recorder:
    """Identity features that remember the batches they were given."""

    def __init__(self):
        self.calls = []

    def __call__(self, batch):
        self.calls.append(np.array(batch))
        return batch


@pytest.mark.parametrize("n", [8, 60])
def test_least_squares_equals_ridge(n):
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(0)
    x, labels = rng.normal(size=(n, 20)) * 3 + 1, np.arange(n) % 4
    targets = np.where(np.eye(4)[labels] > 0, 1.0, -1.0)
    new = rng.normal(size=(5, 20))
    # The documented model: ridge with free bias on (x - mean) / std(x).
    mean, scale = x.mean(0), x.std()
    ridge = Ridge(alpha=2.0, fit_intercept=True).fit((x - mean) / scale, targets)
    predict = fit_least_squares(x, labels, 4, l2_reg=2.0)
    np.testing.assert_allclose(predict(new), ridge.predict((new - mean) / scale), atol=1e-8)


def test_separable_problem_is_solved_exactly():
    rng = np.random.default_rng(1)
    train, test = _clusters(rng), _clusters(rng)
    # A frozen Keras feature extractor (here the identity) works like a callable.
    extractor = keras.Sequential(
        [keras.Input((12,)), keras.layers.Dense(12, kernel_initializer="identity", use_bias=False)]
    )
    result = few_shot_linear(extractor, train, test, shots=3)
    assert result.accuracy == 1.0
    assert (result.shots, result.num_classes, result.num_train, result.num_test) == (3, 5, 15, 300)


def test_sampling_is_per_class_and_seeded():
    rng = np.random.default_rng(2)
    train, test = _clusters(rng), _clusters(rng, n=10)

    def picked(seed):
        recorder = _Recorder()
        few_shot_linear(recorder, train, test, shots=4, seed=seed)
        return recorder.calls[0]

    first, again, other = picked(0), picked(0), picked(1)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    rows = {tuple(r): i for i, r in enumerate(train[0])}
    labels = train[1][[rows[tuple(r)] for r in first]]
    np.testing.assert_array_equal(labels, np.repeat(np.arange(5), 4))


def test_tf_data_source_matches_arrays():
    import tensorflow as tf

    rng = np.random.default_rng(3)
    (x, y), test = _clusters(rng), _clusters(rng, n=50)
    arrays, dataset = _Recorder(), _Recorder()
    expected = few_shot_linear(arrays, (x, y), test, shots=5, seed=7)
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(7)
    test_ds = tf.data.Dataset.from_tensor_slices(test)  # unbatched pairs
    got = few_shot_linear(dataset, train, test_ds, shots=5, seed=7, num_classes=5)
    np.testing.assert_allclose(dataset.calls[0], arrays.calls[0])
    assert got.accuracy == expected.accuracy and got.num_test == 50


@runs_once("jax", "the child process runs under jax whatever the job's backend")
def test_tensorflow_is_imported_only_for_tf_data():
    code = (
        "import sys, numpy as np\n"
        "from keras_vit.inspection.evaluation import few_shot_linear\n"
        "x = np.eye(3)[np.arange(30) % 3]\n"
        "few_shot_linear(lambda b: b, (x, np.arange(30) % 3), (x, np.arange(30) % 3), shots=2)\n"
        "assert 'tensorflow' not in sys.modules\n"
    )
    env = dict(os.environ, KERAS_BACKEND="jax")
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True)


def test_argument_errors():
    rng = np.random.default_rng(4)
    train = _clusters(rng, n=20)
    with pytest.raises(ValueError, match="shots=5"):
        few_shot_linear(lambda b: b, train, train, shots=5)
    with pytest.raises(ValueError, match="shots"):
        few_shot_linear(lambda b: b, train, train, shots=0)
    with pytest.raises(ValueError, match="l2_reg"):
        few_shot_linear(lambda b: b, train, train, shots=2, l2_reg=-1.0)
    with pytest.raises(ValueError, match="tf.data"):
        few_shot_linear(lambda b: b, [1, 2, 3], train, num_classes=5)


@requires_shared
@runs_once("torch", "the linear probe is NumPy; the real weights' forward is held on every backend "
           "by test_export, test_quantization and test_mixed_precision")
def test_real_weights_few_shot_digits():
    """10-shot, 10-class linear accuracy of DeiT-Ti features on digits."""
    from sklearn.datasets import load_digits

    model = keras_vit.ViTTi16(
        weights=str(DEIT_NPZ), mlp_activation="gelu", include_top=False, pooling="token"
    )

    def features(digits):
        # 8x8 digits -> 224x224 grey images -> ImageNet normalisation.
        big = [
            np.asarray(Image.fromarray(d).resize((224, 224), Image.BICUBIC), "float32")
            for d in (digits * 255 / 16).astype("uint8")
        ]
        rgb = np.repeat(np.stack(big)[..., None] / 255.0, 3, axis=-1)
        return model.predict_on_batch(((rgb - MEAN) / STD).astype("float32"))

    digits = load_digits()
    images, labels = digits.images, digits.target
    pool = (images[:600], labels[:600])
    held_out = np.concatenate(
        [np.flatnonzero(labels[1000:] == c)[:5] + 1000 for c in range(10)]
    )
    # One batch shape (50) for every forward pass: a single compilation.
    result = few_shot_linear(
        features, pool, (images[held_out], labels[held_out]), shots=10, seed=0,
        batch_size=50,
    )
    # Chance is 0.1. Measured: 0.86 on these 50 digits, 0.78-0.83 over
    # seeds 0-2 on all 797 held-out digits; 0.5 leaves room for the noise
    # of a 50-image estimate (about 0.05).
    assert result.accuracy >= 0.5, result
    assert result.num_train == 100 and result.num_test == 50
