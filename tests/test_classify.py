"""One resolver (`keras_vit.load_model`) and one call from image files to
named probabilities (`keras_vit.classify`), with each checkpoint's own resize,
filter, crop and scaling."""

import re

import numpy as np
import pytest
from PIL import Image

import keras_vit
from conftest import DEIT_NPZ, TINY, requires_shared, runs_once, spread, to_numpy
from keras_vit.preprocessing import Preprocessing, resize_and_crop
from keras_vit.presets import PresetDownloadError
from synthetic import official_params

pytestmark = spread("the resolver and the one-call classification over models held on every backend; each "
                    "case once")

CAT_CLASSES = {281, 282, 285}  # tabby, tiger cat, Egyptian cat


def _photo():
    import skimage.data

    return skimage.data.chelsea()  # 300 x 451, a real photo


def _softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_resize_and_crop_follow_the_record_as_pillow_does(interpolation):
    photo = _photo()
    method = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}[interpolation]
    # resize=None: straight to the input size, aspect ratio not kept (ViT's processor).
    straight = Preprocessing.from_mode("inception", image_size=(32, 48), interpolation=interpolation)
    expected = np.asarray(Image.fromarray(photo).resize((48, 32), method))
    np.testing.assert_array_equal(resize_and_crop(photo, straight), expected)
    # An int resize: the shorter side to 36 (the longer truncated, 54), then the centre 32.
    cropped = Preprocessing(image_size=32, resize=36, interpolation=interpolation)
    resized = np.asarray(Image.fromarray(photo).resize((54, 36), method))
    np.testing.assert_array_equal(resize_and_crop(photo, cropped), resized[2:34, 11:43])
    # Float pixels take the same geometry, plane by plane.
    floats = resize_and_crop(photo.astype("float32"), cropped)
    assert floats.dtype == np.float32 and np.abs(floats - resized[2:34, 11:43]).max() < 1.5


def test_load_images_reads_paths_pil_images_and_arrays_alike(tmp_path):
    photo = _photo()
    Image.fromarray(photo).save(tmp_path / "cat.png")
    model = keras_vit.ViT(**TINY, classes=3, preprocessing=Preprocessing.from_mode(
        "imagenet", image_size=32, interpolation="bilinear"))
    display, inputs = keras_vit.load_images(
        [str(tmp_path / "cat.png"), Image.fromarray(photo), photo, photo[..., :1]], model)
    assert display.shape == inputs.shape == (4, 32, 32, 3) and display.dtype == np.uint8
    expected = np.asarray(Image.fromarray(photo).resize((32, 32), Image.BILINEAR))
    for image in display[:3]:
        np.testing.assert_array_equal(image, expected)
    mean, std = np.array([(0.485, 0.456, 0.406), (0.229, 0.224, 0.225)])
    np.testing.assert_allclose(inputs[0], (expected / 255 - mean) / std, atol=1e-5)
    # The reload path never resizes with Keras' default "nearest".
    nearest = np.asarray(Image.fromarray(photo).resize((32, 32), Image.NEAREST))
    assert np.abs(display[0].astype(float) - nearest).mean() > 5


def test_classify_names_probabilities_of_a_logits_model(tmp_path):
    names = ["apple", "pear", "plum"]
    model = keras_vit.ViT(**TINY, classes=3, classifier_activation=None, class_names=names,
                          preprocessing=Preprocessing.from_mode("inception", image_size=32))
    model.get_layer("head").bias.assign(np.array([0.0, 2.0, 1.0], "float32"))
    photos = [_photo(), np.full((20, 30, 3), 200, "uint8")]
    results = keras_vit.classify(model, photos, top=5)
    assert [len(row) for row in results] == [3, 3]  # top is at most the classes
    _, inputs = keras_vit.load_images(photos, model)
    expected = _softmax(to_numpy(model.predict(inputs, verbose=0)).astype("float64"))
    for row, probabilities in zip(results, expected):
        assert [p.index for p in row] == list(np.argsort(-probabilities))
        assert [p.name for p in row] == [names[p.index] for p in row]
        np.testing.assert_allclose([p.probability for p in row], np.sort(probabilities)[::-1], atol=1e-6)
        assert isinstance(row[0], keras_vit.Prediction) and row[0] == (row[0].index, row[0].name, row[0].probability)


