"""The one table of export formats: what writes each, what runs it, what it can hold.

Standard library only, so the command line's parsers read it without Keras.

| format | jax | tensorflow | torch | artifact | runtime |
| --- | --- | --- | --- | --- | --- |
| `"tf_saved_model"` | jax2tf | native | through tensorflow | a SavedModel folder, `serve` endpoint | TensorFlow |
| `"onnx"` | jax2onnx | tf2onnx | `torch.onnx` (dynamo) | `.onnx` | ONNX Runtime |
| `"openvino"` | jax2onnx, then OpenVINO | OpenVINO | OpenVINO from `torch.export` | `.xml` + `.bin` | OpenVINO |
| `"litert"` | - | TFLite converter | through tensorflow; litert-torch for a fixed batch | `.tflite` | LiteRT |
| `"torch"` | - | - | `torch.export` | `.pt2` | torch |

Every other table of the export package is derived from `FORMATS`.

Example:

>>> FORMATS["onnx"].suffix, BACKEND_FORMATS["jax"]
('.onnx', ('tf_saved_model', 'onnx', 'openvino'))
>>> QUANTIZE_FORMATS, QUANTIZED_FORMATS["torch"]
(('onnx', 'openvino'), ('tf_saved_model', 'onnx', 'torch'))
"""

from typing import NamedTuple

BACKENDS = ("jax", "tensorflow", "torch")
TENSORFLOW = (("tensorflow", "tensorflow"),)
ONNX = (("onnx", "onnx"), ("onnxscript", "onnxscript"))
OPENVINO = (("openvino", "openvino"),)


class Format(NamedTuple):
    """One export format.

    Attributes:
        name: the name `export_model` takes.
        suffix: the file name's ending ("" for a folder).
        exporters: backend -> the `(module, pip package)` pairs its exporter
            imports; a backend absent here cannot produce the format.
        runtime: the `(module, pip package)` pairs of the runtime that runs it.
        keras_int8: the backends whose Keras-quantized models
            (`model.quantize("int8")`) the format carries with correct
            outputs (measured: OpenVINO converts Keras' int8 layers wrongly
            or not at all, the LiteRT converters reject int8 batch matrix
            products, ONNX Runtime has no int8 Einsum for jax2onnx's graph).
        quantizer: the `(module, pip package)` pairs of the runtime's own
            int8 quantizer (`quantize="int8"`), or () where keras_vit drives none.
    """

    name: str
    suffix: str
    exporters: dict
    runtime: tuple
    keras_int8: tuple = ()
    quantizer: tuple = ()


FORMATS = {
    f.name: f
    for f in (
        Format(
            "tf_saved_model", "",
            {"jax": TENSORFLOW, "tensorflow": (), "torch": TENSORFLOW},
            TENSORFLOW,
            keras_int8=("jax", "tensorflow", "torch"),
        ),
        Format(
            "onnx", ".onnx",
            {"jax": (("jax2onnx", "jax2onnx"),) + ONNX, "tensorflow": (("tf2onnx", "tf2onnx"),) + ONNX,
             "torch": ONNX},
            (("onnxruntime", "onnxruntime"),),
            keras_int8=("tensorflow", "torch"),
            quantizer=(("onnxruntime", "onnxruntime"),),
        ),
        Format(
            "openvino", ".xml",
            {"jax": (("jax2onnx", "jax2onnx"),) + OPENVINO, "tensorflow": OPENVINO, "torch": OPENVINO},
            OPENVINO,
            quantizer=OPENVINO + (("nncf", "nncf"),),
        ),
        Format(
            "litert", ".tflite",
            {"tensorflow": (), "torch": (("litert_torch", "litert-torch"),)},
            (("ai_edge_litert", "ai-edge-litert"),),
        ),
        Format("torch", ".pt2", {"torch": ()}, (("torch", "torch"),), keras_int8=("torch",)),
    )
}

EXPORT_FORMATS = tuple(FORMATS)
BACKEND_FORMATS = {b: tuple(n for n, f in FORMATS.items() if b in f.exporters) for b in BACKENDS}
SUFFIXES = {n: f.suffix for n, f in FORMATS.items()}
EXPORTERS = {(b, n): modules for n, f in FORMATS.items() for b, modules in f.exporters.items()}
RUNTIMES = {n: f.runtime for n, f in FORMATS.items()}
QUANTIZED_FORMATS = {b: tuple(n for n, f in FORMATS.items() if b in f.keras_int8) for b in BACKENDS}
# The runtimes' own int8 quantization (`export_model(..., quantize="int8")`).
QUANTIZE_MODES = ("int8",)
QUANTIZE_FORMATS = tuple(n for n, f in FORMATS.items() if f.quantizer)
QUANTIZERS = {n: f.quantizer for n, f in FORMATS.items() if f.quantizer}
# OpenVINO inference precisions `run_exported` takes (`INFERENCE_PRECISION_HINT`);
# None is float32, the precision the model was exported in.
OPENVINO_PRECISIONS = ("f32", "bf16", "f16")
