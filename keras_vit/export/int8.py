"""int8 artifacts made by the runtimes' own quantizers, and their check.

`keras_vit.export.export_model(model, path, "onnx" | "openvino",
quantize="int8")` exports the float32 model, quantizes the exported graph
with the tool of the runtime that will run it and measures what that cost:

- ONNX: `onnxruntime.quantization.quantize_dynamic` (int8 weights per
  output channel held to 7 bits, activations quantized at run time). The
  7-bit range (`reduce_range`) keeps the artifact exact on every x86 CPU:
  without VNNI, ONNX Runtime multiplies uint8 activations by int8 weights
  with pairwise sums that saturate at 16 bits with full-range weights;
  per-channel scales win back the bit (docs/guides/deployment.md). Every
  projection is a MatMul
  on a 2D initializer in keras_vit's ONNX graphs (`keras_vit.export`),
  so every one becomes an int8 `DynamicQuantizeMatMul`.
- OpenVINO: `nncf.compress_weights` (int8 weights per output channel);
  OpenVINO's CPU plugin runs those products in int8 on activations it
  quantizes dynamically.

Both need no calibration data: the activations' ranges are taken per call.
A static scheme (`quantize_static`, `nncf.quantize`) would need a
representative calibration set from the user and gave no measured speed
advantage worth that here, so it is not offered.

Keras' own `model.quantize("int8")` exported to ONNX is the slow route: ONNX
Runtime emulates its int8 layers with float operations, far slower than the
float model (docs/performance.md); `export_model` warns about it and names
this path instead.
"""

import os

import numpy as np

from keras_vit.export.formats import QUANTIZE_FORMATS, QUANTIZE_MODES, QUANTIZERS
from keras_vit.export.serving import load_exported, require
# Images checked when none are given: seeded uniform noise in [-1, 1].
DEFAULT_SAMPLES = 8


class QuantizedExport(str):
    """The path of an int8 artifact, carrying how it compares with float32.

    A `str` (the path, as `export_model` returns for float artifacts) with
    attributes:

    - `format`, `mode`: as given to `export_model`.
    - `top1_agreement`: fraction of the sample images whose top-1 class is
      the same in the int8 and the float32 artifact (both run in the
      format's runtime, float32 precision).
    - `agreeing`, `num_images`: the same as counts.
    - `max_abs_diff`: largest difference between the two artifacts' outputs.
    - `images`: "given" or "random" (the sample images' origin).
    """

    def __new__(cls, path, **report):
        obj = super().__new__(cls, path)
        obj.__dict__.update(report)
        return obj

    def summary(self):
        """One line: top-1 agreement and largest output change."""
        return (
            f"{self.mode} {self.format}: top-1 agrees with float32 on {self.agreeing} of "
            f"{self.num_images} {self.images} images ({self.top1_agreement:.0%}); "
            f"max |int8 - float32| = {self.max_abs_diff:.3g}"
        )


def check_quantize(quantize, format):
    """Validates `export_model`'s `quantize` argument for `format`.

    Args:
        quantize: None or one of `QUANTIZE_MODES`.
        format: the export format.

    Returns:
        `quantize`.

    Raises:
        ValueError: naming the modes or the formats that have them.

    Example:

    >>> check_quantize("int8", "onnx")
    'int8'
    """
    if quantize is None:
        return None
    if quantize not in QUANTIZE_MODES:
        raise ValueError(
            f"`quantize` must be None or one of {QUANTIZE_MODES}. Received: quantize={quantize!r}"
        )
    if format not in QUANTIZE_FORMATS:
        raise ValueError(
            f"quantize={quantize!r} uses the runtime's own quantizer, which keras_vit "
            f"drives for {QUANTIZE_FORMATS}. Received: format={format!r}"
        )
    return quantize


def quantize_onnx(source, target):
    """Dynamic int8 quantization of an ONNX file by ONNX Runtime.

    Args:
        source: a float32 `.onnx` file.
        target: the `.onnx` file to write.

    Returns:
        `target`.
    """
    require(QUANTIZERS["onnx"], "int8 quantization of an ONNX file")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(os.fspath(source), os.fspath(target), weight_type=QuantType.QInt8,
                     per_channel=True, reduce_range=True)
    return target


