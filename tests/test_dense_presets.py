"""The dense task models as Keras models and presets: keras_vit presets and
`.keras` files reload exactly, `from_preset` changes only what it may (a
segmenter's classes), strict loading names what it does not know, LoRA
adapts the encoder and trains the task's own layers, and the `keras-vit
depth` and `keras-vit segment` commands write their pictures."""

import json
import os

import keras
import numpy as np
import pytest
from conftest import runs_once, spread

import keras_vit
from keras_vit.preprocessing.dense import DenseProcessing
from keras_vit.tasks.rle import rle_to_mask
from keras_vit_tools.commands import keras_vit as run_cli

pytestmark = spread("the task models' presets and files over layers held on every backend by their "
                    "contracts; each case once")

Image = pytest.importorskip("PIL.Image")


def _encoder(**options):
    return keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
                         include_top=False, **options)


def _depth(**options):
    options.setdefault("preprocessing", DenseProcessing(size=(32, 32), resize="keep_aspect", multiple=8))
    return keras_vit.DepthEstimator(
        _encoder(layer_scale_init=0.5), (0, 1), (8, 16), (2, 0.5), fusion_size=8, head_size=4, **options)


def _segmenter(**options):
    options.setdefault("preprocessing", DenseProcessing(size=(32, 32), resize="shorter_side", pad="end"))
    return keras_vit.Segmenter(
        _encoder(num_register_tokens=1), classes=3, class_names=["sky", "tree", "road"], num_queries=4,
        num_blocks=1, **options)


def _images(seed=0, count=2):
    return np.random.default_rng(seed).normal(size=(count, 32, 32, 3)).astype("float32")


def _same(a, b, atol=0.0):
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], atol=atol, err_msg=key)


@pytest.mark.parametrize("build", [_depth, _segmenter], ids=["depth", "segmenter"])
def test_presets_and_keras_files_reload_exactly(build, tmp_path):
    model = build()
    x = _images()
    expected = model.predict(x, verbose=0)
    model.save_to_preset(str(tmp_path / "preset"))
    again = keras_vit.from_preset(str(tmp_path / "preset"))
    assert type(again) is type(model) and again.preprocessing == model.preprocessing
    _same(again.predict(x, verbose=0), expected)
    model.save(str(tmp_path / "model.keras"))
    loaded = keras.saving.load_model(str(tmp_path / "model.keras"))
    _same(loaded.predict(x, verbose=0), expected)
    fast = model.for_inference()
    assert not fast.trainable
    _same(fast.predict(x, verbose=0), expected, atol=1e-5)


def test_from_preset_gives_a_segmenter_new_classes(tmp_path):
    model = _segmenter()
    model.save_to_preset(str(tmp_path / "preset"))
    again = keras_vit.from_preset(str(tmp_path / "preset"), class_names=["cat", "dog"])
    assert again.classes == 2 and again.class_names == ("cat", "dog")
    assert again.predict(_images(), verbose=0)["class_queries_logits"].shape == (2, 4, 3)
    # Every other weight is the preset's.
    kernel = lambda m: keras.ops.convert_to_numpy(m.eomt_head.mask_mlp[0].kernel)  # noqa: E731
    np.testing.assert_array_equal(kernel(again), kernel(model))
    with pytest.raises(ValueError, match=r"cannot change \['num_queries'\]"):
        keras_vit.from_preset(str(tmp_path / "preset"), num_queries=8)
    with pytest.raises(ValueError, match="Segmenter's classes"):
        _depth().save_to_preset(str(tmp_path / "depth"))
        keras_vit.from_preset(str(tmp_path / "depth"), classes=3)