def test_classify_asks_for_the_scaling_a_model_does_not_record():
    model = keras_vit.ViT(**TINY, classes=3)
    with pytest.raises(ValueError, match="carries no preprocessing record.*preprocessing='inception'"):
        keras_vit.classify(model, _photo())
    assert len(keras_vit.classify(model, _photo(), top=2, preprocessing="inception")[0]) == 2
    with pytest.raises(ValueError, match="No image file at 'missing.jpg'"):
        keras_vit.classify(model, "missing.jpg", preprocessing="inception")


@pytest.mark.parametrize("classes", [1000, 21843, 5])
def test_classify_names_classes_only_from_the_model_record(classes):
    """A head's width never names its classes: a random 1000- or 21843-wide
    head gets indices and one warning, until its names are set."""
    import warnings

    from keras_vit import labels

    model = keras_vit.ViT(**TINY, classes=classes,
                          preprocessing=Preprocessing.from_mode("inception", image_size=32))
    image = np.zeros((40, 60, 3), "uint8")
    with pytest.warns(UserWarning, match="records no class names") as caught:
        first = keras_vit.classify(model, image, top=2)[0]
    assert [p.name for p in first] == [None, None]
    said = [str(w.message) for w in caught if "records no class names" in str(w.message)]
    assert len(said) == 1 and ("class_names='imagenet" in said[0]) == (classes in labels.NUM_CLASSES)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*class names")  # once per model
        keras_vit.classify(model, image, top=2)
    model.class_names = labels.list_name(classes) if classes in labels.NUM_CLASSES else list("abcde")
    named = keras_vit.classify(model, image, top=2)[0]
    assert [p.name for p in named] == [model.class_names[p.index] for p in named]
    assert all(p.name is not None for p in named)


@requires_shared
def test_classify_a_real_photo_from_the_deit_file(tmp_path):
    Image.fromarray(_photo()).save(tmp_path / "chelsea.jpg")
    model = keras_vit.load_model(str(DEIT_NPZ), mlp_activation="gelu", preprocessing="imagenet",
                                 class_names="imagenet1k")
    top = keras_vit.classify(model, str(tmp_path / "chelsea.jpg"), top=3)[0]
    assert {p.index for p in top} <= CAT_CLASSES | {283, 287}, top
    assert top[0].index in CAT_CLASSES and top[0].name in ("tabby", "tiger_cat", "Egyptian_cat")
    assert sum(p.probability for p in top) < 1 and top[0].probability > 0.2


def _official_file(tmp_path, rng):
    """A ViT-Ti/16-shaped official .npz at 32 px (architecture read from its shapes)."""
    params = official_params(rng, image_size=32, patch_size=16, hidden_size=192, num_layers=12,
                             num_heads=3, mlp_dim=768, classes=4)
    np.savez(tmp_path / "ti.npz", **params)
    return tmp_path / "ti.npz"


@runs_once("torch", "which model a name, file or folder means is read from tables and files; the "
           "models loaded are held on every backend by the model contract and test_serialization")
def test_load_model_takes_every_way_of_naming_a_model(tmp_path, rng):
    file = _official_file(tmp_path, rng)
    x = rng.normal(size=(1, 32, 32, 3)).astype("float32")
    with pytest.raises(ValueError, match="does not record the GELU.*mlp_activation='gelu'.*--gelu erf"):
        keras_vit.load_model(str(file))
    from_file = keras_vit.load_model(str(file), mlp_activation="gelu_tanh")
    assert from_file.name == "vitti16" and from_file.image_size == (32, 32) and from_file.classes == 4
    by_name = keras_vit.load_model("ViTTi16", weights=str(file), preprocessing="inception",
                                   mlp_activation="gelu_tanh")
    by_architecture = keras_vit.load_model("Ti/16", weights=str(file), mlp_activation="gelu_tanh")
    # The model name `keras-vit export` prints ("vitti16") names its constructor.
    by_model_name = keras_vit.load_model(from_file.name, weights=str(file), mlp_activation="gelu_tanh")
    by_name.save_to_preset(tmp_path / "preset")
    by_name.save(tmp_path / "model.keras")
    from_preset = keras_vit.load_model(str(tmp_path / "preset"))
    # Called, not `predict`ed: what is checked is the loading, and each
    # model's predict would be a compilation of its own (XLA on tensorflow).
    expected = to_numpy(from_file(x))
    for model in (by_name, by_architecture, by_model_name, from_preset,
                  keras_vit.load_model(tmp_path / "model.keras"), keras_vit.load_model(by_name)):
        np.testing.assert_allclose(to_numpy(model(x)), expected, atol=1e-5)
    assert from_preset.preprocessing.mode == "inception"
    assert keras_vit.load_model(str(file), mlp_activation="gelu").mlp_activation == "gelu"