def quantize_openvino(source, target):
    """int8 weights of an OpenVINO IR by NNCF, run on dynamically quantized activations.

    Args:
        source: a float32 OpenVINO `.xml` file (its `.bin` beside it).
        target: the `.xml` file to write.

    Returns:
        `target`.
    """
    require(QUANTIZERS["openvino"], "int8 quantization of an OpenVINO model")
    import nncf
    import openvino as ov

    model = nncf.compress_weights(ov.Core().read_model(os.fspath(source)))
    ov.save_model(model, os.fspath(target), compress_to_fp16=False)
    return target


def top1_agreement(reference, outputs):
    """`(agreeing, total)` of the top-1 classes of two output batches.

    Example:

    >>> top1_agreement(np.array([[0, 1.0], [2, 1]]), np.array([[0, 3.0], [0, 1]]))
    (1, 2)
    """
    reference, outputs = np.asarray(reference), np.asarray(outputs)
    if reference.shape != outputs.shape:
        raise ValueError(f"Output shapes differ: {reference.shape} and {outputs.shape}.")
    same = reference.reshape(len(reference), -1).argmax(-1) == outputs.reshape(len(outputs), -1).argmax(-1)
    return int(same.sum()), len(same)


# The model-input range of images with no preprocessing record to say it:
# every scaling keras_vit knows maps [0, 255] pixels well inside it ([-1, 1],
# ImageNet's mean/std about [-2.1, 2.6], CLIP's [-1.8, 2.1]); raw pixels
# reach far beyond.
DEFAULT_INPUT_RANGE = (-5.0, 5.0)


def input_range(preprocessing=None):
    """`(low, high)`: the values preprocessed images can take.

    Args:
        preprocessing: None or a `Preprocessing` record (its mean and std
            map pixels in [0, 1] to this range).

    Example:

    >>> from keras_vit.weights.record import Preprocessing
    >>> input_range(Preprocessing.from_mode("inception"))
    (-1.0, 1.0)
    """
    if preprocessing is None:
        return DEFAULT_INPUT_RANGE
    from keras_vit.weights.record import Preprocessing

    record = Preprocessing.from_config(preprocessing)
    mean, std = np.asarray(record.mean), np.asarray(record.std)
    return float(np.min(-mean / std)), float(np.max((1 - mean) / std))


def sample_images(images, shape, preprocessing=None):
    """The images the int8 artifact is checked on, and where they come from.

    Given images must be model inputs: preprocessed (`keras_vit.preprocess_input`)
    into the range the model's scaling gives (`input_range`, with a margin
    for resampling overshoot). Raw [0, 255] photos are refused: the
    agreement measured on them says nothing of the model's real inputs.
    """
    if images is None:
        rng = np.random.default_rng(0)
        return rng.uniform(-1, 1, (DEFAULT_SAMPLES,) + tuple(shape)).astype("float32"), "random"
    images = np.asarray(images, "float32")
    if images.ndim != 4 or tuple(images.shape[1:]) != tuple(shape) or not len(images):
        raise ValueError(
            f"`sample_images` must be a batch of shape (N, {', '.join(map(str, shape))}). "
            f"Received: shape {images.shape}"
        )
    low, high = input_range(preprocessing)
    margin = 0.1 * (high - low)
    seen = float(np.nanmin(images)), float(np.nanmax(images))
    if not (np.isfinite(images).all() and seen[0] >= low - margin and seen[1] <= high + margin):
        raise ValueError(
            f"`sample_images` must be preprocessed model inputs, in about [{low:.3g}, {high:.3g}] "
            f"for this model's scaling. Received: values in [{seen[0]:.4g}, {seen[1]:.4g}]"
            + (" (raw pixels? pass them through keras_vit.preprocess_input first)" if seen[1] > 10 else "")
        )
    return images, "given"


def quantize_artifact(float_path, path, format, mode, images, source):
    """Quantizes an exported float artifact and compares the two in the runtime.

    Returns:
        A `QuantizedExport` for `path`.
    """
    {"onnx": quantize_onnx, "openvino": quantize_openvino}[format](float_path, path)
    reference = load_exported(float_path, format)(images)
    outputs = load_exported(path, format)(images)
    agreeing, total = top1_agreement(reference, outputs)
    return QuantizedExport(
        path, format=format, mode=mode, top1_agreement=agreeing / total, agreeing=agreeing,
        num_images=total, max_abs_diff=float(np.abs(outputs - reference).max()), images=source,
    )
