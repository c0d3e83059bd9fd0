"""What an exported artifact says about itself: class names, preprocessing, inputs.

Every artifact `keras_vit.export.export_model` writes carries the same
entries, each a string (the lists and records as JSON), where its format
keeps such data:

| format | where |
| --- | --- |
| `"onnx"` | the model's `metadata_props` (`onnxruntime`: `session.get_modelmeta().custom_metadata_map`) |
| `"openvino"` | the model's runtime info, section `keras_vit` (`model.get_rt_info(["keras_vit", key])`) |
| `"tf_saved_model"` | `assets.extra/keras_vit.json` (the SavedModel's folder for files beside the graph, which TF Serving keeps), and attributes of the loaded object: `keras_vit_metadata` (the entries as JSON) and `class_names` (`tf.saved_model.load(path).class_names`) |
| `"litert"` | a metadata entry `keras_vit` of the flatbuffer (JSON) |
| `"torch"` | the extra file `keras_vit.json` of the `.pt2` archive (`torch.export.load(..., extra_files=...)`) |

The entries (`KEYS`): `class_names` (the head's names, where the model
records them), `preprocessing` (its `Preprocessing` record, where it has
one: mean, std, input size, resize and filter), `raw_images` ("true": the
artifact takes uint8 images of any size and resizes, crops and scales them
itself; "false": it takes images already preprocessed as `preprocessing`
says), `inputs` and `output` (what they hold, in words: the inputs name the
resize, its filter, the centre crop and the scaling, as
`Preprocessing.describe` words them), `model` (the model's name) and
`keras_vit_version`.
`read_metadata(path, format)` reads them back, decoded.
"""

import json
import os

from keras_vit.version import __version__

# The name of the entry (file, flatbuffer metadata, runtime-info section)
# that holds the metadata.
NAME = "keras_vit"
FILE = NAME + ".json"
KEYS = ("class_names", "preprocessing", "raw_images", "inputs", "output", "model", "keras_vit_version")
# The entries stored as JSON text.
_JSON = ("class_names", "preprocessing")


def artifact_metadata(model, output, raw_images=False):
    """The metadata entries of `model`'s artifact, each a string.

    Args:
        model: the model being exported (its `class_names` and
            `preprocessing`, where it has them).
        output: the artifact's output name (`keras_vit.export.output_name`).
        raw_images: bool: whether the artifact prepares raw images itself.

    Returns:
        A dict of strings, keyed by names of `KEYS`.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1,
    ...                       num_heads=2, mlp_dim=8, classes=2, class_names=["no", "yes"])
    >>> artifact_metadata(model, "probabilities")["class_names"]
    '["no", "yes"]'
    >>> model.preprocessing = keras_vit.preprocessing.Preprocessing.from_mode("imagenet", 16, crop_fraction=0.5)
    >>> artifact_metadata(model, "probabilities", raw_images=True)["inputs"].split("; ")[1].split(", then")[0]
    'inside the artifact the shorter side resized to 32 (bicubic, aspect ratio kept), the centre 16x16 cut out (crop fraction 0.5)'
    """
    entries = {}
    names = getattr(model, "class_names", None)
    if names is not None:
        entries["class_names"] = json.dumps(list(names))
    record = getattr(model, "preprocessing", None)
    if record is not None:
        entries["preprocessing"] = json.dumps(record.get_config())
    if raw_images:
        inputs = ("images: uint8 (batch, height, width, channels) of any size; inside the artifact "
                  f"{record.describe()}")
    elif record is not None:
        inputs = ("images: float32 (batch, height, width, channels), already prepared as `preprocessing` "
                  f"says: {record.describe()}")
    else:
        inputs = "the model's inputs, preprocessed as the model expects"
    entries.update(
        raw_images="true" if raw_images else "false",
        inputs=inputs,
        output=output,
        model=str(getattr(model, "name", type(model).__name__)),
        keras_vit_version=__version__,
    )
    return entries


def decode(entries):
    """The entries with their JSON values decoded and `raw_images` a bool.

    Example:

    >>> decode({"class_names": '["a"]', "raw_images": "false", "output": "logits"})
    {'class_names': ['a'], 'raw_images': False, 'output': 'logits'}
    """
    out = {}
    for key, value in entries.items():
        if key in _JSON:
            value = json.loads(value)
        elif key == "raw_images":
            value = value == "true"
        out[key] = value
    return out


def openvino_rt_info(model, entries):
    """Sets the entries as runtime info of an OpenVINO model, section `NAME`."""
    for key, value in entries.items():
        model.set_rt_info(value, [NAME, key])


