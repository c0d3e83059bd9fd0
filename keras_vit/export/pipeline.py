"""Export to serving runtimes: TF Serving, ONNX Runtime, OpenVINO, LiteRT, torch.export.

`export_model(model, path, format)` writes a model as a standalone artifact
that its runtime runs without keras_vit or Keras (`model.export(path,
format=...)` on a keras_vit model calls it); `run_exported(path, format,
images)` runs such an artifact in that runtime; `verify_export` compares it
with `model.predict`. `quantize="int8"` ("onnx", "openvino") quantizes the
exported graph with the runtime's own tool (`keras_vit.export.int8`).

`keras_vit.export.formats` holds the table of formats: which backend
produces each, with which exporter, and which runtime runs it.

The batch size is dynamic unless `batch_size` fixes it (`run_exported` then
feeds larger batches in slices). The image size is
the model's unless `image_size` asks for another: a keras_vit model is then
exported through `model.for_inference(image_size)`, with its position
embedding resized once (hybrids also get their kernels standardised once).
With `naflex_length=n` (or an `input_signature` dict of `InputSpec`s) the
artifact takes a NaFlex patch batch of `n` tokens instead of images: the
dict of `keras_vit.preprocessing.naflex.naflex_inputs` (`keras_vit.models.patch_inputs`),
its arrays as the artifact's inputs, named by their keys.

The artifacts name their input `images` and their output by what it holds:
`probabilities` (a softmax or sigmoid head), `logits` (a head without
activation) or `features` (no head); ONNX and OpenVINO graphs carry these
names (`output_name`).

A model that takes other inputs than images (a text tower, a task model)
goes through the same pipeline by declaring them: `model.export_signature(
batch_size)` returns its `keras.InputSpec`s (one, a list or a dict, each
named), `model.export_output_name` names its output and
`model.export_formats` lists the formats it exports to
(`keras_vit.text.TextEncoder` does). A model of several named outputs (a
dict: the task models, e.g. a depth model's `predicted_depth`, a
segmenter's `class_queries_logits` and `masks_queries_logits`) gives its
artifact one output per key (`output_names`), which the runtimes return as
a dict.

While a model is traced, `keras_vit.kernels.export_mode()` makes the
layers emit plain matrix products and 4D attention products, which every
exporter converts, instead of the backend-specific fast paths.

Workarounds for upstream faults, each in one function below:

- torch, "tf_saved_model": Keras converts through `torch_xla`
  (keras-team/keras#20685: static shapes only; its `dynamic_shapes` for the
  batch axis fail in `torch.export`), and `torch_xla` has no wheel for
  current torch releases. keras_vit rebuilds the model from a `.keras` file
  under the tensorflow backend in a subprocess and exports it there
  (`_through_tensorflow`).
- torch, "litert": litert-torch 0.10 converts static shapes only (its
  lowering of a reshape with a symbolic batch fails); with a dynamic batch
  (the default) the model is rebuilt under tensorflow as above, and
  litert-torch is used for a fixed `batch_size`.
- torch, "onnx": with a dynamic batch Keras falls back to the TorchScript
  exporter, which fails in `LayerNormalization` on a shape it cannot make
  constant (`onnx::Gather`, pytorch/pytorch#32282); keras_vit calls the
  dynamo exporter with `dynamic_shapes` (`torch_route.py`).
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

from keras_vit import kernels
from keras_vit.export import int8 as export_int8
from keras_vit.export.inputs import (
    INPUT_NAME,
    check_naflex_export,
    input_dtypes,
    input_names,
    input_signature,
    port_names,
)
from keras_vit.export.formats import BACKEND_FORMATS, EXPORT_FORMATS, EXPORTERS, QUANTIZED_FORMATS, SUFFIXES
from keras_vit.export.metadata import artifact_metadata, write_metadata
from keras_vit.export.raw_images import raw_image_model, raw_record, raw_signature
from keras_vit.export.serving import require
from keras_vit.export.torch_route import export_torch
from keras_vit.validation import check_positive_int, pair

# Keyword arguments `model.export` passes on to `export_model`.
MODEL_EXPORT_OPTIONS = ("image_size", "batch_size", "quantize", "sample_images", "naflex_length", "raw_images")


def output_name(model):
    """The name of an exported model's output: what it holds.

    "probabilities" for a head with an activation (softmax, sigmoid),
    "logits" for a head without one, "features" for a model without a head
    (a backbone, or any other Keras model).

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1,
    ...                       num_heads=2, mlp_dim=8, classes=3, classifier_activation=None)
    >>> output_name(model)
    'logits'
    """
    declared = getattr(model, "export_output_name", None)
    if declared is not None:
        return declared
    if not getattr(model, "include_top", False):
        return "features"
    return "logits" if getattr(model, "classifier_activation", None) is None else "probabilities"


def output_names(model):
    """The names of an exported model's outputs, in the graph's order: a
    model of named outputs gives their keys in sorted order (the order every
    exporter flattens a dict in): a functional model's dict `output` (the
    detectors, SAM's decoder) or the keys a subclassed model declares
    (`model.output_keys`: the dense task models); any other model its
    `output_name`.

    Example:

    >>> import keras
    >>> x = keras.Input((2,))
    >>> output_names(keras.Model(x, {"scores": x, "boxes": x}))
    ['boxes', 'scores']
    >>> output_names(type("Task", (), {"output_keys": ("masks", "classes")})())
    ['classes', 'masks']
    """
    keys = getattr(model, "output_keys", None)
    if keys is None:
        # A subclassed model has no `output` attribute.
        output = getattr(model, "output", None)
        keys = tuple(output) if isinstance(output, dict) else None
    return sorted(keys) if keys else [output_name(model)]


def check_format(format, backend=None, model=None):
    """Checks that `format` is known, that `backend` can produce it and `model` export to it.

    Args:
        format: one of `EXPORT_FORMATS`.
        backend: a Keras backend name; default the current one.
        model: None, or the model to export (its `export_formats`, where it
            declares them, limit the formats).

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
    if format not in EXPORT_FORMATS:
        raise ValueError(f"`format` must be one of {EXPORT_FORMATS}. Received: format={format!r}")
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
    declared = getattr(model, "export_formats", None)
    if declared is not None and format not in declared:
        raise ValueError(
            f"A {type(model).__name__} exports to {tuple(declared)}. Received: format={format!r}"
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
    their own image size; video models (`num_frames`) are refused.
    """
    frames = getattr(model, "num_frames", None)
    if frames is not None:
        raise ValueError(
            f"Video models are not exported yet: their artifacts' inputs and metadata describe images. "
            f"Received: a model of num_frames={frames}; save it with `save_to_preset` or `model.save`."
        )
    if image_size is not None:
        image_size = pair(image_size, "image_size")
    # keras_vit's models (ViT and its subclasses) have `for_inference`; the
    # check by attribute keeps this module below `keras_vit.models`.
    if callable(getattr(model, "for_inference", None)) and not _quantized(model):
        return model.for_inference(image_size=image_size)
    if image_size is None:
        return model
    own = tuple(model.input_shape[1:3])
    if image_size != own:
        raise ValueError(
            "Only a float keras_vit model can be exported at another image size "
            "(quantize the `model.for_inference(image_size)` copy instead). "
            f"Received: image_size={image_size}, model input {own}"
        )
    return model


def _check_quantization(model, format, backend, quantize):
    """Refuses what cannot work; warns about Keras' int8 in ONNX Runtime."""
    import warnings

    export_int8.check_quantize(quantize, format)
    if not _quantized(model):
        return
    fast = (
        f"export the float model with export_model(model, path, {format!r}, "
        "quantize='int8') (or model.export(path, format=..., quantize='int8')), "
        "which quantizes the exported graph with the runtime's own tool"
    )
    if quantize is not None:
        raise ValueError(
            f"quantize={quantize!r} quantizes the exported float graph; the model is "
            "already quantized by Keras (`model.quantize`). Pass the float model."
        )
    if format not in QUANTIZED_FORMATS[backend]:
        if format not in export_int8.QUANTIZE_FORMATS:
            fast = "export the float model and quantize it with the runtime's own tools"
        raise ValueError(
            f"A quantized model cannot be exported to format={format!r} on the "
            f"{backend} backend; quantized models export to "
            f"{QUANTIZED_FORMATS[backend]} here. For {format!r}, {fast}."
        )
    if format == "onnx":
        warnings.warn(
            "ONNX Runtime runs a Keras-quantized model by emulating its int8 layers, "
            "far slower than the float model (docs/performance.md). For a fast int8 "
            f"model, {fast}.",
            UserWarning,
            stacklevel=3,
        )


def _via_tensorflow(backend, format, batch_size, raw=None):
    """Whether a torch model is rebuilt under tensorflow for `format`:
    SavedModels always; LiteRT for a dynamic batch or any image size
    (litert-torch converts static shapes only)."""
    return backend == "torch" and (
        format == "tf_saved_model" or (format == "litert" and (batch_size is None or raw is not None)))


def _exporter_modules(backend, format, batch_size, raw=None):
    if _via_tensorflow(backend, format, batch_size, raw) and format == "litert":
        return (("tensorflow", "tensorflow"),)
    return EXPORTERS[(backend, format)]


def export_model(model, path, format, image_size=None, batch_size=None, verbose=False,
                 quantize=None, sample_images=None, naflex_length=None, input_signature=None,
                 raw_images=False):
    """Writes `model` as a standalone artifact of `format` for its runtime.

    `model.export(path, format=...)` on a keras_vit model calls this.

    Args:
        model: a `keras_vit.ViT` (any family) or another single-input Keras
            model with a fixed image size; float or quantized
            (`model.quantize("int8")`).
        path: output path, ending as `SUFFIXES[format]` (`.onnx`, `.xml`,
            `.tflite`, `.pt2`; a folder for "tf_saved_model").
        format: one of `EXPORT_FORMATS` that the current backend produces
            (`BACKEND_FORMATS`).
        image_size: None (the model's) or int or `(height, width)`.
        batch_size: None (dynamic) or an int.
        verbose: bool, default False: the exporters' own messages.
        quantize: None or "int8" (formats "onnx" and "openvino"): the
            float graph is exported, then quantized by the runtime's own
            tool (`keras_vit.export.int8`) and compared with it.
        sample_images: with `quantize`, the images the int8 artifact's
            top-1 is compared on, `(N, H, W, C)` preprocessed as the model
            expects (raw [0, 255] pixels are refused); default 8 seeded
            random images.
        naflex_length: None (the artifact takes images) or an int `n`: it
            takes a NaFlex patch batch of `n` tokens (the dict of
            `keras_vit.preprocessing.naflex.naflex_inputs(..., length=n)`), for a model
            that takes one (`keras_vit.models.patch_inputs`); not with
            `image_size` or `quantize`.
        input_signature: None (the model's inputs: images, or what
            `model.export_signature(batch_size)` declares) or the traced
            inputs themselves: a named `keras.InputSpec`, or a list or dict
            of them.
        raw_images: bool, default False. True bakes the model's own
            preprocessing (`model.preprocessing`: Pillow's resize, the centre
            crop, the scaling; `keras_vit.layers.ImagePreprocessing`) and a
            softmax on logits into the artifact: it takes uint8 images
            `(batch, height, width, channels)` of any size and returns the
            probabilities `keras_vit.classify` reports
            (`keras_vit.export.raw_images`). Not with `naflex_length`,
            `quantize` or `input_signature`.

    Every artifact carries the model's class names and preprocessing and
    what its input and output are (`keras_vit.export.metadata`;
    `read_metadata` reads them back).

    Returns:
        `path`; with `quantize`, a `keras_vit.export.int8.QuantizedExport`
        (a `str`, the path) whose `top1_agreement`, `agreeing`,
        `num_images` and `max_abs_diff` compare it with float32.

    Raises:
        ValueError: an unknown format, one the backend cannot produce, a bad
            path, image size, batch size or `quantize`.
        ImportError: an exporter package is missing (the message says what
            to install).

    Example:

    >>> import keras_vit, tempfile, os
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                       num_layers=1, num_heads=2, mlp_dim=32, classes=10)
    >>> folder = tempfile.mkdtemp()
    >>> path = export_model(model, os.path.join(folder, "vit"), "tf_saved_model")
    >>> sorted(os.listdir(path))[:3]
    ['assets', 'assets.extra', 'fingerprint.pb']
    """
    import keras

    backend = keras.backend.backend()
    check_format(format, backend, model)
    path = _check_path(path, format)
    if batch_size is not None:
        batch_size = check_positive_int(batch_size, "batch_size")
    _check_quantization(model, format, backend, quantize)
    raw = raw_record(model, raw_images, image_size, naflex_length, quantize, input_signature)
    require(_exporter_modules(backend, format, batch_size, raw), f"format={format!r} on the {backend} backend")
    if quantize is not None:
        require(export_int8.QUANTIZERS[format], f"quantize={quantize!r} for format={format!r}")
        # Checked before the (possibly long) export starts.
        size = model.input_shape[1:3] if image_size is None else pair(image_size, "image_size")
        images, source = export_int8.sample_images(
            sample_images, tuple(size) + tuple(model.input_shape[3:]), getattr(model, "preprocessing", None)
        )
    if naflex_length is not None:
        check_naflex_export(model, naflex_length, image_size, quantize)
    output = output_name(model)
    entries = artifact_metadata(model, "probabilities" if raw and output == "logits" else output, raw is not None)
    model = prepare_model(model, image_size)
    if quantize is None:
        return _write(model, path, format, batch_size, verbose, naflex_length, input_signature, raw, entries)
    with tempfile.TemporaryDirectory() as folder:
        float_path = _write(model, os.path.join(folder, f"float{SUFFIXES[format]}"), format,
                            batch_size, verbose, metadata=entries)
        with _quiet(verbose):
            quantized = export_int8.quantize_artifact(float_path, path, format, quantize, images, source)
    write_metadata(quantized, format, entries)
    return quantized


def _write(model, path, format, batch_size, verbose, naflex_length=None, spec=None, raw=None, metadata=None):
    """Traces the prepared model to `path` with the backend's exporter, and
    writes its metadata into the artifact."""
    import keras

    backend = keras.backend.backend()
    if _via_tensorflow(backend, format, batch_size, raw):
        return _through_tensorflow(model, path, format, batch_size, verbose, naflex_length, raw is not None)
    if raw is not None:
        model, spec = raw_image_model(model, raw), raw_signature(batch_size, model.input_shape[-1])
    spec = input_signature(model, batch_size, naflex_length) if spec is None else spec
    with kernels.export_mode(), _quiet(verbose):
        if backend == "torch" and format in ("onnx", "openvino", "torch"):
            export_torch(model, path, format, spec, metadata)
        elif (backend, format) == ("jax", "openvino"):
            _openvino_from_onnx(model, path, spec)
        elif format == "tf_saved_model":
            _saved_model(model, path, spec, verbose, metadata)
        else:
            # `keras.Model.export` itself: keras_vit's models route their
            # own `export` here.
            keras.Model.export(model, path, format=format, verbose=verbose, input_signature=[spec])
        if format == "onnx":
            _finish_onnx(path, output_names(model), input_names(spec), input_dtypes(spec))
        elif format == "openvino":
            _name_openvino(path, output_names(model), input_names(spec), input_dtypes(spec))
    if metadata is not None and format != "torch":  # a .pt2 takes it as it is saved
        write_metadata(path, format, metadata)
    return path


def _saved_model(model, path, spec, verbose, metadata):
    """`keras.Model.export`'s SavedModel (a `serve` endpoint, `serving_default`
    beside it), with the metadata also as string variables of the loaded
    object: `keras_vit_metadata` (every entry, JSON) and `class_names` (where
    the model records them), read by `tf.saved_model.load(path).class_names`."""
    import json

    import tensorflow as tf
    from keras.export import ExportArchive

    archive = ExportArchive()
    archive.track_and_add_endpoint("serve", model, [spec])
    if metadata is not None:
        # The archive's root object is what `tf.saved_model.load` returns.
        root = archive._tf_trackable
        root.keras_vit_metadata = tf.Variable(json.dumps(metadata), trainable=False, name="keras_vit_metadata")
        if "class_names" in metadata:
            root.class_names = tf.Variable(json.loads(metadata["class_names"]), trainable=False, name="class_names")
    archive.write_out(path, verbose=verbose)


@contextlib.contextmanager
def _quiet(verbose):
    if verbose:
        yield
        return
    import io
    import warnings

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), _quiet_logs():
        warnings.simplefilter("ignore")
        yield


