"""examples/finetune.py: --smoke runs end to end with the schedule it prints;
every flag is documented; the defaults, the numerics and the flags are checked
before any work starts."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT, TINY, runs_once
from conftest import spread

pytestmark = spread("the example's flags, defaults and runs over the library's training, held on every "
                    "backend by the training tests; each case once")

pytest.importorskip("tensorflow", reason="the example's input pipeline needs TensorFlow")
pytest.importorskip("sklearn", reason="the example's offline dataset comes from scikit-learn")

HEAVY = ("keras", "tensorflow", "jax", "torch", "keras_vit")


def _load_example():
    spec = importlib.util.spec_from_file_location("finetune_example", ROOT / "examples" / "finetune.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_flag_is_documented():
    parser = _load_example().build_parser()
    for action in parser._actions:
        assert action.help, action.option_strings
    text = parser.format_help()
    for flag in ("--model", "--weights", "--dataset", "--distribution", "--device-batch-size", "--smoke",
                 "--recipe", "--threads", "--skip-unreadable"):
        assert flag in text


def test_help_and_usage_errors_import_nothing_heavy():
    """`--help` answers without importing Keras or a backend (it took 16 s),
    and a misspelt flag is named with the closest valid one."""
    probe = (
        "import json, runpy, sys\n"
        "sys.argv = ['finetune.py'] + sys.argv[1:]\n"
        "try:\n"
        "    runpy.run_path('examples/finetune.py', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    status = exit.code\n"
        f"print(json.dumps([status, sorted(m for m in {HEAVY!r} if m in sys.modules)]), file=sys.stderr)\n"
    )
    errors = []
    for argv, expected in ((["--help"], 0), (["--weigths", "w.npz"], 2), (["--epochs", "3"], 2)):
        result = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, capture_output=True,
                                text=True, timeout=120)
        status, heavy = json.loads(result.stderr.strip().splitlines()[-1])
        assert (status, heavy) == (expected, []), result.stderr[-2000:]
        errors.append(result.stderr)
    assert "unrecognized argument '--weigths'; did you mean '--weights'?" in errors[1]
    # Another script's name for a flag is answered with this script's flag.
    assert "unrecognized argument '--epochs'; did you mean '--total-steps'?" in errors[2]


NOISE = ("I0000", "E0000", "W0000", "absl", "oneDNN", "cuda", "CUDA", "torchvision", "torchao")


# The examples read their data with tf.data under every backend, so
# TensorFlow's start-up notices are theirs on each; their muting is one.
@runs_once("torch", "the examples mute the same libraries under every backend")
@pytest.mark.parametrize("example, argv", [
    ("finetune.py", ["--smoke", "--total-steps", "1", "--eval-every", "1", "--verbose", "0"]),
    ("pretrain_masked_patches.py", ["--smoke", "--total-steps", "1", "--eval-every", "1", "--verbose", "0"]),
])
def test_examples_keep_library_banners_out_of_the_terminal(tmp_path, example, argv):
    """Run as a user runs them (no TF_CPP_MIN_LOG_LEVEL of the test process):
    TensorFlow's oneDNN and CUDA notices stay out of the terminal."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, f"examples/{example}", *argv, "--run-dir", str(tmp_path / "run")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    noise = [line for line in result.stderr.splitlines() if any(word in line for word in NOISE)]
    assert not noise, noise


def test_the_parsers_lists_are_keras_vits():
    from keras_vit.presets.resolver import numerics_unrecorded
    from keras_vit.training import distribute

    example = _load_example()
    assert example.DISTRIBUTIONS == distribute.NAMES
    for suffix, unrecorded in example.UNRECORDED_BY_SUFFIX.items():
        assert numerics_unrecorded(f"model{suffix}") == unrecorded, suffix
    assert set(example.UNRECORDED_BY_SUFFIX) == set(example.CHECKPOINT_SUFFIXES) - {".keras"}


def test_missing_numerics_flags_answer_before_the_libraries_load(tmp_path):
    """A bare .npz without --gelu and --preprocessing is refused at once (it
    took 49 s, the time to import the libraries)."""
    (tmp_path / "photos").mkdir()
    (tmp_path / "deit.npz").write_bytes(b"")
    probe = (
        "import json, runpy, sys\n"
        "sys.argv = ['finetune.py'] + sys.argv[1:]\n"
        "try:\n"
        "    runpy.run_path('examples/finetune.py', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    print(exit.code, file=sys.stderr)\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)), file=sys.stderr)\n"
    )
    argv = ["--data", str(tmp_path / "photos"), "--model", "ViTTi16", "--weights", str(tmp_path / "deit.npz"),
            "--gelu", "erf"]
    result = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert json.loads(result.stderr.strip().splitlines()[-1]) == [], result.stderr[-2000:]
    assert "does not record the numerics it was trained with: give --preprocessing (" in result.stderr


