"""Export to every format of the current backend, run in the format's own runtime.

Artifacts are written by `model.export` (Keras' method, which keras_vit's
models route to `keras_vit.export.export_model`) once per module (the
exporters take seconds each) and compared with `model.predict` at two batch
sizes.

Where it runs: each export route (a backend's exporter of a format) in its
backend's job, with one of the three test models per route, the models
taking turns over the routes (`ROUTE_FAMILY`): the exporter does not change
with the layers inside, which the model contract exports on every backend.
What is no route's (the command line, the module's imports, argument
checks) runs once.
"""

import importlib
import json
import subprocess
import sys

import keras
import numpy as np
import pytest
from conftest import BACKENDS, DEIT_NPZ, TINY, imagenet_preprocess, per_backend, requires_shared, runs_once, to_numpy
from families import BASE, OPTIONS, make_model

import keras_vit
from keras_vit import export
from keras_vit.cli import commands as cli
from keras_vit_tools.commands import keras_vit as run_cli
from keras_vit.export import serving
from keras_vit import kernels
from keras_vit.layers.resnet import GroupNorm, MaxPool2D

BACKEND = keras.backend.backend()
FORMATS = export.BACKEND_FORMATS.get(BACKEND, ())
# "options": the architecture options of later checkpoints (DeiT's
# distillation token and averaged heads, register tokens, LayerScale, no
# q/k/v bias) in one model.
# The models exported, from the registry (tests/families.py): "options" is
# DeiT (distillation token, averaged heads) with the options of later
# checkpoints (register tokens, LayerScale, no q/k/v bias) in one model.
MODELS = {"vit": ("vit", {}), "hybrid": ("hybrid", {}), "options": ("deit", OPTIONS)}
FAMILIES = tuple(MODELS)
ATOL = 1e-4


def _model(name):
    family, options = MODELS[name]
    return make_model(family, **options)


# What the "vit" model records, carried into every artifact.
CLASS_NAMES = [f"class {i}" for i in range(10)]
RECORD = dict(mode="imagenet", image_size=32, crop_fraction=0.875)


@pytest.fixture(scope="module")
def models():
    from keras_vit.preprocessing import Preprocessing

    built = {family: _model(family) for family in FAMILIES}
    built["vit"].class_names = CLASS_NAMES
    built["vit"].preprocessing = Preprocessing.from_mode(**RECORD)
    return built


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(0).normal(size=(3, 32, 32, 3)).astype("float32")


@pytest.fixture(scope="module")
def artifacts(models, tmp_path_factory):
    """`(family, format) -> path`, exported on first use."""
    folder = tmp_path_factory.mktemp("export")
    cache = {}

    def get(family, format):
        if (family, format) not in cache:
            path = folder / f"{family}_{format}{export.SUFFIXES[format]}"
            cache[(family, format)] = models[family].export(str(path), format=format)
        return cache[(family, format)]

    return get


# On torch a SavedModel, and a LiteRT file of dynamic batch, are written by
# the tensorflow backend's exporter in a subprocess, from the model's
# `.keras` file (`export.pipeline._through_tensorflow`): the tensorflow job
# exports every model to them, so here one model (with its class names and
# preprocessing) holds the hand-off.
THROUGH_TENSORFLOW = ("tf_saved_model", "litert") if BACKEND == "torch" else ()


def route_family(backend, format):
    """The test model a route exports: the families take turns over the
    backends for each format, and over the formats for each backend."""
    if BACKEND == "torch" and format in THROUGH_TENSORFLOW:
        return "vit"
    shift = BACKENDS.index(backend) + sorted(export.FORMATS).index(format)
    return FAMILIES[shift % len(FAMILIES)]


CASES = [(route_family(BACKEND, format), format) for format in FORMATS]


@pytest.mark.parametrize("family, format", CASES)
def test_export_runs_in_its_runtime_like_predict(family, format, models, images, artifacts):
    path = artifacts(family, format)
    for batch in (3, 1):
        diff, outputs, expected = export.verify_export(path, format, models[family], images[:batch])
        assert outputs.shape == (batch, 10)
        assert diff <= ATOL, (family, format, batch, diff)
    # Not a constant function: different images, different outputs.
    assert np.abs(expected[0] - to_numpy(models[family](images[1:2]))[0]).max() > 1e-2


