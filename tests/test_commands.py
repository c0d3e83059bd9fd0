"""The console scripts: `--help` answers without importing Keras or a
backend, the parsers' lists match keras_vit's, and `keras-vit inspect`
reads its architecture from the checkpoint and reports missing files in one
line."""

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import DEIT_NPZ, DEIT_SAFETENSORS, ROOT, TINY, every_backend, requires_shared, runs_once
from PIL import Image

from keras_vit import architectures, export, presets, preprocessing
from keras_vit_tools.commands import keras_vit as run_cli
from keras_vit.export import serving
from keras_vit.weights.describe import checkpoint_constructor
from keras_vit_tools import commands

pytestmark = runs_once("torch", "the console scripts' parsers, files and messages; the library calls behind "
                                "them are tested on every backend, and each backend's banners by the "
                                "every_backend test below")

HEAVY = ("keras", "tensorflow", "jax", "torch", "keras_vit")
# Runs an entry point as the console script does, then lists the heavy
# modules it imported. `keras_vit_tools` is bound to this checkout's tools/.
PROBE = """
import importlib, importlib.util, json, sys
spec = importlib.util.spec_from_file_location(
    "keras_vit_tools", "tools/__init__.py", submodule_search_locations=["tools"])
module = importlib.util.module_from_spec(spec)
sys.modules["keras_vit_tools"] = module
spec.loader.exec_module(module)
name, function = sys.argv[1].split(":")
try:
    status = getattr(importlib.import_module(name), function)(sys.argv[2:])
except SystemExit as exit:
    status = exit.code
print(json.dumps([status, sorted(m for m in %r if m in sys.modules)]), file=sys.stderr)
""" % (HEAVY,)

ENTRY_POINTS = {
    "keras-vit": "keras_vit_tools.commands:keras_vit",
    "keras-vit-convert": "keras_vit_tools.commands:convert",
    "keras-vit-benchmark": "keras_vit_tools.benchmark:main",
}


def _probe(entry_point, *argv, timeout=120):
    # A user's terminal: TensorFlow, imported in this process, sets its log
    # threshold in the environment the subprocess would inherit.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, entry_point, *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env=dict(env, PYTHONPATH=str(ROOT)),
    )
    import json

    status, heavy = json.loads(result.stderr.strip().splitlines()[-1])
    return status, heavy, result.stdout, result.stderr


def test_console_scripts_are_the_front_ends():
    text = (ROOT / "setup.cfg").read_text()
    for script, entry_point in ENTRY_POINTS.items():
        assert f"{script} = {entry_point}" in text


@pytest.mark.parametrize(
    "script, argv",
    [
        ("keras-vit", ["--help"]),
        ("keras-vit", ["inspect", "--help"]),
        ("keras-vit", ["export", "--help"]),
        ("keras-vit", ["classify", "--help"]),
        ("keras-vit-convert", ["--help"]),
        ("keras-vit-benchmark", ["--help"]),
    ],
)
def test_help_imports_no_heavy_library(script, argv):
    status, heavy, out, _ = _probe(ENTRY_POINTS[script], *argv)
    assert status == 0 and "usage:" in out
    assert heavy == []


def test_usage_errors_import_no_heavy_library():
    status, heavy, _, err = _probe(ENTRY_POINTS["keras-vit"], "export", "ViTTi16", "--format", "onxx",
                                   "--output", "x")
    assert status == 2 and "invalid choice: 'onxx'" in err and heavy == []


@pytest.mark.parametrize(
    "script, argv, flag, closest",
    [
        # argparse's prefix matching and its "required" check answered
        # "--weights is required" for this one.
        ("keras-vit", ["inspect", "photo.jpg", "--weigths", "w.npz", "--out", "o"], "--weigths", "--weights"),
        ("keras-vit", ["export", "ViTTi16", "--format", "onnx", "--output", "m.onnx", "--sample", "2"],
         "--sample", "--samples"),
        ("keras-vit", ["classify", "m", "a.jpg", "--topp", "2"], "--topp", "--top"),
        ("keras-vit-convert", ["--preset", "p", "--outptu", "o"], "--outptu", "--output"),
    ],
)
def test_a_misspelt_flag_is_named_with_the_closest(script, argv, flag, closest):
    status, heavy, _, err = _probe(ENTRY_POINTS[script], *argv)
    assert status == 2 and heavy == []
    assert f"unrecognized argument '{flag}'; did you mean '{closest}'?" in err, err
    assert "required" not in err


