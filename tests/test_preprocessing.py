"""`preprocess_input` (NumPy, backend tensors, tf.data) and `decode_predictions`."""

import gzip
import re
import types

import keras
import numpy as np
import pytest

import keras_vit
from conftest import DEIT_NPZ, SHARED, requires_shared, spread, to_numpy
from keras_vit import labels, preprocessing
from keras_vit.preprocessing import center_crop, preprocess_input
from keras_vit.tasks.classification import decode_predictions
from keras_vit.weights.registry import get_record

pytestmark = spread("preprocessing is NumPy and keras.ops arithmetic; each case once")

LABELS = SHARED / "labels"
requires_labels = pytest.mark.skipif(
    not (LABELS / "imagenet_synset_to_lemma.txt").exists(),
    reason=f"the source label lists are not at {LABELS} (../shared is absent)",
)
# Published ImageNet statistics (DeiT / timm / torchvision).
MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])


def _images(dtype="uint8", shape=(3, 8, 8, 3)):
    x = np.random.default_rng(0).integers(0, 256, shape)
    x.flat[:2] = (0, 255)  # both ends of the range
    return x.astype(dtype)


def _expected(x, mode):
    """NumPy float32: `x * scale + offset`, constants from the definitions."""
    if mode == "inception":
        scale, offset = 1 / 127.5, -1.0
    else:
        scale, offset = 1 / (255 * STD), -MEAN / STD
    x = x.astype("float32")
    return x * np.asarray(scale, "float32") + np.asarray(offset, "float32")


def _definition(x, mode):
    x = x.astype("float64")
    return x / 127.5 - 1 if mode == "inception" else (x / 255 - MEAN) / STD


@pytest.mark.parametrize("mode", ["inception", "imagenet"])
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_numpy_exact(mode, dtype):
    x = _images(dtype)
    y = preprocess_input(x, mode=mode)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    np.testing.assert_array_equal(y, _expected(x, mode))
    # Within 2 float32 ulp of the formula evaluated in float64.
    ref = _definition(x, mode)
    ulp = np.spacing(np.abs(ref).astype("float32").max())
    assert np.abs(y - ref).max() <= 2 * ulp
    if mode == "inception":
        assert y.min() == -1 and y.max() == 1


@pytest.mark.parametrize("mode", ["inception", "imagenet"])
def test_backend_tensor_exact(mode):
    x = _images()
    y = preprocess_input(keras.ops.convert_to_tensor(x), mode=mode)
    assert keras.ops.is_tensor(y)
    assert keras.backend.standardize_dtype(y.dtype) == "float32"
    np.testing.assert_array_equal(to_numpy(y), _expected(x, mode))


def test_symbolic_input_in_a_model():
    inputs = keras.Input((8, 8, 3), dtype="uint8")
    model = keras.Model(inputs, preprocess_input(inputs, mode="imagenet"))
    x = _images()
    np.testing.assert_array_equal(to_numpy(model(x)), _expected(x, "imagenet"))


@pytest.mark.parametrize("mode", ["inception", "imagenet"])
def test_tf_data_pipeline(mode):
    # tf.data runs the map function as a TensorFlow graph under every Keras
    # backend, so the function must not need the backend's ops.
    import tensorflow as tf

    x = _images(shape=(5, 8, 8, 3))
    labels_ = np.arange(5)
    ds = (
        tf.data.Dataset.from_tensor_slices((x, labels_))
        .map(lambda image, label: (preprocess_input(image, mode=mode), label))
        .batch(2)
    )
    batches = [(image.numpy(), label.numpy()) for image, label in ds]
    images = np.concatenate([b[0] for b in batches])
    assert images.dtype == np.float32
    np.testing.assert_array_equal(images, _expected(x, mode))
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), labels_)
    # Float tensors keep their dtype.
    eager = preprocess_input(tf.constant(x, tf.float64), mode=mode)
    assert eager.dtype == tf.float64


def test_weights_select_mode():
    x = _images()
    inception = _expected(x, "inception")
    np.testing.assert_array_equal(preprocess_input(x, weights="imagenet21k"), inception)
    record = get_record("B/16", "augreg-i21k")
    np.testing.assert_array_equal(preprocess_input(x, weights=record), inception)
    deit = types.SimpleNamespace(preprocessing_mode="imagenet")
    np.testing.assert_array_equal(
        preprocess_input(x, weights=deit), _expected(x, "imagenet")
    )
    with pytest.warns(UserWarning, match=r"no `mode`.*scaled with mode='inception'.*model=model"):
        np.testing.assert_array_equal(preprocess_input(x), inception)
    np.testing.assert_array_equal(preprocess_input(x, mode="tf"), inception)
    np.testing.assert_array_equal(
        preprocess_input(x, mode="torch"), _expected(x, "imagenet")
    )