def test_smoke_run_makes_exactly_the_updates_asked(tmp_path, capsys):
    """3 updates in intervals of 2: the second interval is cut short (it ran
    4 before); the banner says so; the run's model is a preset."""
    example = _load_example()
    results = example.main(["--smoke", "--total-steps", "3", "--eval-every", "2",
                            "--run-dir", str(tmp_path), "--verbose", "0"])
    assert results["updates"] == 3
    assert 0.0 <= results["accuracy"] <= 1.0
    out = capsys.readouterr().out
    assert ("schedule: 3 updates of batch 32, adamw at peak lr 0.001, warm-up 0 updates, then cosine "
            "decay to 0 by update 3; held-out evaluation after updates 2, 3") in out
    with open(tmp_path / "log.csv") as f:
        assert len(f.read().strip().splitlines()) == 3  # a header and two evaluations
    for name in ("preset/config.json", "best/config.json", "log.csv", "results.json"):
        assert os.path.exists(tmp_path / name), name
    assert not os.path.exists(tmp_path / "final.weights.h5")
    with open(tmp_path / "results.json") as f:
        assert json.load(f)["args"]["model"] == "smoke"
    assert f"keras_vit.from_preset({str(tmp_path / 'preset')!r})" in out


def test_defaults_follow_the_recipes(tmp_path):
    example = _load_example()
    weights = tmp_path / "x.npz"
    weights.write_bytes(b"")
    numerics = ["--gelu", "tanh", "--preprocessing", "inception"]
    args = example.resolve(example.parse_args(["--model", "ViTB16", "--weights", str(weights), "--dataset",
                                               "cifar10", *numerics]))
    assert (args.optimizer, args.batch_size, args.image_size, args.lr) == ("sgd", 512, 384, 0.03)
    # 500 updates warm up for 100 (a fifth), not 500: the run decays.
    assert (args.total_steps, args.warmup_steps, args.recipe) == (500, 100, "paper")
    args = example.resolve(example.parse_args(["--model", "ViTTi16", "--weights", str(weights), "--recipe", "cpu",
                                               "--dataset", "cifar10", *numerics]))
    assert (args.batch_size, args.image_size, args.total_steps, args.warmup_steps) == (32, 224, 100, 20)
    args = example.resolve(example.parse_args([]))
    assert (args.model, args.dataset, args.optimizer) == ("demo", "digits", "adamw")
    args = example.resolve(example.parse_args(["--total-steps", "50"]))
    assert args.warmup_steps == 10  # the demo's 50, at most a fifth
    with pytest.raises(SystemExit, match="--warmup-steps 80 is longer than the run"):
        example.resolve(example.parse_args(["--total-steps", "50", "--warmup-steps", "80"]))
    with pytest.raises(SystemExit, match="--recipe cpu fine-tunes a checkpoint"):
        example.resolve(example.parse_args(["--recipe", "cpu"]))


def test_a_file_without_numerics_needs_the_flags(tmp_path, rng):
    """A bare .npz (DeiT's, say) does not record its GELU or input scaling:
    the run refuses to guess Google's, naming both flags."""
    from synthetic import official_params

    example = _load_example()
    weights = tmp_path / "deit.npz"
    np.savez(weights, **official_params(rng))
    base = ["--model", "ViTTi16", "--weights", str(weights), "--dataset", "cifar10"]
    with pytest.raises(SystemExit, match=r"does not record .*: give --gelu and --preprocessing"):
        example.resolve(example.parse_args(base))
    with pytest.raises(SystemExit, match=r"give --preprocessing \("):
        example.resolve(example.parse_args(base + ["--gelu", "erf"]))
    args = example.resolve(example.parse_args(base + ["--gelu", "erf", "--preprocessing", "imagenet"]))
    assert (args.gelu, args.preprocessing) == ("erf", "imagenet")
    with pytest.raises(SystemExit, match=r"--weights 'gone\.npz': no such file"):
        example.resolve(example.parse_args(["--weights", "gone.npz"]))


def test_a_recorded_checkpoint_needs_no_flags(tmp_path):
    import keras_vit

    keras_vit.ViT(**TINY, classes=3, mlp_activation="gelu",
                  preprocessing=keras_vit.preprocessing.Preprocessing.from_mode("imagenet")).save(
        tmp_path / "m.keras")
    example = _load_example()
    args = example.resolve(example.parse_args(["--model", "ViTTi16", "--weights", str(tmp_path / "m.keras"),
                                               "--dataset", "cifar10"]))
    assert args.preprocessing == "imagenet"


def test_updates_count_parameter_updates_under_accumulation(tmp_path):
    example = _load_example()
    # Batch 32 in micro-batches of 16: two forward passes per update.
    results = example.main(["--smoke", "--device-batch-size", "16", "--run-dir", str(tmp_path), "--verbose", "0"])
    assert results["updates"] == example.SMOKE["total_steps"]