# Exporters and quantizers that report through `logging`: NNCF (a table and a
# progress bar), torch's ONNX exporter (the torchvision and torchao
# operators it skips), tf2onnx, jax2onnx, onnxscript and absl.
_NOISY_LOGGERS = ("nncf", "torch", "torchao", "tf2onnx", "jax2onnx", "onnxscript", "absl", "openvino")


@contextlib.contextmanager
def _quiet_logs():
    """The exporters' `logging` reports above warnings only."""
    import logging

    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _finish_onnx(path, outputs, inputs=(INPUT_NAME,), dtypes=("float32",)):
    """Folds the weight reshapes into the initializers of an ONNX graph and
    names its inputs and output.

    The exporter's optimizer folds only small constants, which leaves the
    attention kernels `(D, heads, head_dim)` behind a `Reshape`: ONNX
    Runtime then cannot quantize those products (`quantize_dynamic` takes
    MatMuls whose weight is an initializer). Folding every size makes each
    projection a MatMul with a 2D initializer (tested). The exporters name
    the output after its last operation (`add_1741`); it is renamed.
    """
    import onnx_ir
    import onnxscript.optimizer

    model = onnx_ir.load(path)
    onnxscript.optimizer.optimize(model, input_size_limit=1 << 31, output_size_limit=1 << 31)
    ports = list(model.graph.inputs)
    current = [port.name for port in ports]
    current_dtypes = [port.dtype.numpy().name for port in ports]
    for port, name in zip(ports, port_names(current, list(inputs), current_dtypes, list(dtypes))):
        port.name = name
    outputs = [outputs] if isinstance(outputs, str) else list(outputs)
    graph_outputs = list(model.graph.outputs)[: len(outputs)]
    for port, name in zip(graph_outputs, port_names([p.name for p in graph_outputs], outputs)):
        port.name = name
    onnx_ir.save(model, path)


