"""examples/finetune.py --data: a folder of the user's images in, a keras_vit
preset out that reloads with identical predictions, the folder's class names
and the preprocessing it was trained with."""

import importlib.util
import json
import re

import numpy as np
import pytest

import keras_vit
from conftest import ROOT, spread, to_numpy
from keras_vit.preprocessing import Preprocessing
from keras_vit.execution.sharded_load import shapes_only

pytestmark = spread("the example's folder pipeline is tf.data under every backend and its training the "
                    "library's; each case once")

pytest.importorskip("tensorflow", reason="the example's input pipeline needs TensorFlow")

COLOURS = {"blue": (40, 60, 220), "green": (40, 200, 60), "red": (220, 40, 40)}


def load_example():
    spec = importlib.util.spec_from_file_location("finetune_example", ROOT / "examples" / "finetune.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_folder(root, per_class=10, colours=COLOURS, file_name="{}.png", size=(24, 20)):
    """Coloured rectangles (each a slightly varied shade), one sub-folder per class."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name, rgb in colours.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            shade = np.clip(np.array(rgb) + rng.integers(-20, 21, 3), 0, 255).astype("uint8")
            image = np.broadcast_to(shade, size + (3,)).copy()
            Image.fromarray(image).save(root / name / file_name.format(i + 1))
    return root


def folder_images(root, size):
    """Every image of the folder, resized, with its class index (sorted names)."""
    from PIL import Image

    xs, ys = [], []
    for label, name in enumerate(sorted(COLOURS)):
        for file in sorted((root / name).iterdir()):
            xs.append(np.asarray(Image.open(file).convert("RGB").resize(size[::-1]), "float32"))
            ys.append(label)
    return np.stack(xs), np.array(ys)


def _reference(preset, image_size):
    """The smoke model with the preset's weights file, built independently of `from_preset`."""
    example = load_example()
    model = keras_vit.ViT(**example.SMOKE_MODEL, image_size=image_size, classes=len(COLOURS),
                          classifier_activation=None)
    model.load_weights(preset / "model.weights.h5")
    return model


def test_folder_finetune_writes_a_preset_that_reloads_identically(tmp_path):
    """The run's model is a preset (no bare weights file that would reload
    with other numerics): its head predicts probabilities, its file holds no
    optimizer state, and `classify` reads the folder's photos as the
    evaluation did (Pillow's bilinear resize)."""
    import h5py
    from PIL import Image

    data = write_folder(tmp_path / "photos")
    run_dir, output = tmp_path / "run", tmp_path / "my_vit"
    results = load_example().main(["--data", str(data), "--smoke", "--output", str(output),
                                   "--run-dir", str(run_dir), "--verbose", "0"])
    assert results["updates"] == 4 and 0.0 <= results["accuracy"] <= 1.0
    assert not list(run_dir.glob("*.weights.h5"))  # presets only: preset/ (--output here) and best/
    for preset in (output, run_dir / "best"):
        with h5py.File(preset / "model.weights.h5", "r") as f:
            assert set(f) == {"layers", "vars"}, set(f)  # no "optimizer" group
    model = keras_vit.from_preset(output)
    assert model.class_names == tuple(sorted(COLOURS)) and model.classifier_activation == "softmax"
    assert model.preprocessing == Preprocessing.from_mode("inception", image_size=16, interpolation="bilinear")
    files = sorted(data.glob("*/*.png"))
    x = np.stack([np.asarray(Image.open(f).convert("RGB").resize((16, 16), Image.BILINEAR), "float32")
                  for f in files]) / 127.5 - 1
    logits = to_numpy(_reference(output, 16).predict(x, verbose=0))
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    preds = to_numpy(model.predict(x, verbose=0))
    np.testing.assert_allclose(preds, expected, rtol=1e-5, atol=1e-6)
    # decode_predictions shows probabilities, as `keras-vit inspect` does.
    decoded = keras_vit.decode_predictions(preds, top=3, model=model)
    assert [row[0][1] for row in decoded] == [sorted(COLOURS)[i] for i in preds.argmax(-1)]
    np.testing.assert_allclose([sum(score for _, _, score in row) for row in decoded], 1.0, atol=1e-5)
    classified = keras_vit.classify(str(output), [str(f) for f in files], top=1)
    assert [row[0].index for row in classified] == list(expected.argmax(-1))
    np.testing.assert_allclose([row[0].probability for row in classified], expected.max(-1), atol=1e-5)
    # The held-out split: 20% of the 30 images, fixed by the seed.
    args = json.load(open(run_dir / "results.json"))["args"]
    assert args["validation_split"] == 0.2 and args["output"] == str(output)


def test_folder_finetune_from_a_checkpoint_takes_its_gelu_and_scaling(tmp_path, capsys):
    """Starting from a preset with the exact GELU and ImageNet mean/std, the
    fine-tuned preset keeps both, without flags saying so, and learns the
    colours (held-out accuracy recomputed from the reloaded preset)."""
    data = write_folder(tmp_path / "photos")
    base = tmp_path / "base"
    keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                  classes=5, mlp_activation="gelu",
                  preprocessing=Preprocessing.from_mode("imagenet", image_size=32)).save_to_preset(base)
    example = load_example()
    args = ["--data", str(data), "--preset", str(base), "--image-size", "16", "--batch-size", "8",
            "--total-steps", "30", "--eval-every", "30", "--warmup-steps", "3", "--lr", "0.1",
            "--run-dir", str(tmp_path / "run"), "--output", str(tmp_path / "out"), "--verbose", "0"]
    resolved = example.resolve(example.parse_args(args))
    assert (resolved.preprocessing, resolved.optimizer, resolved.model) == ("imagenet", "sgd", "preset")
    results = example.main(args)
    # The new head is said in one line, not as a warning with a code location.
    assert re.search(r"^note: .*the head is zero-initialised", capsys.readouterr().out, flags=re.M)
    model = keras_vit.from_preset(tmp_path / "out")
    assert model.mlp_activation == "gelu" and model.preprocessing.mode == "imagenet"
    assert model.classes == 3 and model.class_names == ("blue", "green", "red")
    # The held-out images, chosen as image_folder_source chooses them.
    from keras_vit.training.datasets import image_folder_source

    held = image_folder_source(str(data), 0.2, "validation", seed=0)
    assert held.num_examples == 6
    x = np.stack([np.asarray(image, "float32") for image, _ in held.dataset.as_numpy_iterator()])
    y = np.array([label for _, label in held.dataset.as_numpy_iterator()])
    import keras

    x = keras.ops.image.resize(x, (16, 16), interpolation="bilinear", antialias=True)
    preds = to_numpy(model.predict(keras_vit.preprocess_input(x, model=model), verbose=0))
    assert results["accuracy"] == pytest.approx(float(np.mean(preds.argmax(-1) == y)))


