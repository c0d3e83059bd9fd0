"""examples/segment.py: the data it makes, its mean IoU, a --smoke run, the pretrained backbone."""

import importlib.util

import numpy as np
import pytest

from tests.conftest import DEIT_NPZ, ROOT, requires_shared, to_numpy

pytest.importorskip("sklearn", reason="the example's digits come from scikit-learn")


def _load():
    spec = importlib.util.spec_from_file_location("segment_example", ROOT / "examples" / "segment.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_flag_is_documented():
    parser = _load().build_parser()
    for action in parser._actions:
        assert action.help, action.option_strings


def test_masks_label_the_pasted_digits():
    example = _load()
    glyphs = np.zeros((2, 8, 8))
    glyphs[:, 2:6, 2:6] = 16  # a solid square inside each 8x8 glyph
    rng = np.random.default_rng(0)
    images, masks = example.make_data(rng, 6, 40, glyphs, np.array([2, 3]))
    assert images.shape == (6, 40, 40, 3) and masks.shape == (6, 40, 40)
    assert images.min() >= 0 and images.max() <= 255
    # Labels are background or the classes of the digits 2 and 3 (3 and 4).
    assert set(np.unique(masks)) <= {0, 3, 4} and (masks > 0).any()
    # Every image has a digit and keeps some background.
    for mask in masks:
        assert (mask > 0).any() and (mask == 0).any()


def test_mean_iou_equals_sklearn(rng):
    from sklearn.metrics import jaccard_score

    example = _load()
    masks = rng.integers(0, 4, size=(3, 10, 10))
    predictions = np.where(rng.random(masks.shape) < 0.7, masks, rng.integers(0, 4, masks.shape))
    miou, per_class = example.mean_iou(example.confusion(predictions, masks, 5))  # class 4 absent
    reference = jaccard_score(masks.ravel(), predictions.ravel(), average=None, labels=[0, 1, 2, 3])
    np.testing.assert_allclose(per_class[:4], reference)
    assert per_class[4] == 0
    np.testing.assert_allclose(miou, reference.mean())  # the absent class is left out


def test_smoke_run(tmp_path):
    example = _load()
    out = tmp_path / "results.json"
    results = example.main(["--smoke", "--output", str(out)])
    assert out.exists()
    run = results["runs"]["scratch"]
    assert 0 <= run["mean_iou"] <= 1 and np.isfinite(run["final_loss"])
    assert 0 < results["baseline_mean_iou"] < 1 and results["majority_class"] == 0


@requires_shared
def test_pretrained_backbone_loads_the_deit_weights():
    example = _load()
    args = example.build_parser().parse_args(["--image-size", "32", "--channels", "4"])
    model = example.build_model(args, pretrained=True, classes=5)
    assert tuple(model.output.shape) == (None, 32, 32, 5)
    kernel = np.load(DEIT_NPZ)["embedding/kernel"]
    backbone = model.get_layer("vitti16_features")
    np.testing.assert_array_equal(to_numpy(backbone.get_layer("embedding").kernel), kernel)