def test_a_backend_flag_is_answered_with_keras_backend():
    """`--backend jax` on a command: the answer is the environment variable,
    not a list of the command's flags."""
    status, heavy, _, err = _probe(ENTRY_POINTS["keras-vit"], "classify", "m", "a.jpg", "--backend", "jax")
    assert status == 2 and heavy == []
    assert "unrecognized argument '--backend'" in err and "KERAS_BACKEND=jax" in err, err
    assert "valid:" not in err and "--top" not in err, err


# The commands that run a task model on images, with their other required options.
TASK_COMMANDS = {
    "zero-shot": ["--classes", "cat"],
    "detect": ["--queries", "a cat", "--out", "o"],
    "masks": ["--points", "1,2", "--out", "o"],
    "depth": ["--out", "o"],
    "segment": ["--out", "o"],
}


@runs_once("torch", "the parsers import nothing of Keras")
@pytest.mark.parametrize("command", sorted(TASK_COMMANDS))
def test_task_commands_take_the_model_first_or_as_preset(command, capsys):
    """`keras-vit COMMAND MODEL IMAGE...`, as classify and export take their
    model, or `--preset MODEL` and images only: the same arguments."""
    parser = commands.keras_vit_parser()
    options = TASK_COMMANDS[command]
    first = parser.parse_args([command, "hf://org/m", "a.jpg", *options])
    as_option = parser.parse_args([command, "a.jpg", "--preset", "hf://org/m", *options])
    assert vars(first) == vars(as_option) and first.model == "hf://org/m"
    assert first.images == ["a.jpg"]
    assert parser.parse_args([command, "hf://org/m", "a.jpg", "b", *options]).images == ["a.jpg", "b"]
    with pytest.raises(SystemExit) as exit:
        parser.parse_args([command, "a.jpg", *options])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and f"keras-vit {command}: error: give the model and then the image" in err, err
    assert "'a.jpg'" in err and "--preset MODEL" in err
    with pytest.raises(SystemExit) as exit:
        parser.parse_args([command, "--help"])
    assert exit.value.code == 0 and f"keras-vit {command} " in capsys.readouterr().out


def test_threads_follow_the_flag_the_environment_or_the_cores(monkeypatch):
    from keras_vit_tools import front_end

    cores = front_end.physical_cores()
    assert 1 <= cores <= (os.cpu_count() or 1)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert front_end.configure_threads() == (cores, "physical cores")
    assert os.environ["OMP_NUM_THREADS"] == str(cores) and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert front_end.configure_threads() == (1, "OMP_NUM_THREADS")
    assert front_end.configure_threads(3) == (3, "--threads") and os.environ["OMP_NUM_THREADS"] == "3"
    with pytest.raises(ValueError, match="--threads must be at least 1"):
        front_end.configure_threads(0)
    torch = sys.modules.get("torch")
    if torch is not None:  # imported already: set directly too
        front_end.configure_threads(1)
        assert torch.get_num_threads() == 1


def test_the_parsers_lists_are_keras_vits():
    assert commands.GELU_FLAVOURS == tuple(architectures.GELU_FLAVOURS)
    assert commands.NORMALIZATIONS == tuple(preprocessing.MODES)
    assert commands.EXPORT_FORMATS == tuple(export.EXPORT_FORMATS)
    assert commands.PRESET_FORMATS == tuple(presets.PRESET_FORMATS)
    assert commands.OPENVINO_PRECISIONS == tuple(serving.OPENVINO_PRECISIONS)


def test_a_command_runs_after_parsing(tmp_path):
    # The front end hands the parsed arguments to keras_vit.cli.
    status = commands.keras_vit(["inspect", str(tmp_path / "none.png"), "--weights", "w.npz",
                                 "--out", str(tmp_path)])
    assert status == 2


def _npz(path, arrays):
    np.savez(path, **{k: np.zeros(shape, "float32") for k, shape in arrays.items()})
    return str(path)


def _official(patch, hidden, layers, mlp, resnet=None):
    arrays = {"embedding/kernel": (patch, patch, 3, hidden)}
    arrays["Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"] = (hidden, mlp)
    arrays.update({f"Transformer/encoderblock_{i}/LayerNorm_0/scale": (1,) for i in range(layers)})
    if resnet is not None:
        arrays["conv_root/kernel"] = (1,)
        for stage, units in enumerate(resnet, 1):
            arrays.update({f"block{stage}/unit{u}/conv1/kernel": (1,) for u in range(1, units + 1)})
    return arrays