def _saved_model_file(path):
    return os.path.join(path, "assets.extra", FILE)


def _litert_model(data):
    from ai_edge_litert import schema_py_generated as schema

    return schema, schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))


def _write_litert(path, entries):
    """Adds a metadata entry `NAME` (JSON) to a `.tflite` flatbuffer."""
    import flatbuffers

    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    schema, model = _litert_model(data)
    buffer = schema.BufferT()
    buffer.data = list(json.dumps(entries).encode("utf-8"))
    model.buffers = list(model.buffers or []) + [buffer]
    kept = [m for m in (model.metadata or []) if m.name not in (NAME, NAME.encode())]
    entry = schema.MetadataT()
    entry.name, entry.buffer = NAME, len(model.buffers) - 1
    model.metadata = kept + [entry]
    builder = flatbuffers.Builder(len(data) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    with open(path, "wb") as handle:
        handle.write(builder.Output())


def _write_openvino(path, entries):
    """Sets the entries in an OpenVINO model's runtime info. The model read
    maps its `.bin` file into memory: the copy is written beside it and
    renamed over it."""
    import openvino as ov

    model = ov.Core().read_model(path)
    openvino_rt_info(model, entries)
    stem = path[: -len(".xml")]
    ov.save_model(model, stem + ".meta.xml", compress_to_fp16=False)
    del model
    for suffix in (".xml", ".bin"):
        os.replace(stem + ".meta" + suffix, stem + suffix)


def _write_onnx(path, entries):
    import onnx

    model = onnx.load(path)
    kept = {p.key: p.value for p in model.metadata_props if p.key not in entries}
    onnx.helper.set_model_props(model, {**kept, **entries})
    onnx.save(model, path)


def write_metadata(path, format, entries):
    """Writes the entries into an artifact (in place). A `.pt2` takes them
    as it is saved (`torch.export.save(..., extra_files=...)`)."""
    path = os.fspath(path)
    if format == "tf_saved_model":
        os.makedirs(os.path.dirname(_saved_model_file(path)), exist_ok=True)
        with open(_saved_model_file(path), "w", encoding="utf-8") as handle:
            json.dump(entries, handle, indent=1)
    elif format in _WRITERS:
        _WRITERS[format](path, entries)
    else:
        raise ValueError(
            f"write_metadata writes {('tf_saved_model',) + tuple(_WRITERS)} artifacts. Received: format={format!r}"
        )


_WRITERS = {"onnx": _write_onnx, "openvino": _write_openvino, "litert": _write_litert}


def openvino_entries(model):
    """The entries in an OpenVINO model's runtime info (empty without them)."""
    if not model.has_rt_info([NAME]):
        return {}
    return {key: model.get_rt_info([NAME, key]).astype(str) for key in model.get_rt_info()[NAME]}


def _litert_entries(data):
    """The entries of a `.tflite` flatbuffer, read without unpacking its weights."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    for i in range(model.MetadataLength()):
        entry = model.Metadata(i)
        if entry.Name().decode() == NAME:
            return json.loads(model.Buffers(entry.Buffer()).DataAsNumpy().tobytes().decode("utf-8"))
    return {}


def read_raw(path, format):
    """The entries an artifact carries, as stored (strings); empty without them."""
    if format == "onnx":
        import onnx

        return {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
    if format == "openvino":
        import openvino as ov

        return openvino_entries(ov.Core().read_model(path))
    if format == "tf_saved_model":
        file = _saved_model_file(path)
        if not os.path.isfile(file):
            return {}
        with open(file, encoding="utf-8") as handle:
            return json.load(handle)
    if format == "litert":
        with open(path, "rb") as handle:
            return _litert_entries(bytearray(handle.read()))
    import torch

    extra = {FILE: ""}
    torch.export.load(path, extra_files=extra)
    return json.loads(extra[FILE]) if extra[FILE] else {}


def read_metadata(path, format):
    """The metadata an artifact carries, decoded (`decode`).

    Args:
        path: an artifact written by `keras_vit.export.export_model`.
        format: its format.

    Returns:
        A dict: `class_names` (a list, where the model had names),
        `preprocessing` (a `Preprocessing` config dict, where it had one),
        `raw_images` (bool), `inputs`, `output`, `model`,
        `keras_vit_version`; empty for an artifact written without them.
    """
    from keras_vit.export.formats import EXPORT_FORMATS

    if format not in EXPORT_FORMATS:
        raise ValueError(f"`format` must be one of {EXPORT_FORMATS}. Received: format={format!r}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"No exported artifact at `path`. Received: path={path!r}")
    return decode(read_raw(path, format))
