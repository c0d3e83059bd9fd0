"""Runtimes of exported artifacts: SavedModel, ONNX Runtime, OpenVINO, LiteRT, torch.export.

`run_exported(path, format, images)` runs an artifact written by
`keras_vit.export.export_model` (or Keras' `model.export`) in the format's own
runtime, without Keras; `verify_export` compares it with `model.predict`.
Also available as `keras_vit.export.run_exported` etc.
"""

import importlib
import os

import numpy as np

EXPORT_FORMATS = ("tf_saved_model", "onnx", "openvino", "litert", "torch")
# Python modules each runtime imports, with the pip package that has them.
RUNTIMES = {
    "tf_saved_model": (("tensorflow", "tensorflow"),),
    "onnx": (("onnxruntime", "onnxruntime"),),
    "openvino": (("openvino", "openvino"),),
    "litert": (("ai_edge_litert", "ai-edge-litert"),),
    "torch": (("torch", "torch"),),
}
# OpenVINO inference precisions `run_exported` takes (`INFERENCE_PRECISION_HINT`);
# None is float32, the precision the model was exported in.
OPENVINO_PRECISIONS = ("f32", "bf16", "f16")


def require(modules, purpose):
    """Imports `modules` (`(module, pip name)` pairs) or raises ImportError naming them."""
    missing = []
    for module, package in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(package)
    if missing:
        raise ImportError(
            f"{purpose} needs {', '.join(missing)}: pip install {' '.join(missing)} "
            '(or pip install "keras-vit[export]")'
        )


