"""The converter tool: files written, reloaded outputs, exit codes."""

import json
import subprocess
import sys

import keras
import numpy as np
import pytest

import reference
from conftest import DEIT_NPZ, DEIT_SAFETENSORS, ROOT, TINY, requires_shared, runs_once, spread, to_numpy
from synthetic import images, official_params

from keras_vit_tools.convert import main

pytestmark = spread("the converter reads and writes NumPy arrays; the models it reloads are held on every "
                    "backend; each case once")

TINY_ARCH = json.dumps({k: v for k, v in TINY.items() if k != "image_size"})


@runs_once("torch", "--help answers before any Keras backend is imported")
def test_help_runs_as_a_script():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "convert.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for option in ("--variant", "--weights", "--preset", "--output", "--format", "--image-size", "--classes", "--gelu", "--keras", "--tolerance"):
        assert option in result.stdout


def h5_arrays(path):
    import h5py

    found = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: found.append(obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return found


@requires_shared
@runs_once("torch", "the conversion is NumPy; the real weights' forward is held on every backend by "
                    "test_loading, test_export and test_quantization")
def test_real_weights_convert_and_reload(tmp_path, capsys):
    output = tmp_path / "deit_tiny.weights.h5"
    argv = ["--variant", "ViTTi16", "--weights", str(DEIT_SAFETENSORS), "--output", str(output), "--batch-size", "1"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "max |reloaded .weights.h5 - source model| = 0\n" in printed
    assert "max |NumPy reference (float64) - source model|" in printed
    assert "MLP activation gelu," in printed and printed.rstrip().endswith("OK (tolerance 0.0001)")
    # Independently of any loader: the file holds exactly the official tensors.
    written = h5_arrays(output)
    official = np.load(DEIT_NPZ)
    assert len(written) == len(official.files) == 200
    by_shape = {}
    for array in written:
        by_shape.setdefault(array.shape, []).append(array)
    for key in official.files:
        assert any(np.array_equal(official[key], a) for a in by_shape.get(official[key].shape, [])), key


def test_tiny_checkpoint_with_keras_file(tmp_path, rng):
    params = official_params(rng, representation_size=12)
    np.savez(tmp_path / "tiny.npz", **params)
    output = tmp_path / "out" / "tiny.weights.h5"
    argv = ["--config", TINY_ARCH, "--weights", str(tmp_path / "tiny.npz"), "--output", str(output), "--keras",
            "--gelu", "tanh"]
    assert main(argv) == 0
    loaded = keras.saving.load_model(tmp_path / "out" / "tiny.keras")
    assert loaded.representation_size == 12 and loaded.mlp_activation == "gelu_tanh"
    head = keras.Model(loaded.input, loaded.get_layer("head").output)
    x = images(rng)
    np.testing.assert_allclose(to_numpy(head(x)), reference.forward(params, x), rtol=0, atol=2e-5)


def test_exit_code_when_tolerance_is_violated(tmp_path, rng, capsys):
    np.savez(tmp_path / "tiny.npz", **official_params(rng))
    # float32 Keras can never equal the float64 NumPy pass to the last bit.
    argv = ["--config", TINY_ARCH, "--weights", str(tmp_path / "tiny.npz"), "--output", str(tmp_path / "t.weights.h5"),
            "--gelu", "tanh", "--tolerance", "0"]
    assert main(argv) == 1
    assert "FAILED" in capsys.readouterr().out


def test_exit_code_on_unusable_input(tmp_path, capsys):
    argv = ["--variant", "Ti/16", "--weights", str(tmp_path / "none.npz"), "--output", str(tmp_path / "x.h5")]
    assert main(argv) == 2
    assert "--output must end with '.weights.h5'" in capsys.readouterr().err
    argv[-1] = str(tmp_path / "x.weights.h5")
    assert main(argv) == 2
    assert "none.npz" in capsys.readouterr().err


def test_presets_in_and_out(tmp_path, capsys):
    """A keras_vit preset in, a transformers directory out, checked in transformers."""
    pytest.importorskip("transformers")
    import keras_vit

    source = keras_vit.ViT(**TINY, classes=3, distillation_token=True, mlp_activation="gelu")
    for v in source.weights:
        v.assign(np.asarray(v) + np.random.default_rng(0).normal(0, 0.2, v.shape).astype("float32"))
    source.save_to_preset(tmp_path / "in")
    argv = ["--preset", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--format", "transformers"]
    # The source knows neither its classes' names nor its input scaling.
    assert main(argv) == 2
    assert "class_names=" in capsys.readouterr().err
    (tmp_path / "names.txt").write_text("cat\ndog\neel\n")
    argv += ["--preprocessing", "imagenet", "--class-names", str(tmp_path / "names.txt")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "(keras_vit preset)" in printed and "max |transformers (torch) - source model|" in printed
    assert "max |reloaded transformers preset - source model|" in printed
    assert "NumPy reference (float64)" in printed and printed.rstrip().endswith("OK (tolerance 0.0001)")
    config = json.load(open(tmp_path / "out" / "config.json"))
    assert config["id2label"] == {"0": "cat", "1": "dog", "2": "eel"}
    # A preset fixes its architecture.
    assert main(argv[:4] + ["--variant", "Ti/16"]) == 2
    assert "drop --variant" in capsys.readouterr().err
    # --weights takes a preset folder as --preset does: a whole model.
    output = tmp_path / "again.weights.h5"
    assert main(["--weights", str(tmp_path / "in"), "--output", str(output)]) == 0
    assert "(keras_vit preset)" in capsys.readouterr().out
    again = keras_vit.ViT(**TINY, classes=3, distillation_token=True, mlp_activation="gelu")
    again.load_weights(output)
    for a, b in zip(again.weights, source.weights):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


@pytest.mark.parametrize("family", ["dinov2", "clip", "mae", "siglip2"])
def test_backbones_out_to_transformers_are_checked_there(tmp_path, capsys, family):
    """Backbones written as transformers' DINOv2, CLIP, ViTMAE and SigLIP2
    towers are compared with that class's own output (pooled, embedded or
    tokens; SigLIP2's from the image's patches)."""
    pytest.importorskip("transformers")
    import keras_vit

    options = {
        "dinov2": dict(include_top=False, pooling="token", layer_scale_init=0.5),
        "clip": dict(include_top=False, pooling="token", pre_norm=True, patch_bias=False,
                     pooled_norm=True, mlp_activation="quick_gelu", layer_norm_epsilon=1e-5),
        "mae": dict(include_top=False, position_embedding="sincos", mlp_activation="gelu"),
        "siglip2": dict(classifier="map", include_top=False, pooling="map", position_interpolation="siglip2"),
    }[family]
    source = keras_vit.ViT(**TINY, **options)
    for v in source.weights:
        v.assign(np.asarray(v) + np.random.default_rng(0).normal(0, 0.2, v.shape).astype("float32"))
    source.save_to_preset(tmp_path / "in")
    argv = ["--preset", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--format", "transformers",
            "--preprocessing", "imagenet"]
    assert main(argv) == 0, capsys.readouterr()
    printed = capsys.readouterr().out
    assert "max |transformers (torch) - source model|" in printed and printed.rstrip().endswith("OK (tolerance 0.0001)")


@runs_once("torch", "the architecture is read from the tensors' shapes with NumPy; conversion is held "
           "on every backend by test_real_weights_convert_and_reload")
def test_a_checkpoint_file_names_its_own_architecture(tmp_path, rng, capsys):
    """Without --variant the architecture is read from the file's tensors
    (the resolver every command shares), here ViT-Ti/16 at 32 px."""
    params = official_params(rng, image_size=32, patch_size=16, hidden_size=192, num_layers=12,
                             num_heads=3, mlp_dim=768, classes=4)
    np.savez(tmp_path / "ti.npz", **params)
    output = tmp_path / "ti.weights.h5"
    # An .npz does not record its GELU: the same rule as the constructors'.
    assert main(["--weights", str(tmp_path / "ti.npz"), "--output", str(output), "--batch-size", "1"]) == 2
    assert "does not record the GELU" in capsys.readouterr().err
    assert main(["--weights", str(tmp_path / "ti.npz"), "--output", str(output), "--gelu", "tanh",
                 "--batch-size", "1"]) == 0
    printed = capsys.readouterr().out
    assert "model: vitti16, image (32, 32), classes 4, MLP activation gelu_tanh," in printed and "OK (tolerance" in printed
    assert main(["--weights", str(tmp_path / "ti.npz"), "--output", str(output), "--gelu", "erf",
                 "--batch-size", "1"]) == 0
    assert "MLP activation gelu," in capsys.readouterr().out  # the flag reaches the model