def test_strict_loading_names_what_it_does_not_know(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from safetensors.numpy import load_file, save_file

    from dense_dirs import depth_anything_config, save_random

    folder = tmp_path / "depth_anything"
    save_random(transformers.DepthAnythingForDepthEstimation, depth_anything_config(transformers), folder)
    config = json.loads((folder / "config.json").read_text())
    state = load_file(str(folder / "model.safetensors"))
    # A head tensor no rule knows: the file and the key are named.
    save_file({**state, "head.conv9.weight": np.zeros((1, 1, 1, 1), "float32")}, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match=r"(?s)model\.safetensors.*unexpected keys.*head\.conv9\.weight"):
        keras_vit.from_preset(str(folder))
    save_file(state, str(folder / "model.safetensors"))
    # A key transformers' config class does not declare is ignored, as
    # transformers ignores it; one it declares that keras_vit cannot honour
    # is refused.
    (folder / "config.json").write_text(json.dumps(dict(config, head_dropout=0.1)))
    assert keras_vit.from_preset(str(folder)).name
    (folder / "config.json").write_text(json.dumps(dict(config, head_in_index=0)))
    with pytest.raises(ValueError, match=r"head_in_index"):
        keras_vit.from_preset(str(folder))
    # A head keras_vit has no reader for (ZoeDepth's): the file, the model
    # type and the task checkpoints it reads are named.
    (folder / "config.json").write_text(json.dumps(dict(config, model_type="zoedepth")))
    with pytest.raises(ValueError, match=r"(?s)config\.json.*'vit'.*'depth_anything'.*'eomt'.*'sam'.*model_type='zoedepth'"):
        keras_vit.from_preset(str(folder))


def test_transformers_refuses_what_it_cannot_hold(tmp_path):
    linear = keras_vit.Segmenter(_encoder(), classes=3, head="linear")
    with pytest.raises(ValueError, match="transformers has no class that holds"):
        linear.save_to_preset(str(tmp_path / "linear"), format="transformers")
    relative_dpt = keras_vit.DepthEstimator(_encoder(), (0, 1), (8, 16), (2, 0.5), fusion_size=8, style="dpt",
                                            readout="project", feature_norm=True)
    with pytest.raises(ValueError, match="feature_norm=False"):
        relative_dpt.save_to_preset(str(tmp_path / "dpt"), format="transformers")
    assert not os.path.exists(tmp_path / "linear" / "config.json")


def test_lora_adapts_the_encoder_and_trains_the_head():
    model = _segmenter()
    model.enable_lora(2, verbose=False)
    trainable = {v.path.split("/")[0] for v in model.trainable_weights}
    assert {"queries", "eomt_head"} <= trainable
    assert all("lora_kernel" in v.path for v in model.trainable_weights if v.path.startswith("encoderblock"))
    assert not any(v.path.endswith("mask_probabilities") for v in model.trainable_weights)
    with pytest.raises(ValueError, match="merge_lora"):
        model.for_inference()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="include_top=False"):
        keras_vit.DepthEstimator(keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1,
                                               num_heads=2, mlp_dim=32), (0,), (8,), (1,), 8)
    with pytest.raises(ValueError, match="`reassemble_factors` must hold 2 numbers"):
        keras_vit.DepthEstimator(_encoder(), (0, 1), (8, 16), (3,), 8)
    with pytest.raises(ValueError, match="needs `max_depth`"):
        keras_vit.DepthEstimator(_encoder(), (0, 1), (8, 16), (2, 0.5), 8, depth="metric")
    with pytest.raises(ValueError, match="`head` must be one of"):
        keras_vit.Segmenter(_encoder(), classes=3, head="mask2former")
    with pytest.raises(ValueError, match="`mask_probabilities` must hold 1 numbers"):
        keras_vit.Segmenter(_encoder(), classes=3, num_blocks=1, mask_probabilities=(1.0, 0.5))
    with pytest.raises(ValueError, match="multiple of 8"):
        _depth().predict(np.zeros((1, 30, 32, 3), "float32"), verbose=0)


def test_a_model_without_processor_settings_says_how_to_give_them(tmp_path, capsys):
    """A model built without `preprocessing` (or a transformers folder
    without preprocessor_config.json) is refused before any image is read,
    with the ways to give the settings; the command says the same."""
    photo = str(tmp_path / "missing.png")  # never read: the check comes first
    depth, segmenter = _depth(preprocessing=None), _segmenter(preprocessing=None)
    for call, model in ((keras_vit.estimate_depth, depth), (keras_vit.segment, segmenter)):
        with pytest.raises(ValueError, match=r"no preprocessing record.*preprocessor_config\.json.*"
                                             r"preprocessing=keras_vit\.DenseProcessing"):
            call(model, photo)
    depth.save_to_preset(str(tmp_path / "depth"))
    # The command first checks that its images exist, then the model.
    assert run_cli(["depth", str(tmp_path / "depth"), photo, "--out", str(tmp_path / "out")]) == 2
    assert "No image file at" in capsys.readouterr().err
    Image.fromarray(np.zeros((8, 8, 3), "uint8")).save(photo)
    assert run_cli(["depth", str(tmp_path / "depth"), photo, "--out", str(tmp_path / "out")]) == 2
    assert "preprocessor_config.json" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@runs_once("torch", "the commands' arguments and files; segmentation is held on every backend "
           "by test_dense_tasks, depth by test_dense_parity")