def load_exported(path, format, precision=None):
    """Loads an artifact in its own runtime; returns `run(images) -> outputs`.

    Runtimes: `tf.saved_model.load` (its `serve` endpoint), an ONNX Runtime
    CPU session, an OpenVINO CPU compiled model (float32 inference
    precision unless `precision` asks for another), the LiteRT interpreter
    (`ai_edge_litert`) or `torch.export.load`. A fixed-batch artifact is fed
    in slices of its batch size (a last, short slice is padded).

    Args:
        path: the artifact written by `export_model` (or `model.export`).
        format: one of `EXPORT_FORMATS`.
        precision: None (float32) or, for "openvino" only, one of
            `OPENVINO_PRECISIONS`: OpenVINO's `INFERENCE_PRECISION_HINT`.
            OpenVINO's own default is bfloat16 on CPUs with bfloat16 units
            (AVX512_BF16, AMX), which moves ViT logits by about 1e-2;
            "bf16" opts into it.

    Returns:
        A function from a float32 NumPy batch `(batch, H, W, C)` to the
        NumPy outputs.
    """
    if format not in EXPORT_FORMATS:
        raise ValueError(f"`format` must be one of {EXPORT_FORMATS}. Received: format={format!r}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"No exported artifact at `path`. Received: path={path!r}")
    _check_precision(precision, format)
    require(RUNTIMES[format], f"Running a {format!r} artifact")
    if format == "openvino":
        run, batch = _load_openvino(path, precision or "f32")
    else:
        run, batch = globals()[f"_load_{format}"](path)
    if batch is None:
        return lambda images: run(np.asarray(images, "float32"))
    return lambda images: _in_slices(run, np.asarray(images, "float32"), batch)


def _check_precision(precision, format):
    if precision is None:
        return
    if format != "openvino":
        raise ValueError(
            f"`precision` applies to format='openvino' only; other runtimes run the "
            f"artifact as exported. Received: precision={precision!r}, format={format!r}"
        )
    if precision not in OPENVINO_PRECISIONS:
        raise ValueError(
            f"`precision` must be None (float32) or one of {OPENVINO_PRECISIONS}. "
            f"Received: precision={precision!r}"
        )


def _in_slices(run, images, batch):
    outputs = []
    for start in range(0, len(images), batch):
        part = images[start : start + batch]
        short = batch - len(part)
        if short:
            part = np.concatenate([part, np.zeros((short,) + part.shape[1:], part.dtype)])
        outputs.append(run(part)[: batch - short])
    return np.concatenate(outputs)


def _load_tf_saved_model(path):
    import tensorflow as tf

    loaded = tf.saved_model.load(path)
    spec = tf.nest.flatten(loaded.serve.input_signature)[0]

    def run(images):
        # The closure keeps `loaded` alive: its variables die with it.
        return loaded.serve(tf.constant(images)).numpy()

    return run, spec.shape[0]


def _load_onnx(path):
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    spec = session.get_inputs()[0]
    batch = spec.shape[0] if isinstance(spec.shape[0], int) else None
    return lambda images: session.run(None, {spec.name: images})[0], batch


def _load_openvino(path, precision="f32"):
    import openvino as ov

    # OpenVINO's CPU default is bfloat16 wherever the CPU has it: always say
    # which precision, float32 (the exported one) unless asked.
    compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": precision})
    first = compiled.inputs[0].get_partial_shape()[0]
    batch = None if first.is_dynamic else first.get_length()
    return lambda images: np.asarray(compiled(images)[0]), batch


def _load_litert(path):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    source = interpreter.get_input_details()[0]
    target = interpreter.get_output_details()[0]
    dynamic = source["shape_signature"][0] == -1
    state = {"shape": None}

    def run(images):
        if state["shape"] != images.shape:
            if dynamic:
                interpreter.resize_tensor_input(source["index"], images.shape)
            interpreter.allocate_tensors()
            state["shape"] = images.shape
        interpreter.set_tensor(source["index"], images)
        interpreter.invoke()
        return interpreter.get_tensor(target["index"]).copy()

    return run, None if dynamic else int(source["shape"][0])


def _load_torch(path):
    import torch

    module = torch.export.load(path).module()
    spec = [n for n in module.graph.nodes if n.op == "placeholder"][0].meta.get("val")
    first = spec.shape[0] if spec is not None else None
    batch = int(first) if isinstance(first, int) else None

    def run(images):
        with torch.no_grad():
            return module(torch.from_numpy(images)).detach().cpu().numpy()

    return run, batch


def run_exported(path, format, images, precision=None):
    """Runs an exported artifact in its own runtime on `images`.

    Args:
        path: the artifact.
        format: one of `EXPORT_FORMATS`.
        images: float32 array `(batch, H, W, C)`, preprocessed as the model
            expects.
        precision: None (float32) or, for "openvino", one of
            `OPENVINO_PRECISIONS` (see `load_exported`).

    Returns:
        The artifact's outputs as a NumPy array.

    Example:

    >>> import os, tempfile
    >>> import numpy as np
    >>> from keras_vit import ViT, export
    >>> model = ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1,
    ...             num_heads=2, mlp_dim=32, classes=10)
    >>> path = export.export_model(model, os.path.join(tempfile.mkdtemp(), "vit"),
    ...                            "tf_saved_model")
    >>> run_exported(path, "tf_saved_model", np.zeros((2, 32, 32, 3), "float32")).shape
    (2, 10)
    """
    return load_exported(path, format, precision)(images)


def verify_export(path, format, model, images, precision=None):
    """Maximum absolute difference between the artifact and `model.predict`.

    Args:
        path, format: the artifact, as given to `export_model`.
        model: the Keras model it was exported from.
        images: float32 array `(batch, H, W, C)`.
        precision: None (float32) or an OpenVINO precision (`load_exported`).

    Returns:
        `(max_abs_diff, outputs, expected)`: a float and the two arrays.
    """
    images = np.asarray(images, "float32")
    expected = np.asarray(model.predict(images, verbose=0))
    outputs = run_exported(path, format, images, precision)
    if outputs.shape != expected.shape:
        raise ValueError(
            f"The artifact's outputs have shape {outputs.shape}, the model's {expected.shape}."
        )
    return float(np.abs(outputs - expected).max()), outputs, expected