@pytest.mark.parametrize("constructor", ["ViTTi16", "ViTB16", "ViTB32", "ViTL16", "ViTH14",
                                         "RViTTi16", "R26ViTS32", "R50ViTB16", "R50ViTL32"])
def test_architecture_read_from_an_official_checkpoint(constructor, tmp_path):
    row = architectures.get_variant(constructor).config
    arrays = _official(row["patch_size"], row["hidden_size"], row["num_layers"], row["mlp_dim"],
                       row.get("resnet_layers"))
    assert checkpoint_constructor(_npz(tmp_path / "c.npz", arrays)) == constructor


def test_architecture_unknown_or_unreadable(tmp_path):
    assert checkpoint_constructor(_npz(tmp_path / "odd.npz", _official(16, 200, 3, 64))) is None
    # B/16 and B/32 differ only in the patch: the patch decides.
    assert checkpoint_constructor(_npz(tmp_path / "b.npz", _official(32, 768, 12, 3072))) == "ViTB32"


@requires_shared
def test_architecture_read_from_real_files():
    assert checkpoint_constructor(str(DEIT_NPZ)) == "ViTTi16"
    assert checkpoint_constructor(str(DEIT_SAFETENSORS)) == "ViTTi16"


def _image(tmp_path):
    path = tmp_path / "photo.png"
    Image.fromarray(np.zeros((40, 40, 3), "uint8")).save(path)
    return str(path)


