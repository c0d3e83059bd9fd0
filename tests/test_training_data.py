"""Input pipelines: transforms, batching, tfds and image-folder datasets."""

import os

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="the input pipelines need TensorFlow")

from keras_vit.training import data, datasets  # noqa: E402


def _dataset(n=5, size=(20, 28), seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n,) + size + (3,), dtype=np.uint8)
    return images, np.arange(n) % 3


@pytest.mark.parametrize("mode", ["inception", "imagenet"])
def test_value_range_matches_numpy(mode):
    x = np.linspace(0, 255, 2 * 2 * 3, dtype="float32").reshape(2, 2, 3)
    if mode == "inception":
        expected = x / 127.5 - 1
    else:
        expected = (x / 255 - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
    np.testing.assert_allclose(data.value_range(x, mode).numpy(), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="mode"):
        data.value_range(x, "caffe")


def test_eval_pipeline_resizes_pads_and_weights():
    images, labels = _dataset(5)
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    batches = list(data.eval_pipeline(ds, 16, batch_size=4))
    assert len(batches) == 2
    for x, y, w in batches:
        assert tuple(x.shape) == (4, 16, 16, 3) and x.dtype == tf.float32
        assert tuple(y.shape) == (4,) and tuple(w.shape) == (4,)
    np.testing.assert_array_equal(np.concatenate([b[2] for b in batches]), [1] * 5 + [0] * 3)
    np.testing.assert_array_equal(batches[0][1], labels[:4])
    # The whole image is resized (no crop): an antialiased bilinear resize of the source.
    expected = tf.image.resize(images[:1].astype("float32"), (16, 16), antialias=True).numpy() / 127.5 - 1
    np.testing.assert_allclose(batches[0][0][:1], expected, atol=1e-5)
    assert float(tf.reduce_max(tf.abs(batches[-1][0][1:]))) == 0.0


def test_eval_central_crop():
    image = np.zeros((40, 20, 3), np.uint8)
    image[10:30] = 255  # central band: exactly what a full central crop keeps
    ds = tf.data.Dataset.from_tensor_slices((image[None], [0]))
    x, _, _ = next(iter(data.eval_pipeline(ds, 20, batch_size=1, crop_fraction=1.0)))
    np.testing.assert_allclose(x.numpy(), np.ones((1, 20, 20, 3)), atol=1e-5)


def test_train_pipeline_crops_flips_and_batches():
    images, labels = _dataset(6)
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    it = iter(data.train_pipeline(ds, (16, 8), batch_size=4, seed=1))
    for _ in range(3):  # repeats past the 6 examples, full batches only
        x, y = next(it)
        assert tuple(x.shape) == (4, 16, 8, 3) and tuple(y.shape) == (4,)
        assert float(tf.reduce_min(x)) >= -1 and float(tf.reduce_max(x)) <= 1


def test_inception_crop_area():
    image = tf.zeros((100, 100, 3))
    areas = []
    for seed in range(20):
        tf.random.set_seed(seed)
        crop = data.inception_crop(image, area_range=(0.05, 0.3))
        areas.append(int(crop.shape[0]) * int(crop.shape[1]) / 1e4)
    assert min(areas) >= 0.04 and max(areas) <= 0.31
    assert len(set(areas)) > 1


def test_flip_only_mirrors():
    image = np.zeros((1, 8, 8, 3), np.uint8)
    image[0, :, :4] = 255
    ds = tf.data.Dataset.from_tensor_slices((image, [0]))
    seen = set()
    transform = data.train_transform(8, area_range=(1.0, 1.0), flip=True)
    for seed in range(16):
        tf.random.set_seed(seed)
        x, _ = transform(image[0], 0)
        seen.add(float(x[0, 0, 0]))
    assert seen == {1.0, -1.0}
    del ds


def test_tfds_source_with_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6):
        source = datasets.tfds_source("cifar10", "train")
        assert len(source.class_names) == 10
        batch = next(iter(data.train_pipeline(source.dataset, 16, batch_size=3)))
    assert tuple(batch[0].shape) == (3, 16, 16, 3)
    assert batch[1].dtype == tf.int32 and int(tf.reduce_max(batch[1])) < 10


def _write_pngs(root, classes=("cat", "dog"), per_class=3):
    rng = np.random.default_rng(0)
    for label, name in enumerate(classes):
        os.makedirs(os.path.join(root, name))
        for i in range(per_class):
            size = (12 + i, 10 + 2 * i)
            pixels = np.full(size + (3,), 40 + 150 * label, np.uint8)
            pixels[0, 0] = rng.integers(0, 256, 3)
            png = tf.io.encode_png(pixels).numpy()
            with open(os.path.join(root, name, f"{i}.png"), "wb") as f:
                f.write(png)


