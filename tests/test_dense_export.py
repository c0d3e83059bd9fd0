"""The dense task models through `model.export`: the artifact's outputs
named as `predict`'s dict keys and equal to them within 1e-4 in the
format's own runtime. The pipeline's formats are tested on every backend
with image models in test_export.py (and a dict's outputs with SAM's
decoder in test_task_export.py); here a segmenter in one format per
backend, each a path of its own for named outputs (OpenVINO from a
TensorFlow graph that keeps shape slices as outputs, LiteRT's signature
runner, torch.export's dict), and a depth model in another format per
backend (SavedModel, ONNX, OpenVINO), so that each format carries a dense
model's named outputs on some backend."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import export
from keras_vit.export import serving
from keras_vit.export.pipeline import _exporter_modules
from conftest import per_backend

BACKEND = keras.backend.backend()
SEGMENTER_FORMAT = per_backend(jax="openvino", tensorflow="litert", torch="torch")
DEPTH_FORMAT = per_backend(jax="tf_saved_model", tensorflow="onnx", torch="openvino")


def _encoder():
    return keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
                         include_top=False, layer_scale_init=0.5, num_register_tokens=1)


def _images():
    return np.random.default_rng(0).normal(size=(3, 32, 32, 3)).astype("float32")


def _runtime_ready(format):
    try:
        export.require(_exporter_modules(BACKEND, format, None), format)
        serving.require(serving.RUNTIMES[format], format)
    except ImportError as error:
        pytest.skip(f"{format}: {error}")


@pytest.mark.parametrize("format", [SEGMENTER_FORMAT])
def test_segmenter_exports_its_named_outputs(format, tmp_path):
    """EoMT with masked attention (the random model's), two named outputs."""
    _runtime_ready(format)
    model = keras_vit.Segmenter(_encoder(), classes=3, num_queries=4, num_blocks=1)
    path = str(tmp_path / ("model" + export.SUFFIXES[format]))
    model.export(path, format=format)
    difference, outputs, expected = serving.verify_export(path, format, model, _images())
    assert sorted(outputs) == ["class_queries_logits", "masks_queries_logits"]
    assert difference <= 1e-4
    if format == "onnx":
        import onnx

        names = [o.name for o in onnx.load(path).graph.output]
        assert sorted(names) == ["class_queries_logits", "masks_queries_logits"]


@pytest.mark.parametrize("format", [DEPTH_FORMAT])
def test_depth_estimator_exports(format, tmp_path):
    _runtime_ready(format)
    model = keras_vit.DepthEstimator(_encoder(), (0, 1), (8, 16), (2, 0.5), fusion_size=8, head_size=4)
    path = str(tmp_path / ("depth" + export.SUFFIXES[format]))
    model.export(path, format=format)
    difference, outputs, _ = serving.verify_export(path, format, model, _images())
    assert sorted(outputs) == ["predicted_depth"]
    assert difference <= 1e-4 and outputs["predicted_depth"].shape == (3, 32, 32)
    if format == "onnx":
        import onnx

        assert [o.name for o in onnx.load(path).graph.output] == ["predicted_depth"]
