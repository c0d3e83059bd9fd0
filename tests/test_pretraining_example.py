"""examples/pretrain_masked_patches.py: --smoke runs, and finetune.py starts from its weights."""

import csv
import importlib.util
import json
import os

import numpy as np
import pytest

from tests.conftest import ROOT, runs_once, to_numpy

pytest.importorskip("tensorflow", reason="the example's input pipeline needs TensorFlow")
pytest.importorskip("sklearn", reason="the example's offline dataset comes from scikit-learn")


def _load(name):
    spec = importlib.util.spec_from_file_location(f"{name}_example", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_flag_is_documented():
    parser = _load("pretrain_masked_patches").build_parser()
    for action in parser._actions:
        assert action.help, action.option_strings
    text = parser.format_help()
    for flag in ("--model", "--dataset", "--target", "--rate", "--distribution", "--run-dir", "--smoke"):
        assert flag in text


def test_defaults_follow_the_paper_off_the_demo():
    example = _load("pretrain_masked_patches")
    args = example.resolve(example.parse_args(["--model", "ViTB16", "--dataset", "imagenet2012"]))
    assert (args.lr, args.batch_size, args.warmup_steps, args.decay, args.weight_decay) == (2e-4, 4096, 10_000, "cosine", 0.0)
    args = example.resolve(example.parse_args([]))
    assert (args.model, args.image_size, args.run_dir) == ("demo", 64, os.path.join("runs", "digits_demo_mpp"))
    # The demo and smoke encoders are finetune.py's, so its --weights loads them.
    finetune = _load("finetune")
    assert example.DEMO_MODEL == finetune.DEMO_MODEL and example.SMOKE_MODEL == finetune.SMOKE_MODEL


class _Stopped(Exception):
    pass


@runs_once("torch", "the example's fit, stop and resume are the library's, held on every backend by "
           "test_pretraining and test_training_resume")
def test_smoke_run_resumes_then_finetune_starts_from_its_encoder(tmp_path, monkeypatch):
    import keras

    from keras_vit import training

    class StopAfterFirstEpoch(keras.callbacks.Callback):
        """Stands in for a killed process."""

        def on_epoch_end(self, epoch, logs=None):
            raise _Stopped()

    example = _load("pretrain_masked_patches")
    run_dir = tmp_path / "mpp"
    argv = ["--smoke", "--run-dir", str(run_dir), "--verbose", "0"]
    run_callbacks = training.run_callbacks
    monkeypatch.setattr(training, "run_callbacks", lambda *a, **k: run_callbacks(*a, **k) + [StopAfterFirstEpoch()])
    with pytest.raises(_Stopped):
        example.main(argv)
    assert os.path.exists(run_dir / "backup") and not os.path.exists(run_dir / "encoder.weights.h5")
    monkeypatch.setattr(training, "run_callbacks", run_callbacks)
    results = example.main(argv)
    assert results["updates"] == 4 and np.isfinite(results["loss"])  # 2 before the stop, 2 after
    with open(run_dir / "log.csv") as f:
        assert [int(row["epoch"]) for row in csv.DictReader(f)] == [0, 1]
    assert not os.path.exists(run_dir / "backup")
    for name in ("encoder.weights.h5", "final.weights.h5", "best.weights.h5", "results.json"):
        assert os.path.exists(run_dir / name), name
    with open(run_dir / "results.json") as f:
        assert json.load(f)["args"]["target"] == "mean_color"

    finetune = _load("finetune")
    weights = str(run_dir / "encoder.weights.h5")
    # A .weights.h5 file records no numerics: the flags say them.
    argv = ["--smoke", "--weights", weights, "--gelu", "tanh", "--preprocessing", "inception",
            "--run-dir", str(tmp_path / "ft"), "--verbose", "0"]
    # The classifier finetune.py builds starts from the pre-trained encoder
    # (position embedding resized from the 4x4 to the 2x2 grid).
    args = finetune.resolve(finetune.parse_args(argv))
    classifier = finetune.build_model(args, classes=10)
    encoder = example.build_encoder(example.resolve(example.parse_args(["--smoke"])))
    encoder.load_weights(weights)
    for name in ("embedding", "encoderblock_0", "encoder_norm"):
        for a, b in zip(encoder.get_layer(name).weights, classifier.get_layer(name).weights):
            if "pos_embedding" not in a.path:
                np.testing.assert_array_equal(to_numpy(a), to_numpy(b), err_msg=a.path)
    from keras_vit.weights.posemb import resample_posemb

    saved = to_numpy(encoder.get_layer("embedding").pos_embedding)
    np.testing.assert_allclose(
        to_numpy(classifier.get_layer("embedding").pos_embedding),
        resample_posemb(saved, (2, 2), 1, old_grid=(4, 4)), atol=1e-6,
    )
    assert not np.any(to_numpy(classifier.get_layer("head").kernel))  # new zero head
    tuned = finetune.main(argv)
    assert tuned["updates"] == 4 and 0.0 <= tuned["accuracy"] <= 1.0


@runs_once("torch", "a tool behind the README's numbers; the pre-training it runs is held on every "
           "backend by test_pretraining")
def test_experiment_tool_runs(tmp_path, monkeypatch):
    """tools/pretraining_experiment.py (the README's numbers), in miniature."""
    from keras_vit_tools import pretraining_experiment as tool

    monkeypatch.setattr(tool, "IMAGE_SIZE", 32)  # a smaller encoder than the real run's
    monkeypatch.setattr(tool, "ENCODER", dict(tool.ENCODER, patch_size=8))
    output = tmp_path / "results.json"
    rows, summary = tool.main([
        "--seeds", "0", "--pretrain-steps", "1", "--pretrain-batch", "1438", "--finetune-steps", "1",
        "--shots", "2", "--hidden-size", "16", "--num-layers", "1", "--torch-threads", "0",
        "--output", str(output),
    ])
    (row,) = rows
    for key in ("random_few_shot", "pretrained_few_shot", "random_finetune", "pretrained_finetune"):
        assert 0.0 <= row[key] <= 1.0, key
    assert np.isfinite(row["heldout_loss"]) and 0 < summary["position_only_loss"] < np.log(512)
    with open(output) as f:
        assert json.load(f)["summary"]["backend"] == summary["backend"]