@pytest.mark.parametrize(
    "source, kwargs, message",
    [
        ("ViTTi61", {}, "Unknown model 'ViTTi61'.*Did you mean 'ViTTi16'"),
        ("runs/gone", {}, r"No file or folder at 'runs/gone' \(resolved to"),
        ("gone.npz", {}, "No file or folder at 'gone.npz'"),
        (3, {}, "`source` must be"),
    ],
)
def test_load_model_names_what_is_wrong(source, kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.load_model(source, **kwargs)


def test_load_model_refuses_what_a_source_fixes(tmp_path):
    model = keras_vit.ViT(**TINY, classes=3)
    model.save_to_preset(tmp_path / "preset")
    with pytest.raises(ValueError, match="A preset holds its own weights"):
        keras_vit.load_model(str(tmp_path / "preset"), weights="imagenet21k")
    with pytest.raises(ValueError, match="A model is used as it is"):
        keras_vit.load_model(model, classes=4)
    model.save_weights(tmp_path / "w.weights.h5")  # arrays only, no architecture
    with pytest.raises(ValueError, match=r"Cannot tell which architecture .*--model ViTTi16"):
        keras_vit.load_model(str(tmp_path / "w.weights.h5"))


def test_load_model_reads_kaggle_handles_through_kagglehub(tmp_path, monkeypatch):
    """`kaggle://` handles (where keras-hub's presets live) are downloaded by
    kagglehub into its cache; the folder it returns is read as any preset."""
    kagglehub = pytest.importorskip("kagglehub")
    model = keras_vit.ViT(**TINY, classes=3, class_names=("a", "b", "c"))
    model.save_to_preset(tmp_path / "preset")
    asked = []

    def download(handle, *args, **kwargs):
        asked.append(handle)
        if handle.endswith("/gone"):
            raise ConnectionError("no network")
        return str(tmp_path / "preset")

    monkeypatch.setattr(kagglehub, "model_download", download)
    again = keras_vit.load_model("kaggle://me/vit/keras/tiny")
    assert asked == ["me/vit/keras/tiny"] and again.class_names == ("a", "b", "c")
    x = np.random.default_rng(0).normal(size=(1, *again.image_size, 3)).astype("float32")
    np.testing.assert_array_equal(to_numpy(again(x)), to_numpy(model(x)))  # called: no compilation per model
    with pytest.raises(PresetDownloadError, match="kaggle://me/vit/keras/gone.*no network"):
        keras_vit.load_model("kaggle://me/vit/keras/gone")
    with pytest.raises(ValueError, match="owner/model/framework/variation"):
        keras_vit.load_model("kaggle://me/vit")


@pytest.fixture
def web_folder(tmp_path):
    """`(folder, base URL)`: `folder` served over HTTP on loopback."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_images_are_read_from_urls_as_from_files(web_folder, capsys):
    from keras_vit.tasks.images import read_images
    from keras_vit_tools.commands import keras_vit as run_cli

    folder, base = web_folder
    photo = _photo()
    image = Image.fromarray(photo)
    exif = image.getexif()
    exif[0x0112] = 8
    image.save(folder / "cat.png", exif=exif)
    fetched = read_images(f"{base}/cat.png")[0]
    np.testing.assert_array_equal(fetched, read_images(str(folder / "cat.png"))[0])
    np.testing.assert_array_equal(fetched, np.rot90(photo, 1))  # upright, as from the file
    with pytest.raises(ValueError, match=r"Cannot read the image 'http://127\.0\.0\.1:\d+/dog\.png': HTTP 404"):
        read_images(f"{base}/dog.png")
    (folder / "notes.png").write_text("not an image")
    with pytest.raises(ValueError, match=r"Cannot read the image 'http://.*/notes\.png': cannot identify"):
        read_images(f"{base}/notes.png")
    model = keras_vit.ViT(**TINY, classes=3, class_names=["a", "b", "c"],
                          preprocessing=Preprocessing.from_mode("imagenet", image_size=32))
    model.save_to_preset(folder / "model")
    assert run_cli(["classify", str(folder / "model"), f"{base}/cat.png", "--top", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = keras_vit.classify(model, np.rot90(photo, 1), top=1)[0][0]
    assert lines[0] == f"{base}/cat.png" and lines[1].split()[1:] == [str(expected.index), expected.name]


@pytest.mark.parametrize("name", ["ViTTi16", "vitti16", "Ti/16", "ViT"])
def test_classify_refuses_an_architecture_name_without_weights(name, tmp_path, capsys):
    """A name alone builds random weights: classifying with them is refused,
    before anything is built or read, with the ways to give weights."""
    from keras_vit_tools.commands import keras_vit as run_cli

    message = rf"'{re.escape(name)}' names an architecture: without weights its model is randomly initialised"
    with pytest.raises(ValueError, match=message):
        keras_vit.classify(name, "never-read.jpg", preprocessing="imagenet")
    photo = Image.new("RGB", (8, 8))
    with pytest.raises(ValueError, match="augreg-i21k" if name != "ViT" else "preset name"):
        keras_vit.classify(name, photo, preprocessing="imagenet")
    photo.save(tmp_path / "photo.png")
    assert run_cli(["classify", name, "--preprocessing", "imagenet", str(tmp_path / "photo.png")]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_classify_reads_a_batch_of_images_at_a_time(monkeypatch):
    """Thousands of paths never sit in memory as pixels at once: each batch
    is read, run and let go; the results are those of one batch of all."""
    from keras_vit.tasks import classification

    model = keras_vit.ViT(**TINY, classes=3, preprocessing=Preprocessing.from_mode("imagenet", image_size=32))
    photos = [np.random.default_rng(i).integers(0, 256, (20 + i, 30, 3)).astype("uint8") for i in range(5)]
    whole = keras_vit.classify(model, photos, top=3, batch_size=5)
    read = []
    original = classification.load_images

    def counting(images, *args, **kwargs):
        read.append(len(images))
        return original(images, *args, **kwargs)

    monkeypatch.setattr(classification, "load_images", counting)
    parts = keras_vit.classify(model, photos, top=3, batch_size=2)
    assert read == [2, 2, 1]
    for a, b in zip(parts, whole):
        assert [p.index for p in a] == [p.index for p in b]
        np.testing.assert_allclose([p.probability for p in a], [p.probability for p in b], atol=1e-6)
    with pytest.raises(ValueError, match="`images` is empty"):
        keras_vit.classify(model, [])


def test_classify_crops_the_centre_crop_fraction_names(tmp_path, capsys):
    """`crop_fraction` over the model's record: the shorter side resized to
    the input size / fraction (bicubic, the record's filter), the centre cut
    out, as Pillow does it here; `keras-vit classify --crop-fraction` agrees;
    a fraction out of (0, 1] is refused by name before the model loads."""
    from keras_vit_tools.commands import keras_vit as run_cli

    model = keras_vit.ViT(**TINY, classes=3, class_names=["a", "b", "c"],
                          preprocessing=Preprocessing.from_mode("imagenet", image_size=32))
    head = model.get_layer("head")  # a random head: probabilities that tell one crop from another
    head.kernel.assign(np.random.default_rng(1).normal(0, 0.5, head.kernel.shape).astype("float32"))
    photo = np.random.default_rng(0).integers(0, 256, (40, 70, 3)).astype("uint8")
    photo[:, 55:] = 255  # a bright edge that a tight crop leaves out
    got = keras_vit.classify(model, photo, top=3, crop_fraction=0.5)[0]
    # The shorter side 40 -> 32 / 0.5 = 64 (70 -> 112); the centre 32 x 32.
    resized = np.asarray(Image.fromarray(photo).resize((112, 64), Image.Resampling.BICUBIC))
    x = (resized[16:48, 40:72] / 255 - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
    expected = to_numpy(model.predict(x[None].astype("float32"), verbose=0))[0]
    np.testing.assert_allclose([p.probability for p in sorted(got)], expected, atol=6e-4)
    whole = keras_vit.classify(model, photo, top=3)[0]  # the record's straight resize
    assert max(abs(a.probability - b.probability) for a, b in zip(sorted(whole), sorted(got))) > 0.01
    model.save_to_preset(tmp_path / "preset")
    Image.fromarray(photo).save(tmp_path / "photo.png")
    capsys.readouterr()
    assert run_cli(["classify", str(tmp_path / "preset"), str(tmp_path / "photo.png"), "--crop-fraction", "0.5",
                    "--top", "3"]) == 0
    printed = {int(line.split()[1]): float(line.split()[0]) for line in capsys.readouterr().out.splitlines()[1:]}
    np.testing.assert_allclose([printed[i] for i in range(3)], expected, atol=6e-4)
    for bad in (0, 1.5, "0.5", float("nan")):
        with pytest.raises(ValueError, match=r"`crop_fraction` must be a number in \(0, 1\]"):
            keras_vit.classify("never-loaded", photo, crop_fraction=bad)
