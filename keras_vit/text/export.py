"""Export of a `TextEncoder` (`text_encoder.export(path, format=...)`).

The artifact takes token ids and the padding mask, `(batch, length)`
int32 each (inputs `token_ids` and `padding_mask`), and returns the text
embeddings before normalisation (output `embeddings`); tokenisation stays in Python
(`keras_vit.text.tokenizer`: `tokenizer(texts, sequence_length=length)`).
The length is fixed (the encoder's `max_length` unless `sequence_length`
says another), the batch dynamic unless `batch_size` fixes it.

| format | jax | tensorflow | torch |
| --- | --- | --- | --- |
| `"onnx"` | jax2onnx | tf2onnx | `torch.onnx` (dynamo) |
| `"openvino"` | jax2onnx, then OpenVINO | OpenVINO | OpenVINO from `torch.export` |

As for the image models (`keras_vit.export`), the model is traced in
`export_mode()`: plain matrix products and the portable attention.
"""

import contextlib
import os
import tempfile

import numpy as np

from keras_vit import kernels
from keras_vit.validation import check_choice, check_positive_int

FORMATS = ("onnx", "openvino")
SUFFIXES = {"onnx": ".onnx", "openvino": ".xml"}
INPUT_NAMES = ("token_ids", "padding_mask")


def _check(model, path, format, sequence_length, batch_size):
    check_choice(format, FORMATS, "format")
    path = os.fspath(path)
    if not path.endswith(SUFFIXES[format]):
        raise ValueError(f"`path` must end with {SUFFIXES[format]!r} for format={format!r}. Received: path={path!r}")
    length = model.max_length if sequence_length is None else check_positive_int(sequence_length, "sequence_length")
    if length > model.max_length:
        raise ValueError(
            f"`sequence_length` must be at most the encoder's max_length ({model.max_length}). "
            f"Received: sequence_length={sequence_length}"
        )
    if batch_size is not None:
        check_positive_int(batch_size, "batch_size")
    return path, length


def export_text_encoder(model, path, format="onnx", sequence_length=None, batch_size=None, verbose=False):
    """Writes a `TextEncoder` as a standalone ONNX or OpenVINO artifact.

    Args:
        model: a `keras_vit.text.TextEncoder`.
        path: `.onnx` or `.xml` (with its `.bin`).
        format: "onnx" (default) or "openvino".
        sequence_length: None (the encoder's `max_length`) or an int: the
            fixed length of the inputs.
        batch_size: None (dynamic) or an int.
        verbose: bool, default False: the exporters' own messages.

    Returns:
        `path`.

    Example:

    >>> import os, tempfile, numpy as np
    >>> from keras_vit.text import TextEncoder
    >>> encoder = TextEncoder(vocabulary_size=20, max_length=6, hidden_size=8, num_layers=1,
    ...                       num_heads=2, mlp_dim=16, eos_token_id=2, projection_dim=4)
    >>> path = export_text_encoder(encoder, os.path.join(tempfile.mkdtemp(), "text.onnx"))
    >>> ids = np.array([[1, 5, 2, 0, 0, 0]], "int32")
    >>> out = run_exported_text(path, "onnx", ids, (ids > 0).astype("int32"))
    >>> bool(np.allclose(out, encoder.predict([ids, (ids > 0).astype("int32")], verbose=0), atol=1e-5))
    True
    """
    import keras

    from keras_vit import export as image_export

    path, length = _check(model, path, format, sequence_length, batch_size)
    backend = keras.backend.backend()
    image_export.require(image_export.EXPORTERS[(backend, format)], f"format={format!r} on the {backend} backend")
    shape = (batch_size, length)
    with kernels.export_mode(), image_export._quiet(verbose):
        if backend == "torch":
            _export_torch(model, path, format, shape)
        elif format == "onnx" or backend == "jax":
            _export_keras(model, path, format, shape)
        else:
            keras.Model.export(model, path, format="openvino", verbose=verbose, input_signature=_signature(shape))
    if format == "onnx":
        image_export._finish_onnx(path, "embeddings", INPUT_NAMES)
    return path


def _signature(shape):
    import keras

    # A functional model takes one positional argument: the list of its inputs.
    return [[keras.InputSpec(shape=shape, dtype="int32", name=name) for name in INPUT_NAMES]]


def _export_keras(model, path, format, shape):
    """jax and tensorflow: Keras' ONNX exporter (jax2onnx, tf2onnx); OpenVINO
    reads the jax ONNX graph (Keras' jax route to OpenVINO goes through an
    `XlaCallModule` it cannot convert)."""
    import keras

    if format == "onnx":
        keras.Model.export(model, path, format="onnx", verbose=False, input_signature=_signature(shape))
        return
    import openvino as ov

    with tempfile.TemporaryDirectory() as folder:
        onnx_path = os.path.join(folder, "text.onnx")
        keras.Model.export(model, onnx_path, format="onnx", verbose=False, input_signature=_signature(shape))
        ov.save_model(ov.convert_model(onnx_path), path, compress_to_fp16=False)


def _export_torch(model, path, format, shape):
    import torch

    model.eval()
    dynamic = shape[0] is None
    # A batch of 1 would be specialised to a constant: trace with 2.
    sample = tuple(torch.ones((2 if dynamic else shape[0], shape[1]), dtype=torch.int32) for _ in INPUT_NAMES)
    batch = torch.export.Dim("batch", min=1, max=4096)
    # `forward(*args)`: the dynamic shapes of its one argument, the inputs' tuple.
    dims = [(({0: batch}, {0: batch}),)] if dynamic else None
    if format == "onnx":
        program = torch.onnx.export(model, (sample,), dynamic_shapes=dims, dynamo=True,
                                    input_names=list(INPUT_NAMES), verbose=False)
        program.save(path)
        return
    import openvino as ov

    program = torch.export.export(model, (sample,), dynamic_shapes=dims, strict=False)
    converted = ov.convert_model(program)
    for port, name in zip(converted.inputs, INPUT_NAMES):
        port.get_node().set_friendly_name(name)
    ov.save_model(converted, path, compress_to_fp16=False)


def run_exported_text(path, format, token_ids, padding_mask):
    """Runs an exported text encoder in its runtime (ONNX Runtime, OpenVINO
    CPU in float32): `(batch, length)` token ids and mask to the embeddings."""
    check_choice(format, FORMATS, "format")
    token_ids = np.asarray(token_ids, "int32")
    padding_mask = np.asarray(padding_mask, "int32")
    if format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(os.fspath(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return session.run(None, dict(zip(names, (token_ids, padding_mask))))[0]
    import openvino as ov

    compiled = ov.Core().compile_model(os.fspath(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    with contextlib.suppress(AttributeError):
        compiled = compiled.create_infer_request()
    result = compiled.infer([token_ids, padding_mask])
    return np.asarray(next(iter(result.values())))