def test_folder_flags_are_documented():
    text = load_example().build_parser().format_help()
    for flag in ("--data", "--validation-split", "--preset", "--output"):
        assert flag in text


def test_gelu_flag_reaches_the_model_and_is_refused_with_a_preset(tmp_path):
    example = load_example()
    args = example.resolve(example.parse_args(["--data", str(tmp_path), "--model", "ViTTi16", "--gelu", "erf",
                                               "--image-size", "32"]))
    import keras

    with shapes_only():
        assert example.build_model(args, 3).mlp_activation == "gelu"
    args = example.parse_args(["--data", str(tmp_path), "--preset", str(tmp_path), "--gelu", "tanh"])
    with pytest.raises(SystemExit, match="a preset fixes its GELU"):
        example.build_model(args, 3)


def test_a_bad_image_is_named_before_training_starts(tmp_path, capsys):
    data = write_folder(tmp_path / "photos", file_name="{}.jpg")
    whole = (data / "red" / "1.jpg").read_bytes()
    (data / "red" / "broken.jpg").write_bytes(whole[: len(whole) // 2])
    run_dir = tmp_path / "run"
    argv = ["--data", str(data), "--smoke", "--run-dir", str(run_dir), "--verbose", "0"]
    with pytest.raises(SystemExit, match=r"--data: 1 of 31 images cannot be decoded: .*broken\.jpg.*--skip-unreadable"):
        load_example().main(argv)
    assert not (run_dir / "log.csv").exists()  # nothing trained
    with pytest.warns(UserWarning, match="broken.jpg"):
        results = load_example().main(argv + ["--skip-unreadable"])
    assert results["updates"] == 4


def test_a_missing_folder_is_named(tmp_path):
    with pytest.raises(SystemExit, match=r"--data 'no_such_photos' does not exist \(resolved to"):
        load_example().main(["--data", "no_such_photos", "--smoke"])