@pytest.mark.parametrize("format", FORMATS)
def test_every_artifact_carries_class_names_and_preprocessing(format, models, artifacts, images):
    """The metadata of each format (`keras_vit.export.metadata`): the model's
    class names and preprocessing, and that its input is preprocessed
    images, which the runtime then refuses uint8 pixels for."""
    from keras_vit.preprocessing import Preprocessing

    path = artifacts("vit", format)  # the model with class names and a record
    meta = export.read_metadata(path, format)
    assert meta["class_names"] == CLASS_NAMES
    assert Preprocessing.from_config(meta["preprocessing"]) == Preprocessing.from_mode(**RECORD)
    assert (meta["raw_images"], meta["output"], meta["model"]) == (False, "logits", models["vit"].name)
    assert export.load_exported(path, format).metadata == meta
    with pytest.raises(ValueError, match="takes images already preprocessed.*uint8 pixels.*raw_images=True"):
        export.run_exported(path, format, np.zeros((1, 32, 32, 3), "uint8"))
    if format == "tf_saved_model":  # also attributes of the loaded SavedModel
        import tensorflow as tf

        loaded = tf.saved_model.load(path)
        assert [n.decode() for n in loaded.class_names.numpy()] == CLASS_NAMES
        assert export.metadata.decode(json.loads(loaded.keras_vit_metadata.numpy())) == meta
    if ("options", format) in CASES:
        # A model without names or record: the artifact says only what it has.
        bare_path = artifacts("options", format)
        bare = export.read_metadata(bare_path, format)
        assert "class_names" not in bare and "preprocessing" not in bare and bare["raw_images"] is False
        if format == "tf_saved_model":
            import tensorflow as tf

            assert not hasattr(tf.saved_model.load(bare_path), "class_names")


def test_onnx_projection_weights_are_initializers(artifacts):
    """Every projection is a MatMul on a 2D initializer (what ONNX Runtime's int8 tools need)."""
    import onnx

    graph = onnx.load(artifacts(route_family(BACKEND, "onnx"), "onnx")).graph
    weights = {init.name: tuple(init.dims) for init in graph.initializer}
    reshaped = [n.name for n in graph.node if n.op_type == "Reshape" and n.input[0] in weights]
    assert not reshaped, reshaped
    on_weights = [n for n in graph.node if n.op_type in ("MatMul", "Gemm") and n.input[1] in weights]
    # Per block: query, key and value (tf2onnx merges the three into one
    # product), out and the two MLP layers; plus the patch embedding and head.
    assert len(on_weights) >= 4 * BASE["num_layers"] + 2, len(on_weights)


@pytest.mark.parametrize("family, format", [c for c in CASES if c[1] in ("onnx", "openvino")])
def test_graphs_name_their_input_and_output(family, format, artifacts):
    """`images` in, `logits` out (these heads have no activation), one
    output: not the exporter's last operation (`add_1741`)."""
    path = artifacts(family, format)
    if format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        inputs, outputs = [i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()]
    else:
        import openvino

        model = openvino.Core().read_model(path)
        inputs, outputs = [i.get_any_name() for i in model.inputs], [o.get_any_name() for o in model.outputs]
    assert (inputs, outputs) == (["images"], ["logits"])


def test_output_names_say_what_the_output_holds():
    assert export.output_name(_model("vit")) == "logits"
    assert export.output_name(keras_vit.ViT(**TINY, classes=3)) == "probabilities"
    assert export.output_name(keras_vit.ViT(**TINY, include_top=False, pooling="token")) == "features"


@pytest.mark.parametrize("family, format", CASES)
def test_batch_axis_is_dynamic(family, format, artifacts):
    run, batch, _ = getattr(serving, f"_load_{format}")(artifacts(family, format))
    assert batch is None, batch


