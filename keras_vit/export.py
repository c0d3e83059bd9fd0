"""Export to serving runtimes: TF Serving, ONNX Runtime, OpenVINO, LiteRT, torch.export.

`export_model(model, path, format)` writes a model as a standalone artifact
that its runtime runs without keras_vit or Keras; `run_exported(path, format,
images)` runs such an artifact in that runtime; `verify_export` compares it
with `model.predict`.

| format | jax | tensorflow | torch | artifact |
| --- | --- | --- | --- | --- |
| `"tf_saved_model"` | jax2tf | native | through tensorflow | a SavedModel folder, `serve` endpoint |
| `"onnx"` | jax2onnx | tf2onnx | `torch.onnx` (dynamo) | `.onnx` |
| `"openvino"` | jax2onnx, then OpenVINO | OpenVINO | OpenVINO from `torch.export` | `.xml` + `.bin` |
| `"litert"` | - | TFLite converter | litert-torch | `.tflite` |
| `"torch"` | - | - | `torch.export` | `.pt2` |

The batch size is dynamic wherever the format allows it (all but LiteRT from
torch, whose converter has static shapes only: there `batch_size` defaults
to 1 and `run_exported` feeds larger batches in slices). The image size is
the model's unless `image_size` asks for another: a keras_vit model is then
exported through `model.for_inference(image_size)`, with its position
embedding resized once (hybrids also get their kernels standardised once).

While a model is traced, `keras_vit.layers.kernels.export_mode()` makes the
layers emit plain matrix products and 4D attention products, which every
exporter converts, instead of the backend-specific fast paths.

Workarounds for upstream faults, each in one function below:

- torch, "tf_saved_model": Keras converts through `torch_xla`
  (keras-team/keras#20685: static shapes only; its `dynamic_shapes` for the
  batch axis fail in `torch.export`), and `torch_xla` has no wheel for
  current torch releases. keras_vit rebuilds the model from a `.keras` file
  under the tensorflow backend in a subprocess and exports it there
  (`_saved_model_through_tensorflow`).
- torch, "onnx": with a dynamic batch Keras falls back to the TorchScript
  exporter, which fails in `LayerNormalization` on a shape it cannot make
  constant (`onnx::Gather`, pytorch/pytorch#32282); keras_vit calls the
  dynamo exporter with `dynamic_shapes` (`_onnx_torch`).
- jax, "openvino": Keras goes through jax2tf, whose `enable_xla=False`
  mode JAX removed (keras-team/keras#22443 moved Keras' jax ONNX export to
  jax2onnx for that reason), so OpenVINO receives an `XlaCallModule` it
  cannot convert; keras_vit exports ONNX with jax2onnx and has OpenVINO read
  it (`_openvino_from_onnx`).
- jax, "onnx" and "openvino" (hybrids): jax2onnx 0.17 lowers the stem's
  max-pool to an ONNX `MaxPool` over four axes, which no runtime runs;
  `keras_vit.layers.MaxPool2D` traces slices instead in export mode.
- torch, "litert" (hybrids): litert-torch cannot lower the 5D `POW` of
  Keras' `GroupNormalization`; `keras_vit.layers.GroupNorm` traces a 4D
  form in export mode.
"""

import contextlib
import os
import subprocess
import sys
import tempfile

from keras_vit.layers import kernels
from keras_vit.runtimes import (  # noqa: F401  (re-exported)
    FORMATS,
    RUNTIMES,
    load_exported,
    require,
    run_exported,
    verify_export,
)
from keras_vit.validation import check_positive_int, pair

