"""The torch backend's exporters: one `torch.export` program (its sample
input and dynamic axes from the input spec) saved as a `.pt2`, converted by
OpenVINO, or exported to ONNX by torch's dynamo exporter (Keras' TorchScript
fallback fails in LayerNormalization on a dynamic shape)."""

from keras_vit.export.inputs import input_dtypes, input_names, port_names
from keras_vit.export.metadata import FILE as METADATA_FILE


# The sizes a torch trace samples unknown axes with, by axis: the batch, a
# raw-image artifact's height and width (1 would be specialised to a
# constant, and equal sizes could be taken for one).
_TORCH_SAMPLE_SIZES = (2, 37, 53)


def _torch_sample(spec):
    """A sample input for `spec` (one spec, a list or a dict of them), and
    its dynamic axes (None where every axis is fixed)."""
    import torch

    specs = spec if isinstance(spec, dict) else dict(enumerate(spec if isinstance(spec, list) else [spec]))
    unknown = {k: [a for a, n in enumerate(s.shape) if n is None] for k, s in specs.items()}
    sizes = dict(enumerate(_TORCH_SAMPLE_SIZES))
    sample = {
        k: torch.ones(tuple(sizes[a] if n is None else n for a, n in enumerate(s.shape)),
                      dtype=getattr(torch, s.dtype))
        for k, s in specs.items()
    }
    named = {0: torch.export.Dim("batch", min=1, max=4096)}
    named.update({a: torch.export.Dim(f"size_{a}", min=8, max=16384) for a in (1, 2)})
    dims = {k: {a: named[a] for a in axes} for k, axes in unknown.items()} if any(unknown.values()) else None
    if isinstance(spec, dict):
        return sample, None if dims is None else [(dims,)]
    if isinstance(spec, list):
        # `forward(inputs)`: one argument, the tuple of the inputs.
        return tuple(sample.values()), None if dims is None else [(tuple(dims.values()),)]
    return sample[0], None if dims is None else [(dims[0],)]


def _torch_program(model, spec):
    """`torch.export` of the model, the batch axis dynamic when the spec's is None."""
    import torch

    model.eval()
    sample, dims = _torch_sample(spec)
    return torch.export.export(model, (sample,), dynamic_shapes=dims, strict=False), sample, dims


def export_torch(model, path, format, spec, metadata=None):
    """Writes `model` (torch backend) as a `"torch"`, `"openvino"` or `"onnx"` artifact through
    `torch.export`, the dynamic axes of `spec` kept dynamic."""
    import json

    import torch

    program, sample, dims = _torch_program(model, spec)
    if format == "torch":
        extra = {METADATA_FILE: json.dumps(metadata)} if metadata is not None else None
        torch.export.save(program, path, extra_files=extra)
    elif format == "openvino":
        import openvino as ov

        converted = ov.convert_model(program)
        current = [", ".join(port.get_names()) for port in converted.inputs]
        current_dtypes = [port.get_element_type().to_dtype().name for port in converted.inputs]
        names = port_names(current, input_names(spec), current_dtypes, input_dtypes(spec))
        for port, name in zip(converted.inputs, names):
            port.get_node().set_friendly_name(name)
            port.get_tensor().set_names({name})
        ov.save_model(converted, path, compress_to_fp16=False)
    else:
        _onnx_torch(program, path, input_names(spec))


def _onnx_torch(program, path, names):
    """Dynamo ONNX export of the `torch.export` program, its dynamic axes
    kept (Keras' TorchScript fallback fails in LayerNormalization on a
    dynamic shape). Given the program, the exporter does not trace the model
    a second time."""
    import torch

    onnx_program = torch.onnx.export(program, dynamo=True, input_names=names, verbose=False)
    onnx_program.save(path)
