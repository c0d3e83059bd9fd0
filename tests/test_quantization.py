"""`model.quantize(...)`: the real weights' top-1, quantized export to every format that
takes it, and the one-call int8 export quantized by the runtime's own tool.

Every model family is quantized, saved, reloaded and exported in
test_model_contract.py (`model_contract.run_quantization_test`).

Where it runs: the quantized model's export routes in every job; the
runtimes' int8 quantizers on one ONNX or OpenVINO route per job; the real
weights' accuracy and the command line once."""

import warnings

import keras
import numpy as np
import pytest
from conftest import DEIT_NPZ, imagenet_preprocess, per_backend, requires_shared, runs_once
from families import OPTIONS, make_model

import keras_vit
from keras_vit import export
from keras_vit_tools.commands import keras_vit as run_cli

BACKEND = keras.backend.backend()
# scikit-image's colour photos; DeiT-Tiny's float32 top-1 on them is
# 285 Egyptian cat, 967 espresso, 747 punching bag, 517 crane,
# 107 jellyfish, 911 wool, 971 bubble.
PHOTOS = ("chelsea", "coffee", "astronaut", "rocket", "retina", "immunohistochemistry", "hubble_deep_field")


@requires_shared
@runs_once("torch", "the accuracy of the real weights in int8; Keras' int8 layers are held on every "
                    "backend by the model contract")
def test_int8_keeps_the_real_weights_top1():
    import skimage.data

    x = np.stack([imagenet_preprocess(getattr(skimage.data, name)()) for name in PHOTOS])
    model = keras_vit.ViTTi16(weights=str(DEIT_NPZ), mlp_activation="gelu", classifier_activation=None)
    reference = model.predict(x, verbose=0)
    model.quantize("int8")
    quantized = model.predict(x, verbose=0)
    top1, ref_top1 = quantized.argmax(-1), reference.argmax(-1)
    assert ref_top1[:2].tolist()[1] == 967 and ref_top1[0] in (281, 282, 285)
    # The confident photos keep their class; at most one of the seven (the
    # rocket, float32 top-1 probability 0.21) moves to a near neighbour.
    assert (top1[:3] == ref_top1[:3]).all(), (top1, ref_top1)
    assert (top1 == ref_top1).sum() >= len(PHOTOS) - 1, (top1, ref_top1)
    top5 = np.argsort(reference, axis=-1)[:, -5:]
    assert all(t in row for t, row in zip(top1, top5))