def test_inspect_and_export_warn_that_an_architecture_name_has_random_weights(tmp_path, capsys):
    """A bare constructor name is a fair input to inspect (the untrained
    baseline) and export (a benchmark), but never silently: a warning says
    its weights are random and which are registered; a preset does not warn."""
    import keras_vit

    out = str(tmp_path / "inspected")
    # Each warns before its own checks (here: the scaling the bare model does
    # not record, the output's extension).
    assert run_cli(["inspect", _image(tmp_path), "--model", "ViTTi16", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "keras-vit inspect: warning: 'ViTTi16' names an architecture" in err
    assert "randomly initialised" in err and "augreg-i21k+imagenet2012" in err
    assert "keras-vit inspect: error:" in err and "--preprocessing" in err.split("error:")[-1]
    assert run_cli(["export", "ViTTi16", "--format", "onnx", "--output", str(tmp_path / "m.pt2")]) == 2
    err = capsys.readouterr().err
    assert "keras-vit export: warning: 'ViTTi16' names an architecture" in err and "error:" in err
    keras_vit.ViT(**{**TINY, "num_layers": 1}, classes=3).save_to_preset(tmp_path / "my_vit")
    assert run_cli(["inspect", _image(tmp_path), "--model", str(tmp_path / "my_vit"), "--preprocessing",
                    "imagenet", "--out", out]) == 0
    assert "keras-vit inspect: warning" not in capsys.readouterr().err


def _one_line_error(capsys, argv):
    status = run_cli(argv)
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("keras-vit inspect: error: ")
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_inspect_missing_image(tmp_path, capsys):
    err = _one_line_error(capsys, ["inspect", str(tmp_path / "nope.png"), "--weights", "x.npz",
                                   "--out", str(tmp_path)])
    assert "No image file at" in err and "nope.png" in err


def test_inspect_missing_checkpoint(tmp_path, capsys):
    for model in ([], ["--model", "ViTTi16"]):
        err = _one_line_error(capsys, ["inspect", _image(tmp_path), "--weights", "gone.npz", *model,
                                       "--out", str(tmp_path)])
        assert "'gone.npz'" in err and os.path.abspath("gone.npz") in err


def test_inspect_needs_model_when_the_checkpoint_does_not_say(tmp_path, capsys):
    h5 = tmp_path / "w.weights.h5"
    h5.write_bytes(b"not read")
    for weights in ("augreg-i21k", str(h5)):
        err = _one_line_error(capsys, ["inspect", _image(tmp_path), "--weights", weights,
                                       "--out", str(tmp_path)])
        assert ("--model is needed" in err or "--model ViTTi16" in err) and "ViTTi16" in err


def test_classify_names_the_classes_of_a_preset(tmp_path, capsys):
    import keras_vit
    from keras_vit.preprocessing import Preprocessing

    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
                          mlp_dim=32, classes=3, class_names=["apple", "pear", "plum"],
                          preprocessing=Preprocessing.from_mode("inception", image_size=32))
    model.get_layer("head").bias.assign(np.array([0.0, 3.0, 1.0], "float32"))
    model.save_to_preset(tmp_path / "fruit")
    photo = _image(tmp_path)
    assert run_cli(["classify", str(tmp_path / "fruit"), photo, photo, "--top", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = keras_vit.classify(model, photo, top=2)[0]
    assert lines[0] == photo and lines[3] == photo and len(lines) == 6
    for line, prediction in zip(lines[1:3], expected):
        assert line.split() == [f"{prediction.probability:.3f}", str(prediction.index), prediction.name]
    assert lines[1].split()[2] == "pear"
    # A folder: its images, sorted, sub-folders included, a batch at a time.
    import shutil

    (tmp_path / "basket" / "more").mkdir(parents=True)
    for name in ("b.png", "more/a.png"):
        shutil.copy(photo, tmp_path / "basket" / name)
    (tmp_path / "basket" / "list.txt").write_text("not an image")
    assert run_cli(["classify", str(tmp_path / "fruit"), str(tmp_path / "basket"), "--top", "2",
                    "--batch-size", "1"]) == 0
    folder_lines = capsys.readouterr().out.splitlines()
    assert folder_lines[0::3] == [str(tmp_path / "basket" / "b.png"), str(tmp_path / "basket" / "more" / "a.png")]
    assert folder_lines[1:3] == folder_lines[4:6] == lines[1:3]
    assert run_cli(["classify", str(tmp_path / "fruit"), photo, str(tmp_path / "pear.png")]) == 2
    assert "No image file at" in capsys.readouterr().err
    assert run_cli(["classify", str(tmp_path / "fruit" / "missing"), photo]) == 2
    assert "No file or folder" in capsys.readouterr().err


def test_classify_and_export_crop_as_crop_fraction_says(tmp_path, capsys):
    """`--preprocessing imagenet` crops the centre 0.875 (timm's DeiT
    evaluation), `--crop-fraction` another share, `inception` resizes
    straight; classify's probabilities are those of the photo resized and
    cropped by Pillow here; a fraction out of (0, 1] and `--raw-images`
    without a record are refused by name."""
    import keras_vit
    from keras_vit.cli.commands import command_model

    model = keras_vit.ViT(**TINY, classes=3, class_names=["a", "b", "c"])
    head = model.get_layer("head")  # zeros; a random head: probabilities that tell one crop from another
    head.kernel.assign(np.random.default_rng(1).normal(0, 0.5, head.kernel.shape).astype("float32"))
    model.save_to_preset(tmp_path / "bare")
    bare = str(tmp_path / "bare")
    photo = np.random.default_rng(0).integers(0, 256, (40, 70, 3)).astype("uint8")
    photo[:, 55:] = 255  # a bright edge that a tight crop leaves out
    Image.fromarray(photo).save(tmp_path / "photo.png")
    assert run_cli(["classify", bare, str(tmp_path / "photo.png"), "--preprocessing", "imagenet",
                    "--crop-fraction", "0.5", "--top", "3"]) == 0
    printed = {int(line.split()[1]): float(line.split()[0]) for line in capsys.readouterr().out.splitlines()[1:]}

    def probabilities(pixels):
        x = (pixels.astype("float32") / 255 - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
        return model.predict(x[None].astype("float32"), verbose=0)[0]  # the head's softmax

    # The shorter side 40 -> 32 / 0.5 = 64 (70 -> 112), bicubic; the centre 32 x 32.
    resized = np.asarray(Image.fromarray(photo).resize((112, 64), Image.Resampling.BICUBIC))
    expected = probabilities(resized[16:48, 40:72])
    np.testing.assert_allclose([printed[i] for i in range(3)], expected, atol=6e-4)
    squashed = probabilities(np.asarray(Image.fromarray(photo).resize((32, 32), Image.Resampling.BICUBIC)))
    assert np.abs(squashed - expected).max() > 0.01, (squashed, expected)
    # The defaults of each mode, and --crop-fraction on a model's own record.
    parser = commands.keras_vit_parser()
    for argv, resize in ((["--preprocessing", "imagenet"], 36), (["--preprocessing", "inception"], None),
                         (["--preprocessing", "inception", "--crop-fraction", "1"], 32)):
        args = parser.parse_args(["classify", bare, "photo.png", *argv])
        record = command_model(args).preprocessing
        assert record.resize == resize and record.image_size == (32, 32), argv
    model.preprocessing = preprocessing.Preprocessing.from_mode("inception", 32, interpolation="bilinear")
    model.save_to_preset(tmp_path / "recorded")
    args = parser.parse_args(["export", str(tmp_path / "recorded"), "--format", "onnx", "--output", "m.onnx",
                              "--crop-fraction", "0.8"])
    assert command_model(args).preprocessing == preprocessing.Preprocessing(
        (0.5,) * 3, (0.5,) * 3, 32, 40, "bilinear")
    # Out of (0, 1]: named with its value, by the parser and by the record.
    with pytest.raises(SystemExit):
        run_cli(["classify", bare, str(tmp_path / "photo.png"), "--preprocessing", "imagenet", "--crop-fraction", "0"])
    assert "argument --crop-fraction: must be a number in (0, 1]; got '0'" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"crop_fraction.*\(0, 1\].*Received: crop_fraction=1\.5"):
        preprocessing.Preprocessing.from_mode("imagenet", 32, crop_fraction=1.5)
    # --raw-images needs a record: the error names the flag that gives one, and its values.
    assert run_cli(["export", bare, "--format", "onnx", "--output", str(tmp_path / "m.onnx"), "--raw-images"]) == 2
    err = capsys.readouterr().err
    assert "keras-vit export: error: --raw-images bakes the model's resize, crop and scaling" in err
    assert "give --preprocessing inception or imagenet" in err and "model.preprocessing =" not in err
    assert not (tmp_path / "m.onnx").exists()


@every_backend("each backend prints banners of its own")
def test_commands_keep_library_banners_out_of_the_terminal(tmp_path):
    """`keras-vit export` of a preset folder (what fine-tuning writes), as the
    console script runs it: TensorFlow's, CUDA's and the exporters' start-up
    reports stay out; the command's own lines and warnings stay in."""
    import keras
    import keras_vit

    keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                  classes=3).save_to_preset(tmp_path / "my_vit")
    status, _, out, err = _probe(ENTRY_POINTS["keras-vit"], "export", str(tmp_path / "my_vit"), "--format",
                                 "onnx", "--output", str(tmp_path / "m.onnx"), "--samples", "2", timeout=900)
    assert status == 0, err[-3000:]
    assert "OK (tolerance" in out
    noise = [line for line in err.splitlines()[:-1]  # the last line is the probe's own
             if any(word in line for word in ("I0000", "E0000", "W0000", "absl", "oneDNN", "cuda", "CUDA",
                                                 "torchvision", "torchao"))]
    assert not noise, noise
    assert keras.backend.backend() in out


# The converter runs the model on the current backend and checks it in
# transformers (torch): run in the job where TensorFlow's banners, the
# loudest, come from the backend itself.
@runs_once("tensorflow", "the converter's muting is one for every backend; export's is held on each")
def test_convert_keeps_library_banners_out_of_the_terminal(tmp_path):
    """`keras-vit-convert` to transformers, checked in transformers (which
    loads torchao): no TensorFlow, torchao or torch log lines, no progress bar."""
    pytest.importorskip("transformers")
    import keras_vit
    from keras_vit.preprocessing import Preprocessing

    keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=3,
                  class_names=["a", "b", "c"], preprocessing=Preprocessing.from_mode("inception", image_size=32),
                  ).save_to_preset(tmp_path / "my_vit")
    status, _, out, err = _probe(ENTRY_POINTS["keras-vit-convert"], "--preset", str(tmp_path / "my_vit"),
                                 "--output", str(tmp_path / "hf"), "--format", "transformers", timeout=900)
    assert status == 0, err[-3000:]
    assert "max |transformers (torch) - source model|" in out and "OK (tolerance" in out
    noise = [line for line in err.splitlines()[:-1]
             if any(word in line for word in ("I0000", "W0000", "absl", "oneDNN", "cuda", "CUDA", "torchao",
                                                 "_pytree", "Loading weights"))]
    assert not noise, noise