BACKEND_FORMATS = {
    "jax": ("tf_saved_model", "onnx", "openvino"),
    "tensorflow": ("tf_saved_model", "onnx", "openvino", "litert"),
    "torch": FORMATS,
}
# File name endings the exporters require ("" for the SavedModel folder).
SUFFIXES = {
    "tf_saved_model": "",
    "onnx": ".onnx",
    "openvino": ".xml",
    "litert": ".tflite",
    "torch": ".pt2",
}
# Python modules each exporter imports, with the pip package that has them.
EXPORTERS = {
    ("jax", "tf_saved_model"): (("tensorflow", "tensorflow"),),
    ("jax", "onnx"): (("jax2onnx", "jax2onnx"), ("onnx", "onnx"), ("onnxscript", "onnxscript")),
    ("jax", "openvino"): (("jax2onnx", "jax2onnx"), ("openvino", "openvino")),
    ("tensorflow", "tf_saved_model"): (),
    ("tensorflow", "onnx"): (("tf2onnx", "tf2onnx"), ("onnx", "onnx"), ("onnxscript", "onnxscript")),
    ("tensorflow", "openvino"): (("openvino", "openvino"),),
    ("tensorflow", "litert"): (),
    ("torch", "tf_saved_model"): (("tensorflow", "tensorflow"),),
    ("torch", "onnx"): (("onnx", "onnx"), ("onnxscript", "onnxscript")),
    ("torch", "openvino"): (("openvino", "openvino"),),
    ("torch", "litert"): (("litert_torch", "litert-torch"),),
    ("torch", "torch"): (),
}
# Formats whose exporter and runtime handle Keras' int8 layers correctly
# (measured: OpenVINO converts them with wrong outputs or not at all, the
# LiteRT converters reject int8 batch matrix products, ONNX Runtime has no
# int8 Einsum for jax2onnx's graph, torch_xla-free SavedModel from torch
# goes through tensorflow).
QUANTIZED_FORMATS = {
    "jax": ("tf_saved_model",),
    "tensorflow": ("tf_saved_model", "onnx"),
    "torch": ("tf_saved_model", "onnx", "torch"),
}


def check_format(format, backend=None):
    """Checks that `format` is known and that `backend` can produce it.

    Args:
        format: one of `FORMATS`.
        backend: a Keras backend name; default the current one.

    Returns:
        `format`.

    Raises:
        ValueError: naming the formats, or the backends that produce it.

    Example:

    >>> check_format("onnx", backend="jax")
    'onnx'
    """
    import keras

    backend = backend or keras.backend.backend()
    if format not in FORMATS:
        raise ValueError(f"`format` must be one of {FORMATS}. Received: format={format!r}")
    if backend not in BACKEND_FORMATS:
        raise ValueError(
            f"Export needs the jax, tensorflow or torch backend. Received: backend={backend!r}"
        )
    if format not in BACKEND_FORMATS[backend]:
        able = [b for b, formats in BACKEND_FORMATS.items() if format in formats]
        raise ValueError(
            f"format={format!r} cannot be produced on the {backend} backend; "
            f"use KERAS_BACKEND={' or '.join(able)} (the {backend} backend "
            f"exports {BACKEND_FORMATS[backend]})."
        )
    return format


def _check_path(path, format):
    path = os.fspath(path)
    suffix = SUFFIXES[format]
    if suffix and not path.endswith(suffix):
        raise ValueError(
            f"`path` must end with {suffix!r} for format={format!r}. Received: path={path!r}"
        )
    if not suffix and os.path.splitext(path)[1] in {s for s in SUFFIXES.values() if s}:
        raise ValueError(
            f"format='tf_saved_model' writes a folder; `path` must not end with "
            f"a file suffix. Received: path={path!r}"
        )
    return path


def _quantized(model):
    return any(getattr(layer, "quantization_mode", None) for layer in model._flatten_layers())


def prepare_model(model, image_size=None):
    """The model to trace: a frozen `for_inference` copy for keras_vit models.

    Quantized models and other Keras models are exported as they are, at
    their own image size.
    """
    from keras_vit.models.vit import ViT

    if image_size is not None:
        image_size = pair(image_size, "image_size")
    if isinstance(model, ViT) and not _quantized(model):
        return model.for_inference(image_size=image_size)
    own = tuple(model.input_shape[1:3])
    if image_size is not None and image_size != own:
        raise ValueError(
            "Only a float keras_vit model can be exported at another image size "
            "(quantize the `model.for_inference(image_size)` copy instead). "
            f"Received: image_size={image_size}, model input {own}"
        )
    return model