def test_argument_errors():
    x = _images()
    with pytest.raises(ValueError, match="`mode` must be one of .*mode='caffe'"):
        preprocess_input(x, mode="caffe")
    with pytest.raises(ValueError, match="'imagenet21k'.*weights='in1k'"):
        preprocess_input(x, weights="in1k")
    with pytest.raises(ValueError, match="disagree"):
        preprocess_input(x, mode="imagenet", weights="imagenet21k")
    with pytest.raises(ValueError, match="`preprocessing_mode` attribute"):
        preprocess_input(x, weights=3)
    with pytest.raises(ValueError, match=r"images.shape=\(2, 4, 4, 1\)"):
        preprocess_input(np.zeros((2, 4, 4, 1)), mode="imagenet")
    # Any channel count is fine for the per-pixel [-1, 1] scaling.
    assert preprocess_input(np.zeros((2, 4, 4, 1)), mode="inception").shape == (2, 4, 4, 1)


def _source_lines(name):
    return (LABELS / name).read_text().split()


def _source_names():
    table = {}
    for line in (LABELS / "imagenet_synset_to_lemma.txt").read_text().splitlines():
        synset, lemma = line.split("\t")
        table[synset] = lemma.split(",")[0].strip().replace(" ", "_")
    return table


@requires_labels
def test_packaged_labels_equal_sources():
    assert list(labels.synsets(1000)) == _source_lines("imagenet_synsets.txt")
    assert list(labels.synsets(21843)) == _source_lines("imagenet21k_goog_synsets.txt")
    with gzip.open(labels._HERE + "/synset_lemmas.txt.gz", "rt") as f:
        packaged = f.read()
    assert packaged == (LABELS / "imagenet_synset_to_lemma.txt").read_text()


@requires_labels
@pytest.mark.parametrize(
    "classes, synset_file, picks",
    [
        (1000, "imagenet_synsets.txt", (281, 282, 285)),
        (21843, "imagenet21k_goog_synsets.txt", (2398, 12345, 21842)),
    ],
)
def test_decode_predictions(classes, synset_file, picks):
    synsets = _source_lines(synset_file)
    names = _source_names()
    preds = np.full((2, classes), 1e-6, "float32")
    preds[0, list(picks)] = (0.5, 0.3, 0.2)
    preds[1, list(picks)] = (0.1, 0.2, 0.6)
    decoded = decode_predictions(keras.ops.convert_to_tensor(preds), top=3)
    assert len(decoded) == 2 and all(len(d) == 3 for d in decoded)
    for b, order in enumerate(((0, 1, 2), (2, 1, 0))):
        for (synset, name, score), j in zip(decoded[b], order):
            i = picks[j]
            assert synset == synsets[i]
            assert name == names[synsets[i]]
            assert score == float(preds[b, i])
    if classes == 1000:
        assert decoded[0][0][:2] == ("n02123045", "tabby")  # the source files' 281


def test_decode_predictions_of_a_logits_model_gives_probabilities():
    """A fine-tuned model's head outputs logits (`classifier_activation=None`);
    with `model=` its scores come back as probabilities, as `classify` and
    `keras-vit inspect` report them."""
    model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1, num_heads=2,
                          mlp_dim=16, classes=3, classifier_activation=None,
                          class_names=("cat", "dog", "fish"))
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    logits = to_numpy(model.predict(x, verbose=0)).astype("float64")
    logits[0] = (-1.59, 2.0, 0.5)  # the scores of a real run: negative, summing to 0.91
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    decoded = decode_predictions(logits.astype("float32"), top=3, model=model)
    for row, probabilities in zip(decoded, expected):
        assert [i for i, _, _ in row] == list(np.argsort(-probabilities))
        assert [score for _, _, score in row] == pytest.approx(np.sort(probabilities)[::-1], abs=1e-6)
    assert decoded[0][0][1] == "dog"
    # Probabilities already (softmax taken by the caller) are kept as they are.
    again = decode_predictions(expected.astype("float32"), top=3, model=model)
    assert [s for _, _, s in again[1]] == pytest.approx(np.sort(expected[1])[::-1], abs=1e-6)
    # A softmax head's outputs are its probabilities: shown unchanged.
    softmax_head = keras_vit.ViT.from_config({**model.get_config(), "classifier_activation": "softmax"})
    scores = decode_predictions(np.array([[0.2, 0.5, 0.3]], "float32"), top=1, model=softmax_head)
    assert scores[0][0][1:] == ("dog", pytest.approx(0.5))


def test_decode_predictions_errors():
    for shape in ((2, 10), (1000,), (1, 2, 1000)):
        with pytest.raises(ValueError, match=re.escape(f"preds.shape={shape}")):
            decode_predictions(np.zeros(shape))
    with pytest.raises(ValueError, match="`top`"):
        decode_predictions(np.zeros((1, 1000)), top=0)
    with pytest.raises(ValueError, match="`classes`"):
        labels.synsets(10)