def test_model_export_keeps_keras_signature(tmp_path, models, images):
    """`input_signature` fixes the batch (LiteRT from torch: litert-torch) and the
    image size; unknown options are refused by name; `verbose` is accepted."""
    format = "litert" if "litert" in FORMATS else "tf_saved_model"
    model = models["options"]
    spec = keras.InputSpec(shape=(2, 48, 48, 3))
    path = model.export(str(tmp_path / f"fixed{export.SUFFIXES[format]}"), format=format,
                        verbose=False, input_signature=[spec])
    assert getattr(serving, f"_load_{format}")(path)[1] == 2
    x = np.random.default_rng(3).normal(size=(3, 48, 48, 3)).astype("float32")
    diff, outputs, _ = export.verify_export(path, format, model, x)  # fed 2 + 1 (padded)
    assert outputs.shape == (3, 10) and diff <= ATOL, diff
    with pytest.raises(ValueError, match=r"Unknown keyword argument.*'opset'.*image_size"):
        model.export(str(tmp_path / "m"), opset=17)
    with pytest.raises(ValueError, match="input_signature"):
        model.export(str(tmp_path / "m"), input_signature=[keras.InputSpec(shape=(None, 32, 32, 1))])


@runs_once("torch", "the task model is refused before any exporter runs")
def test_training_task_is_not_exported(tmp_path):
    encoder = keras_vit.ViT(**TINY, include_top=False)
    task = keras_vit.pretraining.MaskedPatchPrediction(encoder)
    with pytest.raises(ValueError, match=r"export its encoder"):
        task.export(str(tmp_path / "task"))