def export_model(model, path, format, image_size=None, batch_size=None, verbose=False):
    """Writes `model` as a standalone artifact of `format` for its runtime.

    Args:
        model: a `keras_vit.ViT` (any family) or another single-input Keras
            model with a fixed image size; float or quantized
            (`model.quantize("int8")`).
        path: output path, ending as `SUFFIXES[format]` (`.onnx`, `.xml`,
            `.tflite`, `.pt2`; a folder for "tf_saved_model").
        format: one of `FORMATS` that the current backend produces
            (`BACKEND_FORMATS`).
        image_size: None (the model's) or int or `(height, width)`.
        batch_size: None (dynamic, where the format allows it) or an int.
        verbose: bool, default False: the exporters' own messages.

    Returns:
        `path`.

    Raises:
        ValueError: an unknown format, one the backend cannot produce, a bad
            path, image size or batch size.
        ImportError: an exporter package is missing (the message says what
            to install).

    Example:

    >>> import keras_vit, tempfile, os
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                       num_layers=1, num_heads=2, mlp_dim=32, classes=10)
    >>> folder = tempfile.mkdtemp()
    >>> path = export_model(model, os.path.join(folder, "vit"), "tf_saved_model")
    >>> sorted(os.listdir(path))[:2]
    ['assets', 'fingerprint.pb']
    """
    import keras

    backend = keras.backend.backend()
    check_format(format, backend)
    path = _check_path(path, format)
    if batch_size is not None:
        batch_size = check_positive_int(batch_size, "batch_size")
    require(EXPORTERS[(backend, format)], f"format={format!r} on the {backend} backend")
    if _quantized(model) and format not in QUANTIZED_FORMATS[backend]:
        raise ValueError(
            f"A quantized model cannot be exported to format={format!r} on the "
            f"{backend} backend; quantized models export to "
            f"{QUANTIZED_FORMATS[backend]} here. For {format!r}, export the float "
            "model and quantize with the runtime's own tools."
        )
    model = prepare_model(model, image_size)
    if (backend, format) == ("torch", "litert") and batch_size is None:
        batch_size = 1  # litert-torch converts static shapes only
    height, width, channels = model.input_shape[1:]
    shape = (batch_size, height, width, channels)
    if (backend, format) == ("torch", "tf_saved_model"):
        return _saved_model_through_tensorflow(model, path, batch_size, verbose)
    with kernels.export_mode(), _quiet(verbose):
        if backend == "torch" and format in ("onnx", "openvino", "torch"):
            _export_torch(model, path, format, shape)
        elif (backend, format) == ("jax", "openvino"):
            _openvino_from_onnx(model, path, shape)
        else:
            spec = keras.InputSpec(shape=shape, dtype="float32", name="image")
            model.export(path, format=format, verbose=verbose, input_signature=[spec])
        if format == "onnx":
            _fold_weights(path)
    return path


@contextlib.contextmanager
def _quiet(verbose):
    if verbose:
        yield
        return
    import io
    import warnings

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _torch_program(model, shape):
    """`torch.export` of the model, the batch axis dynamic when `shape[0]` is None."""
    import torch

    model.eval()
    dynamic = shape[0] is None
    # Dimension 1 would be specialised to a constant: trace with 2.
    sample = torch.zeros((2 if dynamic else shape[0],) + tuple(shape[1:]))
    dims = [({0: torch.export.Dim("batch", min=1, max=4096)},)] if dynamic else None
    return torch.export.export(model, (sample,), dynamic_shapes=dims, strict=False), sample, dims


