"""Runtimes of exported artifacts: SavedModel, ONNX Runtime, OpenVINO, LiteRT, torch.export.

`run_exported(path, format, images)` runs an artifact written by
`keras_vit.export.export_model` (or Keras' `model.export`) in the format's own
runtime, without Keras; `verify_export` compares it with `model.predict`.
Also available as `keras_vit.export.run_exported` etc. An artifact exported
for NaFlex patch batches (`naflex_length`) takes the dict of
`keras_vit.preprocessing.naflex.naflex_inputs` instead of images; each runtime's inputs
are matched to its keys by name.
"""

import importlib
import json
import os

import numpy as np

from keras_vit.export import metadata as artifact_metadata
from keras_vit.export.formats import EXPORT_FORMATS, OPENVINO_PRECISIONS, RUNTIMES
from keras_vit.export.raw_images import as_raw_images, expected_probabilities
from keras_vit.preprocessing.naflex import PATCH_INPUTS, as_patch_inputs


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
        A function from a float32 NumPy batch `(batch, H, W, C)` (or a
        NaFlex patch dict, for an artifact exported with `naflex_length`)
        to the NumPy outputs: one array, or for an artifact of several
        named outputs (a task model's) a dict of them by name; for an
        artifact exported with `raw_images=True`, from uint8 images: a
        batch, or a list of images of their own sizes. Its `metadata`
        attribute holds what the artifact carries
        (`keras_vit.export.metadata.read_metadata`).

    Raises:
        ValueError: (when called) integer pixels for an artifact whose
            metadata says it takes preprocessed images, or values that are
            not pixels for a raw-image artifact.
    """
    if format not in EXPORT_FORMATS:
        raise ValueError(f"`format` must be one of {EXPORT_FORMATS}. Received: format={format!r}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"No exported artifact at `path`. Received: path={path!r}")
    _check_precision(precision, format)
    require(RUNTIMES[format], f"Running a {format!r} artifact")
    options = {"precision": precision or "f32"} if format == "openvino" else {}
    run, batch, entries = LOADERS[format](path, **options)
    entries = artifact_metadata.decode(entries)
    raw = entries.get("raw_images", False)

    def feed(images):
        if raw and isinstance(images, (list, tuple)):  # images of their own sizes
            return np.concatenate([feed(image[None]) for image in as_raw_images(images)])
        x = as_raw_images(images) if raw else _as_inputs(images, entries)
        return run(x) if batch is None else _in_slices(run, x, batch)

    feed.metadata = entries
    return feed


def _as_inputs(x, entries=None):
    """Images as float32, a NaFlex patch dict checked, any other dict's arrays as they are.

    Integer pixels are refused where the artifact's metadata says it takes
    preprocessed images: converted, they would be read as scaled values.
    """
    if not isinstance(x, dict):
        x = np.asarray(x)
        # Only image artifacts record a preprocessing: integer token ids
        # (text towers) pass.
        if entries and entries.get("preprocessing") and entries.get("raw_images") is False \
                and np.issubdtype(x.dtype, np.integer):
            raise ValueError(
                f"This artifact takes images already preprocessed ({entries.get('inputs')}); these "
                f"are {x.dtype} pixels. Scale them first (keras_vit.preprocess_input(x, "
                "preprocessing=metadata['preprocessing']) after its resize and crop), or export "
                "with raw_images=True for an artifact that takes uint8 images."
            )
        return np.asarray(x, "float32")
    if sorted(x) == sorted(PATCH_INPUTS):
        return as_patch_inputs(x)
    return {k: np.asarray(v) for k, v in x.items()}


def input_key(name, keys=PATCH_INPUTS):
    """The key of `keys` a runtime's input name stands for (the longest key
    it contains: exporters prefix or suffix the names), or None.

    Example:

    >>> input_key("serving_default_patch_valid:0"), input_key("args_0_patches"), input_key("image")
    ('patch_valid', 'patches', None)
    >>> input_key("serving_default_token_ids:0", ("token_ids", "padding_mask"))
    'token_ids'
    """
    found = [k for k in keys if k in name]
    return max(found, key=len) if found else None


def _feed(names, x):
    """`{runtime input name: array}` of images or a dict of named inputs."""
    if not isinstance(x, dict):
        return {names[0]: x}
    keys = {name: input_key(name, tuple(x)) for name in names}
    if sorted(k for k in keys.values() if k) != sorted(x):
        kind = "a NaFlex patch batch's" if sorted(x) == sorted(PATCH_INPUTS) else "the given"
        raise ValueError(
            f"The artifact's inputs {list(names)} are not {kind} ({list(x)})."
        )
    return {name: x[key] for name, key in keys.items()}


def _named(names, arrays):
    """One output as its array, several as `{name: array}` (an artifact of
    named outputs; the names as the exporter kept them)."""
    arrays = [np.asarray(a) for a in arrays]
    return arrays[0] if len(arrays) == 1 else dict(zip(names, arrays))


def _concatenate(parts):
    if isinstance(parts[0], dict):
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return np.concatenate(parts)


def _first(x, count):
    return {k: v[:count] for k, v in x.items()} if isinstance(x, dict) else x[:count]


def _rows(x, start, stop):
    if isinstance(x, dict):
        return {k: v[start:stop] for k, v in x.items()}
    return x[start:stop]


def _pad(x, short):
    if isinstance(x, dict):
        return {k: _pad(v, short) for k, v in x.items()}
    return np.concatenate([x, np.zeros((short,) + x.shape[1:], x.dtype)])


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
    total = len(next(iter(images.values())) if isinstance(images, dict) else images)
    for start in range(0, total, batch):
        part = _rows(images, start, start + batch)
        short = batch - min(batch, total - start)
        if short:
            part = _pad(part, short)
        outputs.append(_first(run(part), batch - short))
    return _concatenate(outputs)


def _load_tf_saved_model(path):
    import tensorflow as tf

    loaded = tf.saved_model.load(path)
    spec = tf.nest.flatten(loaded.serve.input_signature)[0]

    def run(images):
        # The closure keeps `loaded` alive: its variables die with it.
        x = tf.nest.map_structure(tf.constant, images)
        out = loaded.serve(x)
        if isinstance(out, dict):
            return {k: v.numpy() for k, v in out.items()}
        return out.numpy()

    return run, spec.shape[0], artifact_metadata.read_raw(path, "tf_saved_model")


def _load_onnx(path):
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    specs = session.get_inputs()
    batch = specs[0].shape[0] if isinstance(specs[0].shape[0], int) else None
    names = [spec.name for spec in specs]
    outputs = [spec.name for spec in session.get_outputs()]
    entries = dict(session.get_modelmeta().custom_metadata_map)
    return lambda images: _named(outputs, session.run(None, _feed(names, images))), batch, entries


def _load_openvino(path, precision="f32"):
    import openvino as ov

    # OpenVINO's CPU default is bfloat16 wherever the CPU has it: always say
    # which precision, float32 (the exported one) unless asked.
    core = ov.Core()
    model = core.read_model(path)
    entries = artifact_metadata.openvino_entries(model)
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": precision})
    first = compiled.inputs[0].get_partial_shape()[0]
    batch = None if first.is_dynamic else first.get_length()
    # Every name of each input: compiling may give a tensor an internal name
    # beside the one the export set.
    ports = {"|".join(sorted(port.get_names())): port for port in compiled.inputs}
    outputs = [port.get_any_name() for port in compiled.outputs]

    def run(images):
        result = compiled({ports[k]: v for k, v in _feed(list(ports), images).items()})
        return _named(outputs, [result[port] for port in compiled.outputs])

    return run, batch, entries


def _load_litert(path):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    if len(interpreter.get_output_details()) > 1:
        return (*_litert_signature(interpreter), artifact_metadata.read_raw(path, "litert"))
    sources = {d["name"]: d for d in interpreter.get_input_details()}
    source = next(iter(sources.values()))
    target = interpreter.get_output_details()[0]
    # Any unknown axis (the batch, a raw-image artifact's height and width)
    # takes each call's size.
    dynamic = bool((source["shape_signature"] == -1).any())
    state = {"shapes": None}

    def run(images):
        feed = _feed(list(sources), images)
        shapes = {name: x.shape for name, x in feed.items()}
        if state["shapes"] != shapes:
            for name, x in feed.items():
                if dynamic:
                    interpreter.resize_tensor_input(sources[name]["index"], x.shape)
            interpreter.allocate_tensors()
            state["shapes"] = shapes
        for name, x in feed.items():
            interpreter.set_tensor(sources[name]["index"], x)
        interpreter.invoke()
        return interpreter.get_tensor(target["index"]).copy()

    batch = None if source["shape_signature"][0] == -1 else int(source["shape"][0])
    return run, batch, artifact_metadata.read_raw(path, "litert")


def _litert_signature(interpreter):
    """A LiteRT model of several outputs, run through its signature (named outputs)."""
    signatures = interpreter.get_signature_list()
    key = "serve" if "serve" in signatures else next(iter(signatures))
    runner = interpreter.get_signature_runner(key)
    source = signatures[key]["inputs"][0]

    def run(images):
        out = runner(**{source: np.asarray(images, "float32")})
        return {name: np.asarray(value) for name, value in out.items()}

    return run, None


def _load_torch(path):
    import torch

    extra = {artifact_metadata.FILE: ""}
    module = torch.export.load(path, extra_files=extra).module()
    spec = [n for n in module.graph.nodes if n.op == "placeholder"][0].meta.get("val")
    first = spec.shape[0] if spec is not None else None
    batch = int(first) if isinstance(first, int) else None

    def run(images):
        x = {k: torch.from_numpy(v) for k, v in images.items()} if isinstance(images, dict) else (
            torch.from_numpy(images))
        with torch.no_grad():
            out = module(x)
        if isinstance(out, dict):
            return {k: v.detach().cpu().numpy() for k, v in out.items()}
        return out.detach().cpu().numpy()

    entries = json.loads(extra[artifact_metadata.FILE]) if extra[artifact_metadata.FILE] else {}
    return run, batch, entries


def run_exported(path, format, images, precision=None):
    """Runs an exported artifact in its own runtime on `images`.

    Args:
        path: the artifact.
        format: one of `EXPORT_FORMATS`.
        images: float32 array `(batch, H, W, C)`, preprocessed as the model
            expects (or a NaFlex patch dict, for an artifact exported with
            `naflex_length`).
        precision: None (float32) or, for "openvino", one of
            `OPENVINO_PRECISIONS` (see `load_exported`).

    Returns:
        The artifact's outputs as a NumPy array, or for an artifact of
        several named outputs (a task model's) a dict of them by name.

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

    A raw-image artifact (`raw_images=True`) is held to the probabilities
    `keras_vit.classify` computes: each image resized and cropped by Pillow
    and scaled as the artifact's preprocessing record says, `model.predict`,
    a softmax on logits.

    Args:
        path, format: the artifact, as given to `export_model`.
        model: the Keras model it was exported from.
        images: float32 array `(batch, H, W, C)`, or a NaFlex patch dict;
            for a raw-image artifact, uint8 images (a batch, or a list of
            images of their own sizes).
        precision: None (float32) or an OpenVINO precision (`load_exported`).

    Returns:
        `(max_abs_diff, outputs, expected)`: a float and the two arrays (for
        a model of named outputs, dicts of them, compared name by name).
    """
    run = load_exported(path, format, precision)
    if run.metadata.get("raw_images"):
        from keras_vit.preprocessing import Preprocessing

        images = as_raw_images(images)
        record = Preprocessing.from_config(run.metadata["preprocessing"])
        expected = expected_probabilities(model, list(images), record)
    else:
        images = _as_inputs(images)
        expected = model.predict(images, verbose=0)
    outputs = run(images)
    if isinstance(expected, dict):
        expected = {k: np.asarray(v) for k, v in expected.items()}
        # An artifact of one output holds a one-key dict's only entry.
        if not isinstance(outputs, dict) and len(expected) == 1:
            outputs = {next(iter(expected)): outputs}
        if not isinstance(outputs, dict) or sorted(outputs) != sorted(expected):
            raise ValueError(
                f"The artifact's outputs {sorted(outputs) if isinstance(outputs, dict) else 'one array'} are not "
                f"the model's {sorted(expected)}."
            )
        pairs = [(outputs[k], expected[k]) for k in expected]
    else:
        expected = np.asarray(expected)
        pairs = [(outputs, expected)]
    for out, want in pairs:
        if out.shape != want.shape:
            raise ValueError(f"The artifact's outputs have shape {out.shape}, the model's {want.shape}.")
    return max(float(np.abs(out - want).max()) for out, want in pairs), outputs, expected


# Each format's loader: `load_exported`'s table.
LOADERS = {
    "tf_saved_model": _load_tf_saved_model,
    "onnx": _load_onnx,
    "openvino": _load_openvino,
    "litert": _load_litert,
    "torch": _load_torch,
}