@runs_once("torch", "what `import keras_vit` loads is the same under every backend")
def test_export_module_is_an_attribute_and_imports_no_exporter():
    code = (
        "import sys, keras_vit\n"
        "assert callable(keras_vit.export.export_model)\n"
        "assert callable(keras_vit.export_int8.quantize_onnx)\n"
        "heavy = [m for m in ('onnx', 'onnxruntime', 'openvino', 'nncf', 'tf2onnx', 'jax2onnx')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    with pytest.raises(AttributeError, match="no attribute 'exports'"):
        keras_vit.exports  # noqa: B018


@pytest.mark.skipif("openvino" not in FORMATS, reason=f"no OpenVINO export on {BACKEND}")
def test_openvino_runs_in_float32_unless_asked(models, images, artifacts):
    """`run_exported` compiles for float32; bfloat16 is an explicit option."""
    import openvino as ov

    family = route_family(BACKEND, "openvino")
    path = artifacts(family, "openvino")
    compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    expected = models[family].predict(images, verbose=0)
    assert np.abs(export.run_exported(path, "openvino", images) - expected).max() <= ATOL
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"
    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    bf16 = np.abs(export.run_exported(path, "openvino", images, precision="bf16") - expected).max()
    if "BF16" in capabilities:  # this CPU has bfloat16 units (AVX512_BF16): OpenVINO's default
        default = ov.Core().compile_model(path, "CPU")
        assert "bf" in str(default.get_property("INFERENCE_PRECISION_HINT"))
        assert bf16 > 1e-3, bf16
    with pytest.raises(ValueError, match=r"`precision` must be None .*'f32', 'bf16'"):
        export.run_exported(path, "openvino", images, precision="fp8")
    with pytest.raises(ValueError, match="applies to format='openvino' only"):
        export.run_exported(path, "tf_saved_model", images, precision="bf16")


# The backend's own route where it has one (torch's SavedModel is written by
# a tensorflow process, whose hand-off the runtime test above holds).
RESIZED_FORMAT = per_backend(jax="tf_saved_model", tensorflow="tf_saved_model", torch="onnx")


def test_export_at_another_image_size_and_a_fixed_batch(tmp_path, models):
    model, format = models["vit"], RESIZED_FORMAT
    path = export.export_model(model, str(tmp_path / f"vit48{export.SUFFIXES[format]}"), format, image_size=48,
                               batch_size=2)
    assert getattr(serving, f"_load_{format}")(path)[1] == 2
    x = np.random.default_rng(2).normal(size=(3, 48, 48, 3)).astype("float32")
    # The model resizes its position embedding on the fly; the artifact was
    # built with it resized once. Three images are fed as 2 + 1 (padded).
    diff, outputs, _ = export.verify_export(path, format, model, x)
    assert outputs.shape == (3, 10) and diff <= ATOL


# The real weights through one exporter: the tiny models above take every
# route; this holds a full-size graph (224 px, 12 blocks) and the real
# classes.
@requires_shared
@runs_once("torch", "the routes are held by the tiny models in every job; one full-size export is enough")
def test_real_weights_export(tmp_path):
    import skimage.data

    format = "torch"

    model = keras_vit.ViTTi16(weights=str(DEIT_NPZ), mlp_activation="gelu", classifier_activation=None)
    x = np.stack([imagenet_preprocess(skimage.data.chelsea()), imagenet_preprocess(skimage.data.coffee())])
    path = export.export_model(model, str(tmp_path / f"deit{export.SUFFIXES[format]}"), format)
    diff, outputs, expected = export.verify_export(path, format, model, x)
    assert diff <= ATOL, diff
    assert outputs.argmax(-1)[0] in (281, 282, 285) and outputs.argmax(-1)[1] == 967


# ------------------------------------------------------------ export mode --
def test_export_mode_paths_equal_the_ordinary_ones(rng):  # every backend: the kernels' export forms
    x = rng.normal(size=(2, 5, 3, 4)).astype("float32")
    kernel = rng.normal(size=(4, 6)).astype("float32")
    bias = rng.normal(size=(6,)).astype("float32")
    q, k, v = (rng.normal(size=(2, 7, 3, 4)).astype("float32") for _ in range(3))
    def pieces():
        return (
            to_numpy(kernels.dense(x, kernel, bias)),
            to_numpy(kernels.attention(q, k, v)),
            to_numpy(kernels.gelu(x, approximate=False)),
            to_numpy(kernels.gelu(x, approximate=True)),
        )

    plain = pieces()
    assert not kernels.exporting()
    with kernels.export_mode():
        assert kernels.exporting()
        portable = pieces()
    assert not kernels.exporting()
    np.testing.assert_allclose(portable[0], x @ kernel + bias, atol=1e-5)
    for a, b in zip(plain, portable):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("size", [(9, 9), (8, 10)])
def test_group_norm_and_max_pool_export_forms(rng, size):
    x = rng.normal(size=(2, *size, 64)).astype("float32")
    norm = GroupNorm(groups=32, epsilon=1e-6)
    norm.build(x.shape)
    norm.gamma.assign(rng.normal(size=64).astype("float32"))
    norm.beta.assign(rng.normal(size=64).astype("float32"))
    pool = MaxPool2D(3, strides=2, padding="same")
    keras_pool = keras.layers.MaxPooling2D(3, strides=2, padding="same")
    plain = to_numpy(norm(x)), to_numpy(pool(x))
    with kernels.export_mode():
        portable = to_numpy(norm(x)), to_numpy(pool(x))
    np.testing.assert_allclose(plain[0], portable[0], atol=1e-5)
    np.testing.assert_array_equal(portable[1], to_numpy(keras_pool(x)))
    np.testing.assert_array_equal(plain[1], portable[1])
    # The norm against NumPy: 32 groups of 2 channels over all pixels.
    groups = x.reshape(2, -1, 32, 2)
    mean, var = groups.mean((1, 3), keepdims=True), groups.var((1, 3), keepdims=True)
    ref = ((groups - mean) / np.sqrt(var + 1e-6)).reshape(x.shape) * to_numpy(norm.gamma) + to_numpy(norm.beta)
    np.testing.assert_allclose(portable[0], ref, atol=1e-4)


# -------------------------------------------------------------- bad input --
@runs_once("torch", "the format is checked before any exporter runs")
def test_unknown_format(tmp_path, models):
    with pytest.raises(ValueError, match=r"`format` must be one of .*Received: format='onxx'"):
        export.export_model(models["options"], str(tmp_path / "m.onnx"), "onxx")


@pytest.mark.parametrize(
    "format, backend, names",
    [("litert", "jax", "tensorflow or torch"), ("torch", "tensorflow", "torch")],
)
def test_format_the_backend_cannot_produce(format, backend, names):  # every backend: its own refusals
    with pytest.raises(ValueError, match=f"KERAS_BACKEND={names}"):
        export.check_format(format, backend=backend)
    if BACKEND == backend:
        with pytest.raises(ValueError, match="cannot be produced"):
            export.export_model(_model("vit"), f"m{export.SUFFIXES[format]}", format)


def test_missing_exporter_package_names_what_to_install(tmp_path, models, monkeypatch):
    modules = export.EXPORTERS[(BACKEND, "onnx")] or (("onnx", "onnx"),)
    missing = modules[0][0]
    real = importlib.import_module

    def fake(name, *args, **kwargs):
        if name == missing:
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(serving.importlib, "import_module", fake)
    monkeypatch.setitem(export.EXPORTERS, (BACKEND, "onnx"), modules)
    with pytest.raises(ImportError, match=rf"pip install {modules[0][1]}.*keras-vit\[export\]"):
        export.export_model(models["options"], str(tmp_path / "m.onnx"), "onnx")


@runs_once("torch", "paths and sizes are checked before any exporter runs")
def test_bad_paths_and_sizes(tmp_path, models):
    with pytest.raises(ValueError, match=r"must end with '.onnx'"):
        export.export_model(models["options"], str(tmp_path / "m.tflite"), "onnx")
    with pytest.raises(ValueError, match="writes a folder"):
        export.export_model(models["options"], str(tmp_path / "m.onnx"), "tf_saved_model")
    with pytest.raises(ValueError, match="batch_size"):
        export.export_model(models["options"], str(tmp_path / "m"), "tf_saved_model", batch_size=0)
    with pytest.raises(ValueError, match="image_size"):
        export.export_model(models["options"], str(tmp_path / "m"), "tf_saved_model", image_size=30)
    with pytest.raises(ValueError, match="No exported artifact"):
        export.run_exported(str(tmp_path / "absent.onnx"), "onnx", np.zeros((1, 32, 32, 3)))


def test_quantized_model_to_a_format_that_mishandles_int8(tmp_path):
    model = _model("vit")
    model.quantize("int8")
    refused = [f for f in FORMATS if f not in export.QUANTIZED_FORMATS[BACKEND]]
    for format in refused:
        with pytest.raises(ValueError, match="quantized model cannot be exported"):
            export.export_model(model, str(tmp_path / f"q{export.SUFFIXES[format]}"), format)
    with pytest.raises(ValueError, match="another image size"):
        export.export_model(model, str(tmp_path / "q"), "tf_saved_model", image_size=48)


# -------------------------------------------------------------------- CLI --
@runs_once("jax", "the command's flags and report; the ONNX route is held in every job above")
def test_cli_exports_and_reports(tmp_path, capsys, models):
    saved = str(tmp_path / "tiny.keras")
    models["options"].save(saved)
    format = "onnx"
    output = str(tmp_path / f"tiny{export.SUFFIXES[format]}")
    status = run_cli(["export", saved, "--format", format, "--output", output, "--samples", "2"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"max |{format} runtime - model.predict (2 random images)| = " in out and "OK" in out
    diff = float(out.split(" = ")[1].split()[0])
    assert diff <= ATOL
    assert cli.report({"x": 2e-4}, 1e-4) == 1 and cli.report({"x": 0.0}, 1e-4) == 0
    assert run_cli(["export", "NoSuchViT", "--format", format, "--output", output]) == 2
    # A preset folder (what examples/finetune.py writes) exports as the model does.
    models["options"].save_to_preset(tmp_path / "my_vit_preset")
    assert run_cli(["export", str(tmp_path / "my_vit_preset"), "--format", format, "--output", output,
                     "--samples", "2"]) == 0
    assert "OK (tolerance" in capsys.readouterr().out
    assert run_cli(["export", saved, "--format", "onnx", "--output", str(tmp_path / "x.pt2")]) == 2
    # --precision is OpenVINO's: refused, by name, for another format.
    assert run_cli(["export", saved, "--format", format, "--output", output, "--precision", "bf16"]) == 2
    assert "applies to format='openvino' only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_cli(["export", saved, "--format", "onxx", "--output", output])
