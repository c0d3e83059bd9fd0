"""The task models under torch.compile (`jit_compile=True` on torch):
`predict` is one graph and gives what it gives run eagerly. A graph break
at each layer call, Keras operation object made per call or host array
once ran most of a depth model eagerly, and a layer made per call crashed
the depth models. (On jax and tensorflow `predict` is XLA's by default, as
the parity tests run it.)"""

import functools

import keras
import numpy as np
import pytest

import keras_vit
from dense_dirs import chmv2_config, depth_anything_config, save_random
from detection_dirs import IMAGE_SIZE, detection_dir
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from conftest import runs_once
from mode_matrix import compiled_graphs
from sam_dirs import sam_dir

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def _dense(folder, name):
    configs = {
        # Depth Anything: the DPT neck (its strided downsampling) and the relative head.
        "depth_anything": (depth_anything_config, "DepthAnythingForDepthEstimation", (1, 35, 49, 3), {}),
        # CHMv2: DINOv3's rotary tables and the depth bins.
        "chmv2": (chmv2_config, "CHMv2ForDepthEstimation", (1, 40, 48, 3), {"depth_bias": 5.0}),
    }
    config, hf_class, shape, options = configs[name]
    save_random(getattr(transformers, hf_class), config(transformers), folder, **options)
    return keras_vit.from_preset(str(folder)), _images(shape)


def _images(shape):
    return RNG.uniform(size=shape).astype("float32")


def _part(name, folder):
    """The model `predict` runs, and its inputs."""
    if name == "owlv2":
        detector = keras_vit.from_preset(detection_dir("owlv2")[0])
        queries = RNG.normal(size=(2, detector.heads.query_dim)).astype("float32")
        return detector.with_queries(queries, names=["a", "b"]), _images((1, IMAGE_SIZE, IMAGE_SIZE, 3))
    if name.startswith("sam"):
        model = keras_vit.from_preset(sam_dir()[0])
        images = _images((1, *model.image_embedder.inputs[0].shape[1:]))
        if name == "sam_image_embedder":
            return model.image_embedder, images
        # A click, a box and the padding point on one image's embedding.
        points = np.array([[[10.0, 20.0], [4.0, 6.0], [30.0, 28.0], [0.0, 0.0]]], "float32")
        inputs = model.decoder_inputs(model.image_embedder.predict(images, verbose=0), points,
                                      np.array([[1, 2, 3, -1]], "int32"))
        return model.prompt_decoder, inputs
    return _dense(folder, name)


def _numpy(outputs):
    if isinstance(outputs, dict):
        return {k: keras.ops.convert_to_numpy(v) for k, v in outputs.items()}
    return {"output": keras.ops.convert_to_numpy(outputs)}


@runs_once("torch", "torch.compile is torch's; jax's and tensorflow's predict is XLA's in every test")
@pytest.mark.parametrize("name", ["depth_anything", "chmv2", "owlv2", "sam_image_embedder", "sam_prompt_decoder"])
def test_task_predict_compiles_as_one_graph(name, tmp_path, monkeypatch):
    """torch.compile's capture and AOT autograd, without Inductor's code
    generation (the mode matrix compiles the classifier with it): graphs
    and values as Keras' `torch.compile` call would trace them."""
    model, images = _part(name, tmp_path)
    model.compile(run_eagerly=True)
    eager = _numpy(model.predict(images, verbose=0))
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    model.compile(jit_compile=True)
    with compiled_graphs() as graphs:
        compiled = _numpy(model.predict(images, verbose=0))
    assert set(compiled) == set(eager)
    for key in eager:
        scale = max(1.0, float(np.abs(eager[key]).max()))
        np.testing.assert_allclose(compiled[key], eager[key], rtol=0, atol=1e-4 * scale, err_msg=key)
    assert graphs[0] == 1, graphs[0]
