"""The task models as serving artifacts (`model.export`): SAM's prompt
decoder, its image embedder and an OWLv2 detector of fixed queries in one
format per backend (each format on some backend), and the detection and promptable masks guide run
as written (an OWLv2 detector of fixed queries, and SAM served as it is
meant to be, the image embedder once per image and the decoder per click,
against `predict` and `keras_vit.segment_prompts`)."""

import functools
import pathlib

import keras
import numpy as np
import pytest

import keras_vit
from conftest import runs_once
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit import export
from sam_dirs import sam_dir

pytest.importorskip("torch")
pytest.importorskip("skimage.data")
BACKEND = keras.backend.backend()
RNG = np.random.default_rng(0)


# Besides the guide's ONNX from jax, each task model through one more route,
# the three models spread over the backends (each backend exports one): the
# routes are tested on every backend with image models in test_export.py;
# these check each task model's inputs and outputs through an exporter.
ROUTES = "each export route is held on every backend by test_export.py; this checks the task model's inputs and outputs"


@functools.lru_cache(maxsize=None)
def _sam():
    return keras_vit.from_preset(sam_dir()[0])


@runs_once("torch", ROUTES)
@pytest.mark.parametrize("format", ["onnx"])
def test_sam_image_embedder_exports(format, tmp_path):
    embedder = _sam().image_embedder
    path = embedder.export(str(tmp_path / f"embedder{export.SUFFIXES[format]}"), format=format)
    images = RNG.normal(size=(2,) + tuple(embedder.input_shape[1:])).astype("float32")
    diff, outputs, expected = export.verify_export(path, format, embedder, images)
    assert np.shape(outputs) == np.shape(expected) and diff <= 1e-4, diff


@runs_once("tensorflow", ROUTES)
@pytest.mark.parametrize("format", ["openvino"])
def test_fixed_query_detector_exports(format, tmp_path):
    from detection_dirs import IMAGE_SIZE, detection_dir

    detector = keras_vit.from_preset(detection_dir("owlv2")[0]).with_queries(["a cat", "a remote"])
    path = detector.export(str(tmp_path / f"detector{export.SUFFIXES[format]}"), format=format)
    images = RNG.normal(size=(2, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
    diff, outputs, _ = export.verify_export(path, format, detector, images)
    assert sorted(outputs) == sorted(detector.predict(images, verbose=0)) and diff <= 1e-4, diff


# ONNX: the guide's serving code (below).
@runs_once("jax", ROUTES)
@pytest.mark.parametrize("format", ["tf_saved_model"])
def test_sam_prompt_decoder_exports(format, tmp_path):
    decoder = _sam().prompt_decoder.with_points(3)
    path = decoder.export(str(tmp_path / f"decoder{export.SUFFIXES[format]}"), format=format)
    inputs = _sam().decoder_inputs(RNG.normal(size=(2, 8, 8, 16)), RNG.uniform(0, 64, size=(2, 3, 2)),
                                   [[1, 0, -1], [1, 2, 3]], mask_input=RNG.normal(size=(2, 32, 32)))
    diff, outputs, _ = export.verify_export(path, format, decoder, inputs)
    assert sorted(outputs) == ["iou_scores", "pred_masks"] and diff <= 1e-4, diff


# The guide is run once, in the jax job (its slowest part, the ONNX exports,
# takes minutes on tensorflow and torch); each backend's ONNX export of these
# layers is the pipeline's, tested with image models in test_export.py, and
# the decoder's own inputs and outputs per backend above.
@runs_once("jax", "a guide's calls are tested on every backend by the library's tests")
def test_detection_and_masks_guide_runs(tmp_path):
    """The guide's code, in order, as a reader pastes it: a detector of
    fixed queries served from ONNX Runtime, and SAM served as two ONNX
    artifacts, the image embedder once and the decoder per click; the
    served masks are `segment_prompts`'."""
    pytest.importorskip("onnxruntime")
    from docs_blocks import DOCS, python_blocks, run_blocks, workspace

    blocks = [b for b in python_blocks(DOCS / "guides" / "detection_and_masks.md") if not b.skip]
    run = workspace(tmp_path)
    printed, names = run_blocks(blocks, run, "detection_and_masks.md")
    assert not list(run.iterdir())  # the reader's folder is left as it was
    assert {p.name for p in pathlib.Path(names["folder"]).iterdir()} >= {"owlv2_fixed.onnx", "sam_decoder.onnx"}
    lines = printed.strip().splitlines()
    assert "True" in lines, printed  # the served detector's logits are predict's
    assert lines[-1] == "(1, 3, 300, 451)", printed
    expected = keras_vit.segment_prompts(names["segmenter"], names["photo"], points=[[120, 80]])
    np.testing.assert_allclose(names["clicked"]["pred_masks"][:, 1:], expected["low_res_masks"], atol=1e-4)
    assert (names["masks"] == expected["masks"]).mean() >= 0.999


@runs_once("torch", "refused before any exporter runs")
def test_decoder_of_any_point_count_is_refused_for_export(tmp_path):
    with pytest.raises(ValueError, match="with_points"):
        _sam().prompt_decoder.export(str(tmp_path / "decoder.onnx"), format="onnx")