def test_commands_write_pictures(tmp_path, capsys):
    photo = str(tmp_path / "photo.png")
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 56, 3)).astype("uint8")).save(photo)
    _depth().save_to_preset(str(tmp_path / "depth"))
    assert run_cli(["depth", str(tmp_path / "depth"), photo, "--out", str(tmp_path / "out")]) == 0
    depth = np.load(tmp_path / "out" / "photo_depth.npy")
    assert depth.shape == (40, 56)
    # The settings given to the call stand in for a model's missing record.
    bare = keras_vit.load_model(str(tmp_path / "depth"))
    bare.preprocessing = None
    given = keras_vit.estimate_depth(bare, photo, preprocessing=_depth().preprocessing)[0]["predicted_depth"]
    np.testing.assert_allclose(given, depth, rtol=1e-5, atol=1e-6)
    assert np.asarray(Image.open(tmp_path / "out" / "photo_depth.png")).shape == (40, 56, 3)
    model = _segmenter()
    model.save_to_preset(str(tmp_path / "segmenter"))
    assert run_cli(["segment", str(tmp_path / "segmenter"), photo, "--task", "panoptic", "--threshold", "0",
                     "--out", str(tmp_path / "out")]) == 0
    written = json.loads((tmp_path / "out" / "photo_segments.json").read_text())
    expected = keras_vit.segment(model, photo, task="panoptic", threshold=0)[0]
    assert (written["image"], written["size"], written["task"]) == (photo, [40, 56], "panoptic")
    assert [{k: v for k, v in s.items() if k != "mask"} for s in written["segments"]] == expected["segments"]
    # Each segment's pixels as COCO's compressed RLE; the label map the class of each pixel, 255 for none.
    labels = np.full((40, 56), 255)
    for item in written["segments"]:
        pixels = expected["segmentation"] == item["id"]
        assert isinstance(item["mask"]["counts"], str)
        np.testing.assert_array_equal(rle_to_mask(item["mask"]), pixels)
        labels[pixels] = item["label_id"]
    label_png = Image.open(tmp_path / "out" / "photo_labels.png")
    assert label_png.mode == "L" and (labels == 255).any() and (labels != 255).any()
    np.testing.assert_array_equal(np.asarray(label_png), labels)
    assert np.asarray(Image.open(tmp_path / "out" / "photo_segments.png")).shape[0] == 40
    assert run_cli(["depth", photo, "--preset", str(tmp_path / "segmenter"), "--out", str(tmp_path)]) == 2
    assert "must be a DepthEstimator" in capsys.readouterr().err


@runs_once("torch", "the commands' folders and files; segmentation is held on every backend by test_dense_parity")
def test_commands_take_folders_and_keep_every_images_outputs(tmp_path, capsys, monkeypatch):
    """A folder stands for the images in it, read a chunk at a time; images
    of the same name in two folders write two sets of files; a broken file
    stops nothing."""
    from keras_vit.cli import dense as cli_dense

    rng = np.random.default_rng(0)
    photos = {}
    for folder in ("cats", "dogs"):
        (tmp_path / "photos" / folder).mkdir(parents=True)
        for i in range(3):
            photos[f"{folder}_{i}"] = path = str(tmp_path / "photos" / folder / f"{i}.png")
            Image.fromarray(rng.integers(0, 256, (24 + 8 * i, 40, 3)).astype("uint8")).save(path)
    (tmp_path / "photos" / "cats" / "notes.txt").write_text("not an image")
    model = _depth()
    model.save_to_preset(str(tmp_path / "depth"))
    monkeypatch.setattr(cli_dense, "CHUNK", 4)  # six images: two chunks
    out = tmp_path / "out"
    assert run_cli(["depth", str(tmp_path / "depth"), str(tmp_path / "photos"), "--out", str(out)]) == 0
    printed = [line.split(":")[0] for line in capsys.readouterr().out.splitlines()]
    assert printed == sorted(photos.values())
    assert sorted(os.listdir(out)) == sorted(f"{stem}_depth.{kind}" for stem in photos for kind in ("npy", "png"))
    for stem, path in photos.items():
        expected = keras_vit.estimate_depth(model, path)[0]["predicted_depth"]
        np.testing.assert_allclose(np.load(out / f"{stem}_depth.npy"), expected, rtol=1e-5, atol=1e-6)
    # Run again with the output inside the folder of photos: what a run
    # writes there is no input of the next one.
    inner = tmp_path / "photos" / "depth_maps"
    for _ in range(2):
        assert run_cli(["depth", str(tmp_path / "depth"), str(tmp_path / "photos"), "--out", str(inner)]) == 0
        assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == printed
    assert len(os.listdir(inner)) == 12
    # A file that cannot be read is named and passed over: the others' files
    # are written, the broken one named again at the end, the status 1.
    broken = tmp_path / "photos" / "cats" / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n and then nothing")
    assert run_cli(["depth", str(tmp_path / "depth"), str(tmp_path / "photos"), "--out", str(inner)]) == 1
    captured = capsys.readouterr()
    assert [line.split(":")[0] for line in captured.out.splitlines()] == printed
    assert len(os.listdir(inner)) == 12
    assert f"keras-vit depth: skipped: Cannot read the image '{broken}'" in captured.err
    assert captured.err.endswith(f"error: 1 of 7 images failed (the results of the others are written):\n  {broken}\n")
    (tmp_path / "empty").mkdir()
    assert run_cli(["depth", str(tmp_path / "depth"), str(tmp_path / "empty"), "--out", str(out)]) == 2
    assert "holds no image" in capsys.readouterr().err
    with pytest.raises(ValueError, match="is a folder, not an image file"):
        keras_vit.estimate_depth(model, str(tmp_path / "photos"))


def test_the_parsers_lists_are_keras_vits():
    from keras_vit.tasks.segmentation_outputs import SUBTASKS
    from keras_vit_tools import dense_command

    assert dense_command.SEGMENTATION_TASKS == SUBTASKS
