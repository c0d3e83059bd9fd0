"""Input pipelines: transforms, batching, tfds and image-folder datasets."""

import os

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="the input pipelines need TensorFlow")

from keras_vit.training import data, datasets  # noqa: E402
from conftest import spread

pytestmark = spread("the pipelines are tf.data under every backend; each case once")


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


def _oriented_pngs(root):
    """One 5 x 7 picture saved with each EXIF orientation, over two class folders."""
    from PIL import Image

    pixels = (np.arange(5 * 7 * 3).reshape(5, 7, 3) * 2).astype(np.uint8)
    for orientation in range(1, 9):
        folder = root / ("a" if orientation % 2 else "b")
        folder.mkdir(exist_ok=True)
        image = Image.fromarray(pixels)
        exif = image.getexif()
        exif[0x0112] = orientation
        image.save(folder / f"{orientation}.png", exif=exif)
    return pixels


def test_folder_pipeline_turns_photos_upright_as_classify_does(tmp_path):
    """A phone photo's EXIF orientation is applied in training as in use
    (`keras_vit.classify` reads with Pillow's `exif_transpose`)."""
    from PIL import Image, ImageOps

    from keras_vit.tasks.images import read_images

    pixels = _oriented_pngs(tmp_path)
    _, paths, _ = datasets.list_image_folder(str(tmp_path))
    orientations = datasets.exif_orientations(paths)
    assert sorted(orientations) == list(range(1, 9))
    source = datasets.image_folder_source(str(tmp_path))
    for path, orientation, (x, _) in zip(paths, orientations, source.dataset):
        with Image.open(path) as image:
            expected = np.asarray(ImageOps.exif_transpose(image).convert("RGB"))
        assert np.array_equal(expected, pixels) == (orientation == 1)
        np.testing.assert_array_equal(x.numpy(), expected, err_msg=f"orientation {orientation}")
        np.testing.assert_array_equal(read_images(path)[0], expected)
    # 6, the usual portrait photo: the pixels turned a quarter clockwise.
    six = dict(zip(orientations, source.dataset))[6][0].numpy()
    np.testing.assert_array_equal(six, np.rot90(pixels, -1))


def test_a_rotated_jpeg_trains_upright(tmp_path):
    import skimage.data
    from PIL import Image

    from keras_vit.tasks.images import read_images

    photo = skimage.data.chelsea()[:120, :200]
    for name in ("cat", "dog"):
        (tmp_path / name).mkdir()
        image = Image.fromarray(photo)
        exif = image.getexif()
        exif[0x0112] = 6
        image.save(tmp_path / name / "phone.jpg", exif=exif, quality=95)
    x, _ = next(iter(datasets.image_folder_source(str(tmp_path)).dataset))
    used = read_images(str(tmp_path / "cat" / "phone.jpg"))[0]
    assert x.shape == used.shape == (200, 120, 3)
    # Two JPEG decoders (their chroma upsampling differs): within levels.
    assert np.abs(x.numpy().astype(float) - used).mean() < 2.5
    # Turned a quarter clockwise, not the other way.
    assert np.abs(x.numpy().astype(float) - np.rot90(photo, -1)).mean() < 4
    assert np.abs(x.numpy()[::-1, ::-1].astype(float) - np.rot90(photo, -1)).mean() > 20


def test_sixteen_bit_images_read_alike_in_training_and_in_use(tmp_path):
    """16-bit grey levels keep their high byte everywhere (TensorFlow's
    decoder's reading), never clipped to white."""
    from PIL import Image

    from keras_vit.tasks.images import read_images

    levels = np.tile(np.array([0, 255, 256, 4095, 32768, 65280, 65535], np.uint16), (3, 1))
    expected = np.repeat((levels // 256).astype(np.uint8)[..., None], 3, axis=-1)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        Image.fromarray(levels).save(tmp_path / name / "scan.png")
    with Image.open(tmp_path / "a" / "scan.png") as image:
        assert image.mode.startswith("I")
    x, _ = next(iter(datasets.image_folder_source(str(tmp_path)).dataset))
    np.testing.assert_array_equal(x.numpy(), expected)
    np.testing.assert_array_equal(read_images(str(tmp_path / "a" / "scan.png"))[0], expected)
    np.testing.assert_array_equal(read_images(levels)[0], expected)
    with pytest.raises(ValueError, match="floating-point image"):
        read_images(Image.fromarray(levels.astype(np.float32)))
    with pytest.raises(ValueError, match=r"outside 0..65535 \(from -5"):
        read_images(Image.fromarray(np.full((2, 2), -5, np.int32)))


def test_webp_photos_are_listed_and_undecoded_formats_named(tmp_path):
    from PIL import Image

    _write_jpegs(str(tmp_path), per_class=2)
    Image.fromarray(np.full((20, 24, 3), 90, np.uint8)).save(tmp_path / "cat" / "web.webp", lossless=True)
    (tmp_path / "dog" / "phone.HEIC").write_bytes(b"not decoded here")
    (tmp_path / "dog" / "notes.txt").write_text("not an image")
    with pytest.warns(UserWarning, match=r"Leaving out 1 image file\(s\).*\.heic: 1.*phone\.HEIC"):
        source = datasets.image_folder_source(str(tmp_path))
    assert source.num_examples == 5
    webp = [x.numpy() for x, y in source.dataset if int(y) == 0 and x.shape[0] == 20 and x.numpy()[0, 0, 0] == 90]
    assert len(webp) == 1 and np.all(webp[0] == 90)