@requires_shared
def test_real_weights_classify_photos():
    # DeiT-Tiny expects ImageNet mean/std inputs; ../shared/README.md gives
    # the expected classes: the cat -> 281/282/285 (~0.85 together), the
    # coffee -> 967 espresso (~0.85).
    skimage_data = pytest.importorskip("skimage.data")
    model = keras_vit.ViTTi16(weights=str(DEIT_NPZ), mlp_activation="gelu")
    deit = types.SimpleNamespace(preprocessing_mode="imagenet")
    photos = (skimage_data.chelsea(), skimage_data.coffee())
    expected = ((281, 282, 285), (967,))
    # The DeiT evaluation crop: shorter side to 256 (bicubic), centre 224.
    x = np.stack([center_crop(image, 224) for image in photos]).astype("float32")
    # One batch and predict(): a single compiled forward pass per call.
    probs = model.predict(preprocess_input(x, weights=deit), verbose=0)
    # The [-1, 1] scaling of the Google checkpoints is wrong for DeiT.
    wrong = model.predict(preprocess_input(x, mode="inception"), verbose=0)
    decoded = decode_predictions(probs, top=3)
    for i, classes in enumerate(expected):
        assert probs[i, list(classes)].sum() > 0.75
        assert wrong[i, list(classes)].sum() < probs[i, list(classes)].sum() - 0.05
        top = {synset for synset, _, _ in decoded[i][: len(classes)]}
        assert top == {labels.synsets(1000)[c] for c in classes}


def test_center_crop_geometry_and_content():
    # 300x450 at 0.875: the shorter side becomes 224 / 0.875 = 256, the
    # longer 450 * 256 / 300 = 384; the crop starts at (16, 80).
    assert preprocessing.crop_geometry(300, 450, (224, 224), 0.875) == (256, 384, 16, 80)
    image = np.zeros((300, 450, 3), "uint8")
    image[:, 150:300] = 255  # the central third of the columns
    crop = center_crop(image, 224)
    assert crop.shape == (224, 224, 3) and crop.dtype == np.uint8
    # Resized columns 128-256 are white: crop columns 48-176.
    assert crop[:, 60:164].min() == 255 and crop[:, :36].max() == 0 and crop[:, 190:].max() == 0
    batch = center_crop(np.stack([image, image]), (224, 160), crop_fraction=1.0)
    assert batch.shape == (2, 224, 160, 3)


def test_center_crop_numpy_and_tf_data_agree():
    tf = pytest.importorskip("tensorflow")
    rows, cols = np.meshgrid(np.arange(60), np.arange(90), indexing="ij")
    image = np.stack([rows * 2, cols, rows + cols], axis=-1).astype("float32")
    expected = center_crop(image, 32, crop_fraction=0.8, interpolation="bilinear")
    dataset = tf.data.Dataset.from_tensors(image).map(
        lambda x: center_crop(x, 32, crop_fraction=0.8, interpolation="bilinear")
    )
    got = next(iter(dataset)).numpy()
    assert got.shape == expected.shape == (32, 32, 3)
    # Pillow and TensorFlow sample the same linear ramps.
    np.testing.assert_allclose(got, expected, atol=1.0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(crop_fraction=0.0), "crop_fraction"),
        (dict(crop_fraction=1.5), "crop_fraction"),
        (dict(interpolation="nearest"), "interpolation"),
        (dict(size=0), "size"),
    ],
)
def test_center_crop_rejects_bad_arguments(kwargs, message):
    arguments = dict(dict(size=8), **kwargs)
    with pytest.raises(ValueError, match=message):
        center_crop(np.zeros((10, 10, 3), "uint8"), **arguments)
    with pytest.raises(ValueError, match="images"):
        center_crop(np.zeros((10, 10), "uint8"), 8)


def test_pixels_that_look_scaled_already_get_a_warning():
    """[0, 1] floats (`load_img(...) / 255`, `skimage.img_as_float`) scaled as
    [0, 255] become a near-constant image: a warning says so."""
    import warnings

    photo = np.random.default_rng(0).uniform(0, 255, (2, 8, 8, 3)).astype("float32")
    with pytest.warns(UserWarning, match=r"values in \[0, 1\] \(max 0\.99.*Multiply \[0, 1\] images by 255"):
        preprocess_input(photo / 255.0, mode="inception")
    with pytest.warns(UserWarning, match=r"negative values \(min -0\.9"):
        preprocess_input(photo / 127.5 - 1, mode="inception")  # preprocessed twice
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fine in (photo, photo.astype("uint8"), np.zeros((1, 4, 4, 3), "float32")):
            preprocess_input(fine, mode="inception")
