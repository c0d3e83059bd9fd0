"""examples/finetune.py: --smoke runs end to end; every flag is documented."""

import importlib.util
import json
import os

import pytest

from tests.conftest import ROOT

pytest.importorskip("tensorflow", reason="the example's input pipeline needs TensorFlow")
pytest.importorskip("sklearn", reason="the example's offline dataset comes from scikit-learn")


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
    for flag in ("--model", "--weights", "--dataset", "--distribution", "--device-batch-size", "--smoke"):
        assert flag in text


def test_smoke_run(tmp_path):
    example = _load_example()
    results = example.main(["--smoke", "--run-dir", str(tmp_path), "--verbose", "0"])
    assert results["updates"] == 4
    assert 0.0 <= results["accuracy"] <= 1.0
    for name in ("final.weights.h5", "best.weights.h5", "log.csv", "results.json"):
        assert os.path.exists(tmp_path / name), name
    with open(tmp_path / "results.json") as f:
        assert json.load(f)["args"]["model"] == "smoke"


def test_defaults_follow_the_recipes():
    example = _load_example()
    args = example.resolve(example.parse_args(["--model", "ViTB16", "--weights", "x.npz", "--dataset", "cifar10"]))
    assert (args.optimizer, args.batch_size, args.image_size, args.lr) == ("sgd", 512, 384, 0.03)
    args = example.resolve(example.parse_args([]))
    assert (args.model, args.dataset, args.optimizer) == ("demo", "digits", "adamw")


def test_updates_count_parameter_updates_under_accumulation(tmp_path):
    example = _load_example()
    # Batch 32 in micro-batches of 16: two forward passes per update.
    results = example.main(["--smoke", "--device-batch-size", "16", "--run-dir", str(tmp_path), "--verbose", "0"])
    assert results["updates"] == example.SMOKE["total_steps"]