def _export_torch(model, path, format, shape):
    import torch

    program, sample, dims = _torch_program(model, shape)
    if format == "torch":
        torch.export.save(program, path)
    elif format == "openvino":
        import openvino as ov

        converted = ov.convert_model(program)
        converted.inputs[0].get_node().set_friendly_name("image")
        ov.save_model(converted, path, compress_to_fp16=False)
    else:
        _onnx_torch(model, path, sample, dims)


def _onnx_torch(model, path, sample, dims):
    """Dynamo ONNX export with a dynamic batch (Keras' TorchScript fallback
    fails in LayerNormalization on a dynamic shape)."""
    import torch

    program = torch.onnx.export(
        model, (sample,), dynamic_shapes=dims, dynamo=True, input_names=["image"],
        verbose=False,
    )
    program.save(path)


def _fold_weights(path):
    """Folds the weight reshapes into the initializers of an ONNX graph.

    The exporter's optimizer folds only small constants, which leaves the
    attention kernels `(D, heads, head_dim)` behind a `Reshape`: ONNX
    Runtime then cannot quantize those products (`quantize_dynamic` takes
    MatMuls whose weight is an initializer). Folding every size makes each
    projection a MatMul with a 2D initializer (tested).
    """
    import onnx_ir
    import onnxscript.optimizer

    model = onnx_ir.load(path)
    onnxscript.optimizer.optimize(model, input_size_limit=1 << 31, output_size_limit=1 << 31)
    onnx_ir.save(model, path)


def _openvino_from_onnx(model, path, shape):
    """jax -> ONNX (jax2onnx) -> OpenVINO: Keras' jax2tf route gives an
    `XlaCallModule` that OpenVINO cannot convert."""
    import keras
    import openvino as ov

    with tempfile.TemporaryDirectory() as folder:
        onnx_path = os.path.join(folder, "model.onnx")
        spec = keras.InputSpec(shape=shape, dtype="float32", name="image")
        model.export(onnx_path, format="onnx", verbose=False, input_signature=[spec])
        ov.save_model(ov.convert_model(onnx_path), path, compress_to_fp16=False)


_REBUILD = """
import json, sys, keras
from keras_vit import export
config, weights, mode, path, batch = sys.argv[1:6]
model = keras.saving.deserialize_keras_object(json.loads(open(config).read()))
if mode:
    model.quantize(mode)
model.load_weights(weights)
export.export_model(model, path, "tf_saved_model", batch_size=None if batch == "None" else int(batch))
"""


def _quantization_mode(model):
    modes = {getattr(layer, "quantization_mode", None) for layer in model._flatten_layers()}
    modes.discard(None)
    return modes.pop() if len(modes) == 1 else None


def _saved_model_through_tensorflow(model, path, batch_size, verbose):
    """Writes the SavedModel from the same model rebuilt under tensorflow.

    Keras exports a SavedModel from torch only through `torch_xla`, which
    has no wheel for current torch releases. The model's configuration and
    weights (quantized ones included) carry everything, so the tensorflow
    backend rebuilds the model in a subprocess and exports it natively
    (same outputs, tested).
    """
    import json

    import keras

    with tempfile.TemporaryDirectory() as folder:
        config = os.path.join(folder, "config.json")
        weights = os.path.join(folder, "model.weights.h5")
        with open(config, "w") as handle:
            json.dump(keras.saving.serialize_keras_object(model), handle)
        model.save_weights(weights)
        env = dict(os.environ, KERAS_BACKEND="tensorflow")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        args = [config, weights, _quantization_mode(model) or "", os.path.abspath(path), str(batch_size)]
        result = subprocess.run(
            [sys.executable, "-c", _REBUILD, *args],
            env=env, capture_output=not verbose, text=True,
        )
    if result.returncode:
        raise RuntimeError(
            "Exporting the SavedModel under the tensorflow backend failed:\n"
            + (result.stderr or "")[-2000:]
        )
    return path