def test_image_folder_source(tmp_path):
    _write_pngs(str(tmp_path))
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    source = datasets.image_folder_source(str(tmp_path))
    assert source.class_names == ["cat", "dog"] and source.num_examples == 6
    pairs = [(x.numpy(), int(y)) for x, y in source.dataset]
    assert [y for _, y in pairs] == [0, 0, 0, 1, 1, 1]
    assert all(x[1, 1, 0] == (40 if y == 0 else 190) for x, y in pairs)
    x, y, w = next(iter(data.eval_pipeline(source.dataset, 8, batch_size=6)))
    assert tuple(x.shape) == (6, 8, 8, 3)
    train = datasets.image_folder_source(str(tmp_path), validation_split=0.5, subset="training")
    held = datasets.image_folder_source(str(tmp_path), validation_split=0.5, subset="validation")
    assert train.num_examples + held.num_examples == 6
    with pytest.raises(ValueError, match="directory"):
        datasets.image_folder_source(str(tmp_path / "missing"))


def test_load_source_specs(tmp_path):
    for split in ("train", "test"):
        _write_pngs(str(tmp_path / split))
    assert datasets.load_source(str(tmp_path), "test").num_examples == 6
    digits = datasets.load_source("digits", "test")
    x, y = next(iter(digits.dataset))
    assert tuple(x.shape) == (8, 8, 3) and x.dtype == tf.uint8 and 0 <= int(y) < 10
    (train_x, _), (test_x, _) = datasets.digits_arrays()
    assert len(train_x) + len(test_x) == 1797 and digits.num_examples == len(test_x)


@pytest.mark.parametrize("crop_fraction", [None, 0.875])
def test_eval_pipeline_resizes_a_photo_as_pillow_and_classify_do(crop_fraction):
    """A photo shrunk to the model's size by the evaluation pipeline is the
    one `keras_vit.classify` (Pillow's bilinear filter) prepares: the held-out
    accuracy a run prints is the accuracy the saved model has in use."""
    import skimage.data
    from PIL import Image

    from keras_vit.preprocessing import Preprocessing, resize_and_crop

    photo = skimage.data.chelsea()  # 300 x 451
    ds = tf.data.Dataset.from_tensor_slices((photo[None], [0]))
    x, _, _ = next(iter(data.eval_pipeline(ds, 32, batch_size=1, crop_fraction=crop_fraction)))
    pixels = (x.numpy()[0] + 1) * 127.5
    if crop_fraction is None:  # straight to 32 x 32, Pillow's bilinear filter
        expected = np.asarray(Image.fromarray(photo).resize((32, 32), Image.BILINEAR), "float32")
    else:
        record = Preprocessing.from_mode("inception", image_size=32, crop_fraction=crop_fraction,
                                         interpolation="bilinear")
        expected = resize_and_crop(photo, record).astype("float32")
    # Unfiltered, the same resize differs by 8.6 levels on average, 75 at most.
    assert np.abs(pixels - expected).mean() < 1.0
    assert np.abs(pixels - expected).max() < 12


def _write_jpegs(root, classes=("cat", "dog"), per_class=4):
    from PIL import Image

    for label, name in enumerate(classes):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            Image.fromarray(np.full((20, 24, 3), 60 * (label + 1) + i, np.uint8)).save(
                os.path.join(root, name, f"{i}.jpg"), quality=95)


def test_folder_sources_name_images_that_do_not_decode(tmp_path):
    _write_jpegs(str(tmp_path))
    whole = (tmp_path / "cat" / "0.jpg").read_bytes()
    (tmp_path / "cat" / "truncated.jpg").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "dog" / "notes.png").write_text("not an image")
    with pytest.raises(ValueError) as error:
        datasets.image_folder_sources(str(tmp_path), 0.25)
    message = str(error.value)
    assert "2 of 10 images cannot be decoded" in message
    assert str(tmp_path / "cat" / "truncated.jpg") in message and str(tmp_path / "dog" / "notes.png") in message
    assert "unreadable='skip'" in message
    with pytest.warns(UserWarning, match="Skipping 2 of 10 images"):
        train, held = datasets.image_folder_sources(str(tmp_path), 0.25, unreadable="skip")
    assert (train.num_examples, held.num_examples) == (6, 2)
    # Every image left decodes: the pipeline runs through the whole folder.
    assert len(list(train.dataset)) == 6 and len(list(held.dataset)) == 2
    assert [p for p, _ in datasets.unreadable_images([str(tmp_path / "cat" / "1.jpg")])] == []


@pytest.mark.parametrize(
    "layout, message",
    [
        ("missing", "No folder at"),
        ("file", "is a file"),
        ("one class", "at least two classes"),
        ("empty class", r"class folder\(s\) \['fish'\] hold no image"),
    ],
)
def test_folder_problems_are_named(tmp_path, layout, message):
    root = tmp_path / "photos"
    if layout == "file":
        root.write_text("x")
    elif layout != "missing":
        _write_jpegs(str(root), classes=("cat",) if layout == "one class" else ("cat", "dog"))
        if layout == "empty class":
            (root / "fish").mkdir()
    with pytest.raises(ValueError, match=message):
        datasets.image_folder_sources(str(root), 0.2)


def test_a_split_leaving_a_part_empty_is_refused(tmp_path):
    _write_jpegs(str(tmp_path), per_class=1)
    with pytest.raises(ValueError, match="holds out 0"):
        datasets.image_folder_sources(str(tmp_path), 0.2)