def _name_openvino(path, outputs, inputs=(INPUT_NAME,), dtypes=("float32",)):
    """Names an OpenVINO model's input and output tensors (and nodes).

    The model read maps its `.bin` file into memory, so the named copy is
    written beside it and renamed over it, never written in place.
    """
    import openvino as ov

    model = ov.Core().read_model(path)
    outputs = [outputs] if isinstance(outputs, str) else list(outputs)
    if len(model.outputs) > len(outputs):
        # TensorFlow's converter leaves internal shape slices as outputs too:
        # the model's own are those named after them, else the first.
        results = model.get_results()
        named = [r for r in results if any(o in ", ".join(r.output(0).get_names()) for o in outputs)]
        kept = named if len(named) == len(outputs) else results[: len(outputs)]
        model = ov.Model(kept, model.get_parameters(), model.get_friendly_name())
    current = [", ".join(port.get_names()) for port in model.inputs]
    current_dtypes = [port.get_element_type().to_dtype().name for port in model.inputs]
    for port, name in zip(model.inputs, port_names(current, list(inputs), current_dtypes, list(dtypes))):
        port.get_tensor().set_names({name})
        port.get_node().set_friendly_name(name)
    current = [", ".join(port.get_names()) for port in model.outputs]
    for port, name in zip(model.outputs, port_names(current, outputs)):
        port.get_tensor().set_names({name})
    stem, named = path[: -len(".xml")], path[: -len(".xml")] + ".named"
    ov.save_model(model, named + ".xml", compress_to_fp16=False)
    del model
    for suffix in (".xml", ".bin"):
        os.replace(named + suffix, stem + suffix)


