"""The depth and segmentation guide run as written, in order, as a reader
pastes it: tiny random transformers checkpoints loaded with `from_preset`,
`estimate_depth` and `segment`, fine-tuning from a folder, the metrics, a
sliding window and an ONNX export; beyond what it prints, its results are
checked against the task functions and `predict`, and the reader's folder
is left as it was. The pictures it shows are the examples' own."""

import os

import numpy as np
import pytest

import keras_vit
from conftest import runs_once
from docs_blocks import DOCS, python_blocks, run_blocks, workspace

pytest.importorskip("transformers")
pytest.importorskip("torch")
pytest.importorskip("skimage.data")
GUIDE = DOCS / "guides" / "depth_and_segmentation.md"
# The guide is run once, in the torch job, where its fits and its ONNX export
# are quickest (about a third of jax's and tensorflow's time here); every
# call it makes is tested on each backend in tests/test_dense_*.py.
pytestmark = runs_once("torch", "a guide's calls are tested on every backend by the library's tests")


def test_depth_and_segmentation_guide_runs(tmp_path):
    pytest.importorskip("onnxruntime")
    blocks = [b for b in python_blocks(GUIDE) if not b.skip]
    assert blocks and all(b.run_by == "tests/test_dense_guide.py::test_depth_and_segmentation_guide_runs"
                          for b in blocks)
    run = workspace(tmp_path)
    printed, names = run_blocks(blocks, run, GUIDE.name)
    lines = printed.strip().splitlines()
    assert lines[:4] == ["relative keep_aspect", "['predicted_depth'] (1, 56, 84)", "(300, 451) uint8",
                         "eomt ('sky', 'tree', 'road')"], printed
    assert lines[4:7] == ["(1, 5, 4) (1, 5, 16, 16)", "(300, 451) True", "True True"], printed
    assert lines[7:] == ["(8, 28, 28, 3) 3.0 ['abs_rel', 'delta1', 'loss']", "('semantic', 'panoptic', 'instance')",
                         "True", "abs_rel 0.175", "delta1 0.5",
                         "(96, 160, 3) (96, 160)", "['class_queries_logits', 'masks_queries_logits'] True"], printed
    assert list(run.iterdir()) == []  # everything went into the page's temporary folder
    # The one-call results are the model's own on the prepared pixels.
    depth, photo = names["depth"], names["photo"]
    np.testing.assert_allclose(names["result"]["predicted_depth"],
                               keras_vit.estimate_depth(depth, photo)[0]["predicted_depth"], atol=1e-5)
    assert names["semantic"]["segmentation"].max() < 3
    # The fine-tuned segmenter has the folder's classes (its evaluated mean IoU is
    # the metric's on predict, the "True" above).
    assert names["model"].class_names == ("red", "green", "blue") and names["model"].classes == 3
    assert 0 <= names["mean_iou"] <= 1 and names["labels"].shape == (8, 32, 32)
    assert names["segments"].shape == (8, 32, 32, 2) and names["segments"][..., 1].max() < 255
    assert os.path.isfile(names["path"]) and names["path"].startswith(names["folder"])


def test_the_pictures_shown_are_small_files():
    text = GUIDE.read_text(encoding="utf-8")
    for name in ("segment_example.png", "depth_example.png"):
        assert f"../images/{name}" in text
        path = DOCS / "images" / name
        assert path.is_file() and path.stat().st_size < 200_000, name
