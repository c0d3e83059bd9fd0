"""Artifacts that take raw uint8 photos of any size (`raw_images=True`,
`keras-vit export --raw-images`): a fine-tuned preset's ONNX and OpenVINO
files, run in their runtimes, name and score photos as `keras_vit.classify`
does, from the class names and preprocessing they carry (one runtime in
each backend's job, both over the three)."""

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from conftest import TINY, per_backend, runs_once
from keras_vit import export, training
from keras_vit.preprocessing import Preprocessing
from keras_vit_tools.commands import keras_vit as run_cli

BACKEND = keras.backend.backend()
# One runtime per backend, both runtimes over the three jobs: the raw-image
# graph is the same Keras code on each backend, and tests/test_export.py runs
# every format of every backend.
RAW_FORMAT = per_backend(jax="openvino", tensorflow="onnx", torch="onnx")
FORMATS = [f for f in (RAW_FORMAT,) if f in export.BACKEND_FORMATS.get(BACKEND, ())]
NAMES = ["cat", "coffee", "rocket"]
# DeiT's evaluation: shorter side to 256/224 of the crop (bicubic), ImageNet statistics.
RECORD = Preprocessing.from_mode("imagenet", image_size=32, crop_fraction=0.875)


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    """A tiny classifier fine-tuned for a few steps and saved as `examples/finetune.py` saves one."""
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(**TINY, classes=3, classifier_activation=None)
    training.compile_for_finetuning(model, total_steps=3, base_lr=0.1, warmup_steps=1, global_batch_size=6)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 32, 32, 3)).astype("float32")
    for _ in range(3):
        model.train_on_batch(x, np.arange(6) % 3)
    folder = tmp_path_factory.mktemp("preset") / "pets"
    training.save_trained_preset(model, str(folder), class_names=NAMES, preprocessing=RECORD)
    return str(folder)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Three photos of their own sizes (written as files too) and a small random image."""
    import skimage.data

    images = [skimage.data.chelsea(), skimage.data.coffee(), skimage.data.rocket(),
              np.random.default_rng(1).integers(0, 256, (45, 70, 3), dtype="uint8")]
    folder = tmp_path_factory.mktemp("photos")
    files = []
    for i, image in enumerate(images):
        files.append(str(folder / f"photo_{i}.png"))
        Image.fromarray(image).save(files[-1])
    return images, files


def _exported(format, preset, files, path, capsys):
    """ONNX through the command line (which checks it against classify), OpenVINO through `model.export`."""
    if format == "openvino":
        return keras_vit.from_preset(preset).export(str(path), format=format, raw_images=True)
    status = run_cli(["export", preset, "--format", format, "--output", str(path), "--raw-images",
                      "--images", *files])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "carries: 3 class names" in printed and "takes uint8 images of any size" in printed
    assert f"inputs: images: uint8 (batch, height, width, channels) of any size; inside the artifact " \
           f"{RECORD.describe()}" in printed
    assert "onnx runtime - keras_vit.classify (4 given images)" in printed and "OK (tolerance" in printed
    # The model name it prints loads with `load_model` (here the preset folder).
    source = printed.split("model: ")[1].split(", image")[0]
    assert keras_vit.load_model(source).class_names == tuple(NAMES)
    return str(path)


@pytest.mark.parametrize("format", FORMATS)
def test_raw_image_artifact_names_and_scores_photos_as_classify(format, preset, photos, tmp_path, capsys):
    images, files = photos
    path = _exported(format, preset, files, tmp_path / f"pets{export.SUFFIXES[format]}", capsys)
    meta = export.read_metadata(path, format)
    assert meta["class_names"] == NAMES and meta["raw_images"] is True and meta["output"] == "probabilities"
    assert Preprocessing.from_config(meta["preprocessing"]) == RECORD
    # What the artifact does, in words: DeiT's crop of 32 from 36, not a straight resize.
    assert meta["inputs"].endswith("inside the artifact the shorter side resized to 36 (bicubic, aspect ratio "
                                   "kept), the centre 32x32 cut out (crop fraction 0.8889), then (x / 255 - mean) "
                                   "/ std with mean [0.485, 0.456, 0.406] and std [0.229, 0.224, 0.225]")
    # uint8 photos of four sizes, in the runtime alone; names from the metadata.
    probabilities = export.run_exported(path, format, images)
    assert probabilities.shape == (4, 3)
    for row, predictions in zip(probabilities, keras_vit.classify(preset, files, top=3)):
        got = dict(zip(meta["class_names"], row.tolist()))
        expected = {p.name: p.probability for p in predictions}
        assert got.keys() == expected.keys()
        np.testing.assert_allclose([got[n] for n in NAMES], [expected[n] for n in NAMES], atol=1e-4)
    # Not a constant function of its input.
    assert np.abs(probabilities[0] - probabilities[2]).max() > 1e-3
    # A batch of one size goes in as one array; values that are no pixels do not.
    same = export.run_exported(path, format, np.stack([images[3], images[3][::-1]]))
    np.testing.assert_allclose(same[0], probabilities[3], atol=1e-6)
    with pytest.raises(ValueError, match="takes raw images: uint8 pixels"):
        export.run_exported(path, format, images[3][None] / 255.0)


@pytest.mark.parametrize(
    "change, options, message",
    [
        (dict(preprocessing=None), {}, r"records none \(`model.preprocessing` is None\)"),
        (dict(preprocessing=Preprocessing(image_size=32, interpolation="box")), {},
         "interpolation='box'"),
        ({}, dict(quantize="int8"), r"takes none of \['quantize'\]"),
        ({}, dict(raw_images="yes"), "`raw_images` must be True or False"),
    ],
)
@runs_once("torch", "refused before any exporter runs")
def test_what_cannot_take_raw_images_is_refused_before_any_work(change, options, message, tmp_path):
    model = keras_vit.ViT(**TINY, classes=3, preprocessing=RECORD)
    for key, value in change.items():
        setattr(model, key, value)
    options.setdefault("raw_images", True)
    with pytest.raises(ValueError, match=message):
        export.export_model(model, str(tmp_path / "m.onnx"), "onnx", **options)
    assert not list(tmp_path.iterdir())