def _openvino_from_onnx(model, path, spec):
    """jax -> ONNX (jax2onnx) -> OpenVINO: Keras' jax2tf route gives an
    `XlaCallModule` that OpenVINO cannot convert."""
    import keras
    import openvino as ov

    with tempfile.TemporaryDirectory() as folder:
        onnx_path = os.path.join(folder, "model.onnx")
        keras.Model.export(model, onnx_path, format="onnx", verbose=False, input_signature=[spec])
        ov.save_model(ov.convert_model(onnx_path), path, compress_to_fp16=False)


# The configuration builds quantized layers quantized (a keras_vit model's
# holds their policies, `keras_vit.models.precision`), ready for the weights.
_REBUILD = """
import json, sys, keras
from keras_vit import export
config, weights, path, format, batch, length, raw = sys.argv[1:8]
model = keras.saving.deserialize_keras_object(json.loads(open(config).read()))
model.load_weights(weights)
export.export_model(model, path, format, batch_size=None if batch == "None" else int(batch),
                    naflex_length=None if length == "None" else int(length), raw_images=raw == "True")
"""


def _through_tensorflow(model, path, format, batch_size, verbose, naflex_length=None, raw_images=False):
    """Writes the artifact from the same model rebuilt under tensorflow.

    Keras exports a SavedModel from torch only through `torch_xla`, which
    has no wheel for current torch releases, and litert-torch converts
    static shapes only (its lowering of a reshape with a dynamic batch
    fails). The model's configuration and weights (quantized ones included)
    carry everything, so the tensorflow backend rebuilds the model in a
    subprocess and exports it natively, with a dynamic batch (same outputs,
    tested).
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
        # The folder holding this keras_vit: the subprocess imports the same one.
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        args = [config, weights, os.path.abspath(path), format, str(batch_size), str(naflex_length),
                str(raw_images)]
        result = subprocess.run(
            [sys.executable, "-c", _REBUILD, *args],
            env=env, capture_output=not verbose, text=True,
        )
    if result.returncode:
        raise RuntimeError(
            f"Exporting format={format!r} under the tensorflow backend failed:\n"
            + (result.stderr or "")[-2000:]
        )
    return path
