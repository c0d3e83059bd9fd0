"""examples/segment.py: its flags, the data it makes, the folder it writes and
reads back, its mean IoU, a --smoke run's JSON, pictures and presets, and the
pretrained encoder it starts from."""

import importlib.util
import json
import os

import numpy as np
import pytest

from tests.conftest import DEIT_NPZ, ROOT, requires_shared, runs_once, to_numpy

pytest.importorskip("sklearn", reason="the example's digits come from scikit-learn")
Image = pytest.importorskip("PIL.Image")


# The smoke run (a module fixture) and the tests reading it run in one job.
EXAMPLE_RUN = ("the example's fit, evaluate, predict and saved presets are a Segmenter's, "
               "trained on every backend by test_dense_training")


def _load():
    spec = importlib.util.spec_from_file_location("segment_example", ROOT / "examples" / "segment.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example():
    return _load()


@pytest.fixture(scope="module")
def smoke(example, tmp_path_factory):
    """One --smoke run of both heads, shared by the tests that read what it wrote."""
    out = tmp_path_factory.mktemp("segment_smoke")
    return example.main(["--smoke", "--out", str(out)]), out


def test_every_flag_is_documented(example):
    parser = example.build_parser()
    flags = {s for action in parser._actions for s in action.option_strings}
    assert {"--data", "--test-data", "--head", "--task", "--num-points", "--preset", "--weights", "--out",
            "--smoke"} <= flags
    for action in parser._actions:
        assert action.help, action.option_strings
    assert parser.parse_args([]).head == "both" and parser.parse_args([]).weights.endswith("deit_tiny_patch16_224.npz")


def test_bad_flags_are_named_before_any_work(example):
    parser = example.build_parser()
    with pytest.raises(SystemExit, match="--test-data needs --data"):
        example.common.check_arguments(parser.parse_args(["--test-data", "somewhere"]))
    with pytest.raises(SystemExit, match="--weights 'missing.npz' does not exist"):
        example.common.check_arguments(parser.parse_args(["--weights", "missing.npz"]))
    with pytest.raises(SystemExit, match="--validation-split must be in"):
        example.common.check_arguments(parser.parse_args(["--validation-split", "1.5", "--smoke"]))
    with pytest.raises(SystemExit, match="--task instance trains EoMT's queries: --head linear"):
        example.check_arguments(parser.parse_args(["--task", "instance", "--head", "linear"]))


def test_masks_label_the_pasted_digits(example):
    glyphs = np.zeros((2, 8, 8))
    glyphs[:, 2:6, 2:6] = 16  # a solid square inside each 8x8 glyph
    rng = np.random.default_rng(0)
    images, masks, instances = example.make_data(rng, 6, 40, glyphs, np.array([2, 3]))
    assert images.shape == (6, 40, 40, 3) and masks.shape == (6, 40, 40) == instances.shape
    assert images.min() >= 0 and images.max() <= 255
    # Labels are background or the classes of the digits 2 and 3 (3 and 4).
    assert set(np.unique(masks)) <= {0, 3, 4} and (masks > 0).any()
    for mask, ids in zip(masks, instances):
        assert (mask > 0).any() and (mask == 0).any()
        np.testing.assert_array_equal(ids > 0, mask > 0)  # each digit an instance, the background none
        for number in np.unique(ids[ids > 0]):
            assert len(np.unique(mask[ids == number])) == 1  # one class per instance


def test_mean_iou_equals_sklearn(example, rng):
    from sklearn.metrics import jaccard_score

    masks = rng.integers(0, 4, size=(3, 10, 10))
    predictions = np.where(rng.random(masks.shape) < 0.7, masks, rng.integers(0, 4, masks.shape))
    miou, per_class = example.mean_iou(example.confusion(predictions, masks, 5))  # class 4 absent
    reference = jaccard_score(masks.ravel(), predictions.ravel(), average=None, labels=[0, 1, 2, 3])
    np.testing.assert_allclose(per_class[:4], reference)
    assert per_class[4] == 0
    np.testing.assert_allclose(miou, reference.mean())  # the absent class is left out
    # Unlabelled pixels (255) count for nothing.
    masks[0] = 255
    kept = masks[1:].ravel()
    reference = jaccard_score(kept, predictions[1:].ravel(), average=None, labels=[0, 1, 2, 3])
    np.testing.assert_allclose(example.mean_iou(example.confusion(predictions, masks, 5))[1][:4], reference)


def _reader_model(classes=5, size=32):
    """What the folder readers read of a model (its classes, input size, patch
    and scaling), without building one: building is what the smoke run tests."""
    import types

    return types.SimpleNamespace(classes=classes, image_size=(size, size), effective_patch_size=(8, 8),
                                 preprocessing=None)


def test_written_folder_reads_back(example, tmp_path):
    """The palette PNGs hold the class indices exactly; the photos are the
    generated ones (rounded to bytes), scaled as the model expects."""
    from keras_vit.tasks.dense_data import load_segmentation_folder
    from keras_vit.tasks.instance_data import load_instance_folder

    glyphs = np.zeros((2, 8, 8))
    glyphs[:, 1:7, 2:6] = 16
    images, masks, instances = example.make_data(np.random.default_rng(1), 3, 32, glyphs, np.array([0, 3]))
    folder = str(tmp_path / "data")
    example.write_folder(folder, images, masks, instances, stuff=True)
    with Image.open(os.path.join(folder, "masks", "0001.png")) as mask:
        assert mask.mode == "P"
    x, y = load_segmentation_folder(folder, _reader_model())
    np.testing.assert_array_equal(y, masks)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    np.testing.assert_allclose(x, (np.round(images) / 255 - mean) / std, atol=1e-5)
    # The instances/ layout of the same folder: the background is one segment (stuff), each digit one.
    _, labels = load_instance_folder(folder, _reader_model())
    np.testing.assert_array_equal(labels[..., 0], masks)
    for ids, segments in zip(instances, labels[..., 1]):
        assert len(np.unique(segments)) == len(np.unique(ids))
        np.testing.assert_array_equal(segments == 0, ids == 0)


def test_synthetic_folder_replaces_only_its_own(example, tmp_path):
    folder = example.common.synthetic_folder(str(tmp_path), "train", "test data")
    open(os.path.join(folder, "stale.png"), "w").close()
    again = example.common.synthetic_folder(str(tmp_path), "train", "test data")
    assert again == folder and sorted(os.listdir(folder)) == [example.common.MARKER]
    os.makedirs(tmp_path / "mine")
    with pytest.raises(SystemExit, match="was not written by this example"):
        example.common.synthetic_folder(str(tmp_path), "mine", "test data")


@runs_once("torch", EXAMPLE_RUN)
def test_smoke_run_writes_results_pictures_and_presets(smoke):
    import keras_vit

    results, out = smoke
    with open(out / "results.json") as handle:
        assert json.load(handle) == json.loads(json.dumps(results))
    assert results["synthetic"] and results["classes"] == 5 and results["class_names"][0] == "background"
    assert results["images"] == {"train": 8, "test": 4}
    assert 0 < results["baseline"]["mean_iou"] < 1 and results["baseline"]["majority_class"] == 0
    assert sorted(results["heads"]) == ["eomt", "linear"]
    for head, run in results["heads"].items():
        assert 0 <= run["mean_iou"] <= 1 and np.isfinite(run["final_loss"]) and run["steps"] == 2
        model = keras_vit.from_preset(run["preset"])
        assert isinstance(model, keras_vit.Segmenter) and model.head == head
        assert model.class_names == tuple(results["class_names"])
        assert model.encoder.trainable == (head == "eomt")  # the linear protocol's encoder is frozen
        if head == "eomt":  # trained on class maps: it says so when asked for segments
            assert model.trained_tasks == ("semantic",)
    (path,) = results["pictures"]
    with Image.open(path) as picture:
        # Two held-out photos of 160 rows under a header; four columns and the legend.
        assert picture.size[1] == 16 + 2 * (160 + 4) and picture.size[0] > 4 * 160
        assert len(np.unique(np.asarray(picture).reshape(-1, 3), axis=0)) > 50


@runs_once("torch", EXAMPLE_RUN)
def test_data_flag_holds_out_a_split_of_the_folder(example, smoke):
    """--data without --test-data: a fixed fifth held out, each held-out photo
    paired with its own mask."""
    from keras_vit.tasks.dense_data import read_mask

    _, out = smoke
    folder = str(out / "data" / "train")
    args = example.build_parser().parse_args(["--data", folder, "--validation-split", "0.25"])
    train, test, paths, truth = example.load_data(args, _reader_model())
    assert len(train[0]) == 6 and len(test[0]) == 2 and len(paths) == 2 == len(truth)
    for labels, true, path in zip(test[1], truth, paths):
        mask = read_mask(os.path.join(folder, "masks", os.path.basename(path)))
        np.testing.assert_array_equal(labels, mask)
        np.testing.assert_array_equal(true, mask)
    # Without --class-names: unnamed classes, as many as the largest index in the masks says.
    largest = max(int(read_mask(os.path.join(folder, "masks", n)).max()) for n in os.listdir(os.path.join(folder, "masks")))
    assert example.class_names(args, [folder], synthetic=False) == (None, largest + 1)


@runs_once("torch", EXAMPLE_RUN)
def test_preset_flag_takes_an_image_model_or_a_segmenter(example, smoke, tmp_path):
    """--preset: an EoMT preset keeps its head with a new class predictor (or
    lends its encoder to a linear head); an image model gets the head; a
    preset of another task is refused by name."""
    import keras_vit

    results, _ = smoke
    eomt_preset = results["heads"]["eomt"]["preset"]
    args = example.build_parser().parse_args(["--preset", eomt_preset, "--image-size", "32"])
    source = keras_vit.from_preset(eomt_preset)
    model = example.build_model(args, "eomt", 3, ("sky", "tree", "road"))
    assert model.head == "eomt" and model.classes == 3 and model.class_names == ("sky", "tree", "road")
    np.testing.assert_array_equal(to_numpy(model.encoder.get_layer("embedding").kernel),
                                  to_numpy(source.encoder.get_layer("embedding").kernel))
    linear = example.build_model(args, "linear", 3, None)
    assert linear.head == "linear" and not linear.encoder.trainable
    vit = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=8, classes=4)
    vit.save_to_preset(str(tmp_path / "vit"))
    args = example.build_parser().parse_args(["--preset", str(tmp_path / "vit"), "--image-size", "32"])
    model = example.build_model(args, "linear", 3, None)
    assert not model.encoder.include_top and model.preprocessing.size == (32, 32)
    (tmp_path / "depth").mkdir()
    (tmp_path / "depth" / "config.json").write_text(json.dumps({"registered_name": "keras_vit>DepthEstimator",
                                                               "class_name": "DepthEstimator"}))
    args = example.build_parser().parse_args(["--preset", str(tmp_path / "depth")])
    with pytest.raises(SystemExit, match="holds a DepthEstimator: this example takes an image model or a Segmenter"):
        example.build_model(args, "eomt", 3, None)