@pytest.mark.parametrize("format", export.QUANTIZED_FORMATS.get(BACKEND, ()))
def test_quantized_model_exports(format, tmp_path):
    keras.utils.set_random_seed(0)  # the same weights whatever ran before on this worker
    model = make_model("deit", **OPTIONS)
    model.quantize("int8")
    x = np.random.default_rng(0).normal(size=(3, 32, 32, 3)).astype("float32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = export.export_model(model, str(tmp_path / f"q{export.SUFFIXES[format]}"), format)
    # ONNX Runtime emulates Keras' int8 layers (25x slower): the warning names the fast path.
    slow = [str(w.message) for w in caught if "emulating its int8 layers" in str(w.message)]
    assert len(slow) == (format == "onnx"), slow
    assert all("quantize='int8'" in message for message in slow)
    diff, outputs, expected = export.verify_export(path, format, model, x)
    # The runtime's fused float ops differ from Keras' by ~1e-7 ahead of each
    # int8 rounding; where a value sits on a rounding boundary one step flips
    # and moves that image's logits by ~1 % (about one random model in 20).
    # Every other image is reproduced exactly.
    per_image = np.abs(outputs - expected).max(-1)
    assert (per_image > 1e-4).sum() <= 1, per_image
    assert (per_image <= 0.03 * np.abs(expected).max(-1)).all(), per_image
    assert (outputs.argmax(-1) == expected.argmax(-1)).all()


# ------------------------------------------- int8 by the runtime's own tool --
def _int8_operations(path, format):
    """The int8 operations of an artifact: ONNX Runtime's quantized MatMuls, or
    OpenVINO's int8/uint8 weight constants."""
    if format == "onnx":
        import onnx

        return [n.op_type for n in onnx.load(path).graph.node if "Integer" in n.op_type or "Quant" in n.op_type]
    import openvino as ov

    model = ov.Core().read_model(path)
    return [op.get_type_name() for op in model.get_ops()
            if op.get_type_name() == "Constant" and op.get_element_type().get_type_name() in ("i8", "u8")]


# The one-call int8 export of the tiny model: one runtime per backend's job.
# With the real weights' exports further down (ONNX on torch, OpenVINO on
# jax), ONNX Runtime's quantizer takes the ONNX graph of every backend's
# exporter, and NNCF the OpenVINO graphs of jax and torch.
ONE_CALL_INT8_FORMAT = per_backend(jax="onnx", tensorflow="onnx", torch="openvino")


@pytest.mark.parametrize("format", [ONE_CALL_INT8_FORMAT])
def test_one_call_int8_export(format, tmp_path):
    """The float graph quantized by ONNX Runtime / NNCF; the report is recomputed
    from the float32 and int8 artifacts run in the runtime."""
    model = make_model("deit", **OPTIONS)
    x = np.random.default_rng(0).normal(size=(6, 32, 32, 3)).astype("float32")
    path = model.export(str(tmp_path / f"int8{export.SUFFIXES[format]}"), format=format,
                        quantize="int8", sample_images=x)
    assert isinstance(path, str) and path.endswith(export.SUFFIXES[format])
    assert _int8_operations(path, format), "no int8 operation in the artifact"
    float_path = export.export_model(model, str(tmp_path / f"float{export.SUFFIXES[format]}"), format)
    reference = export.run_exported(float_path, format, x)
    for batch in (3, 1):
        outputs = export.run_exported(path, format, x[:batch])
        assert outputs.shape == (batch, 10)
        # Quantized, not equal; close to float32 (relative error of the logits).
        error = np.linalg.norm(outputs - reference[:batch]) / np.linalg.norm(reference[:batch])
        assert 0 < error < 0.1, error
    outputs = export.run_exported(path, format, x)
    agreeing = int((outputs.argmax(-1) == reference.argmax(-1)).sum())
    assert (path.agreeing, path.num_images, path.images) == (agreeing, 6, "given")
    assert path.top1_agreement == agreeing / 6 and agreeing >= 5
    assert path.max_abs_diff == pytest.approx(np.abs(outputs - reference).max(), rel=1e-5)
    assert f"top-1 agrees with float32 on {agreeing} of 6 given images" in path.summary()


@runs_once("jax", "the arguments are checked before any exporter runs")
def test_one_call_int8_refusals(tmp_path):
    model = make_model("deit", **OPTIONS)
    with pytest.raises(ValueError, match=r"drives for \('onnx', 'openvino'\)"):
        export.export_model(model, str(tmp_path / "m"), "tf_saved_model", quantize="int8")
    with pytest.raises(ValueError, match=r"`quantize` must be None or one of \('int8',\)"):
        export.export_model(model, str(tmp_path / "m.onnx"), "onnx", quantize="int4")
    with pytest.raises(ValueError, match=r"`sample_images` must be a batch of shape \(N, 32, 32, 3\)"):
        export.export_model(model, str(tmp_path / "m.onnx"), "onnx", quantize="int8",
                            sample_images=np.zeros((2, 16, 16, 3)))
    # Raw [0, 255] photos are no model inputs: the agreement on them would say nothing.
    photos = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3)).astype("float32")
    with pytest.raises(ValueError, match=r"must be preprocessed model inputs.*\[0, 255\]|raw pixels"):
        export.export_model(model, str(tmp_path / "m.onnx"), "onnx", quantize="int8", sample_images=photos)
    assert not (tmp_path / "m.onnx").exists()
    recorded = make_model("vit")
    recorded.preprocessing = keras_vit.preprocessing.Preprocessing.from_mode("inception")
    with pytest.raises(ValueError, match=r"in about \[-1, 1\].*values in \[0, 2\]"):
        export.export_model(recorded, str(tmp_path / "m.onnx"), "onnx", quantize="int8",
                            sample_images=np.linspace(0, 2, 2 * 32 * 32 * 3).reshape(2, 32, 32, 3))
    model.quantize("int8")
    with pytest.raises(ValueError, match="already quantized by Keras"):
        export.export_model(model, str(tmp_path / "m.onnx"), "onnx", quantize="int8")
    if "openvino" in export.BACKEND_FORMATS.get(BACKEND, ()):
        # Keras' int8 in OpenVINO is refused, naming the fast path.
        with pytest.raises(ValueError, match=r"cannot be exported.*quantize='int8'"):
            export.export_model(model, str(tmp_path / "m.xml"), "openvino")


@runs_once("jax", "the command's flags and report; the quantizers are held by the tests above")
def test_cli_int8_export_reports_agreement(tmp_path, capsys):
    saved = str(tmp_path / "tiny.keras")
    make_model("deit", **OPTIONS).save(saved)
    output = str(tmp_path / "tiny.int8.onnx")
    status = run_cli(["export", saved, "--format", "onnx", "--output", output,
                       "--quantize", "int8", "--samples", "4"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "int8 by the runtime's quantizer" in out
    line = next(l for l in out.splitlines() if "top-1 agrees with float32 on" in l)
    assert line.startswith("int8 onnx:") and "of 4 random images" in line
    assert _int8_operations(output, "onnx")
    # An agreement below --min-agreement fails the command (status 1); one
    # that no run can reach is a usage error (status 2).
    from keras_vit import export

    exported = export.export_model

    def half_agreeing(*args, **kwargs):
        path = exported(*args, **kwargs)
        path.top1_agreement = 0.5
        return path

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(export, "export_model", half_agreeing)
        assert run_cli(["export", saved, "--format", "onnx", "--output", output, "--quantize", "int8",
                        "--samples", "4", "--min-agreement", "0.75"]) == 1
    assert "FAILED (top-1 agreement at least 0.75)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        run_cli(["export", saved, "--format", "onnx", "--output", output, "--min-agreement", "1.01"])
    assert exit_info.value.code == 2 and "--min-agreement: must be a number in [0, 1]" in capsys.readouterr().err


# The real weights through the one-call int8 path: ONNX on torch, OpenVINO on
# jax (each format once; every backend runs the tiny models above).
REAL_INT8_BACKEND = {"onnx": "torch", "openvino": "jax"}


@requires_shared
@pytest.mark.parametrize("format", [pytest.param(f, marks=runs_once(b, "the int8 artifacts of the real weights, "
                                                                    "each runtime once"))
                                    for f, b in sorted(REAL_INT8_BACKEND.items())])
def test_one_call_int8_keeps_the_real_weights_top1(format, tmp_path):
    import skimage.data

    x = np.stack([imagenet_preprocess(getattr(skimage.data, name)()) for name in PHOTOS])
    model = keras_vit.ViTTi16(weights=str(DEIT_NPZ), mlp_activation="gelu", classifier_activation=None)
    reference = model.predict(x, verbose=0).argmax(-1)
    path = export.export_model(model, str(tmp_path / f"deit{export.SUFFIXES[format]}"), format,
                               quantize="int8", sample_images=x)
    top1 = export.run_exported(path, format, x).argmax(-1)
    print(f"\n{path.summary()}; against Keras float32: {(top1 == reference).sum()} of {len(x)}")
    assert reference[1] == 967 and reference[0] in (281, 282, 285)
    # The confident photos keep their class; at most one of the seven (the
    # rocket, float32 top-1 probability 0.21) may move.
    assert (top1[:3] == reference[:3]).all(), (top1, reference)
    assert (top1 == reference).sum() >= len(PHOTOS) - 1, (top1, reference)
    assert path.agreeing >= len(PHOTOS) - 1, path.summary()