@requires_shared
def test_pretrained_encoder_holds_the_deit_weights(example):
    args = example.build_parser().parse_args(["--image-size", "32"])
    kernel = np.load(DEIT_NPZ)["embedding/kernel"]
    encoder = example.common.encoder_or_task(args, "Segmenter")  # what build_model wraps
    np.testing.assert_array_equal(to_numpy(encoder.get_layer("embedding").kernel), kernel)
    assert encoder.mlp_activation == "gelu" and encoder.num_layers == 12  # DeiT-Tiny, its exact GELU
    assert encoder.image_size == (32, 32) and not encoder.include_top
    record = example.common.processing(encoder, 32)
    assert record.mean == pytest.approx((0.485, 0.456, 0.406)) and record.std == pytest.approx((0.229, 0.224, 0.225))


def test_panoptic_quality_counts_matches_and_misses(example):
    truth = np.full((4, 4, 2), 255)
    truth[:, :2] = (1, 0)  # a segment of class 1 on the left
    truth[:2, 2:] = (2, 1)  # one of class 2, top right; the rest unlabelled
    segmentation = np.full((4, 4), -1)
    segmentation[:, :2] = 5
    segmentation[:, 3] = 6  # class 2, IoU 2/6 with the true one: no match
    found = [{"segmentation": segmentation, "segments": [{"id": 5, "label_id": 1}, {"id": 6, "label_id": 2}]}]
    pq, per_class = example.panoptic_quality([truth], found, 3)
    # Class 1: one match of IoU 1. Class 2: a miss on each side, 0 / (0 + 1).
    assert per_class == [None, 1.0, 0.0] and pq == 0.5
    assert example.panoptic_quality([truth], [{"segmentation": np.full((4, 4), -1), "segments": []}], 3)[0] == 0.0


@runs_once("torch", EXAMPLE_RUN)
def test_panoptic_smoke_run_trains_on_instances(example, tmp_path):
    """--task panoptic: the synthetic folder's instances/, EoMT alone, its
    held-out panoptic quality, and a preset that says it learnt all three tasks."""
    import keras_vit

    results = example.main(["--smoke", "--task", "panoptic", "--out", str(tmp_path), "--pictures", "0"])
    assert results["task"] == "panoptic" and sorted(results["heads"]) == ["eomt"]
    run = results["heads"]["eomt"]
    assert 0 <= run["pq"] <= 1 and len(run["per_class_pq"]) == 5 and np.isfinite(run["final_loss"])
    assert sorted(os.listdir(tmp_path / "data" / "train" / "instances"))[:2] == ["0000.json", "0000.png"]
    assert keras_vit.from_preset(run["preset"]).trained_tasks == ("semantic", "panoptic", "instance")
