"""examples/depth.py: its flags, the scenes it makes (depth up the image,
objects smaller with distance), the folder it writes and reads back, its
errors against the Keras metrics, a --smoke run's JSON, picture and preset,
and the pretrained encoder it starts from."""

import importlib.util
import json
import os

import numpy as np
import pytest

from tests.conftest import DEIT_NPZ, ROOT, requires_shared, runs_once, to_numpy

Image = pytest.importorskip("PIL.Image")


# The smoke run (a module fixture) and the tests reading it run in one job.
EXAMPLE_RUN = ("the example's fit, evaluate, predict and saved preset are a DepthEstimator's, "
               "trained on every backend by test_dense_training")


def _load():
    spec = importlib.util.spec_from_file_location("depth_example", ROOT / "examples" / "depth.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example():
    return _load()


@pytest.fixture(scope="module")
def smoke(example, tmp_path_factory):
    out = tmp_path_factory.mktemp("depth_smoke")
    return example.main(["--smoke", "--out", str(out)]), out


def test_every_flag_is_documented(example):
    parser = example.build_parser()
    flags = {s for action in parser._actions for s in action.option_strings}
    assert {"--data", "--test-data", "--preset", "--weights", "--depth-scale", "--max-depth", "--out",
            "--smoke"} <= flags
    for action in parser._actions:
        assert action.help, action.option_strings
    assert parser.parse_args([]).weights.endswith("deit_tiny_patch16_224.npz")


def test_bad_flags_are_named_before_any_work(example):
    with pytest.raises(SystemExit, match="--max-depth must be positive"):
        example.main(["--smoke", "--max-depth", "-1"])
    with pytest.raises(SystemExit, match="--steps must be at least 1"):
        example.main(["--smoke", "--steps", "0"])


def test_scenes_carry_their_depth(example):
    """The ground's depth grows up the image and the back wall is farthest; an
    object stands where the ground has its depth, and is smaller farther away."""
    rng = np.random.default_rng(0)
    image, depth = example.make_scene(rng, 64)
    assert image.shape == (64, 64, 3) and depth.shape == (64, 64)
    assert image.min() >= 0 and image.max() <= 255 and depth.min() > 1.0 and depth.max() == example.FAR
    empty, ground, camera = example._ground_and_wall(np.random.default_rng(3), 64)
    focal, height, horizon = camera
    column = ground[:, 5]
    assert np.all(np.diff(column) <= 0) and column[0] == example.FAR  # nearer lower down
    row = int(horizon) + 20
    np.testing.assert_allclose(column[row], focal * height / (row + 0.5 - horizon), rtol=1e-5)
    areas = {3.0: [], 6.0: []}
    for seed in range(12):
        for distance in areas:
            _, pasted, inside = example.paste_object(np.random.default_rng(seed), empty, ground, distance, camera)
            assert np.all(pasted[inside] == distance)
            areas[distance].append(inside.sum())
            if inside.any() and np.nonzero(inside)[0].max() < 63:
                # Its lowest row touches the ground at its own depth (within a row).
                bottom = np.nonzero(inside)[0].max()
                assert ground[bottom + 1, 0] <= distance <= ground[bottom - 1, 0]
    # Twice as far, a quarter of the pixels (fewer where the near one leaves the picture).
    assert np.median(areas[3.0]) > 2.5 * np.median(areas[6.0]) > 0


def _reader_model(size=32):
    """What the folder readers read of a model (its input size, patch and
    scaling), without building one: building is what the smoke run tests."""
    import types

    return types.SimpleNamespace(image_size=(size, size), effective_patch_size=(8, 8), preprocessing=None)


def test_written_folder_reads_back(example, tmp_path):
    """The 16-bit PNGs hold the depths to the millimetre."""
    from keras_vit.tasks.dense_data import load_depth_folder

    rng = np.random.default_rng(2)
    scenes = [example.make_scene(rng, 32) for _ in range(3)]
    folder = str(tmp_path / "data")
    example.write_folder(folder, scenes)
    with Image.open(os.path.join(folder, "depth", "0002.png")) as depth:
        assert depth.mode.startswith("I;16") or depth.mode == "I"
    x, y = load_depth_folder(folder, _reader_model())
    np.testing.assert_allclose(y, np.stack([d for _, d in scenes]), atol=5e-4)
    assert x.shape == (3, 32, 32, 3)


def test_depth_errors_equal_the_keras_metrics(example, rng):
    from keras_vit.tasks.dense_training import AbsRel, Delta1

    true = rng.uniform(1, 10, (2, 8, 9)).astype("float32")
    true[0, :3] = 0  # no depth there
    pred = (true * rng.uniform(0.7, 1.4, true.shape)).astype("float32")
    errors = example.depth_errors(pred, true)
    for metric, key in ((AbsRel(), "abs_rel"), (Delta1(), "delta1")):
        metric.update_state(true, pred)
        np.testing.assert_allclose(errors[key], float(metric.result()), rtol=1e-5)
    assert 0 < errors["delta1"] < 1


@runs_once("torch", EXAMPLE_RUN)
def test_smoke_run_writes_results_picture_and_preset(smoke):
    import keras_vit

    results, out = smoke
    with open(out / "results.json") as handle:
        assert json.load(handle) == json.loads(json.dumps(results))
    assert results["synthetic"] and results["images"] == {"train": 8, "test": 4}
    # The default largest depth: 1.25 times the farthest training depth (the wall).
    assert results["max_depth"] == pytest.approx(1.25 * 12.0, abs=0.01)
    base, run = results["baseline"], results["model"]
    assert 1.5 < base["median_depth"] <= 12 and base["abs_rel"] > 0 and 0 <= base["delta1"] < 1
    assert run["abs_rel"] > 0 and 0 <= run["delta1"] <= 1 and np.isfinite(run["final_loss"]) and run["steps"] == 2
    model = keras_vit.from_preset(run["preset"])
    assert isinstance(model, keras_vit.DepthEstimator) and model.depth == "metric"
    assert model.max_depth == results["max_depth"] and model.feature_blocks == (0, 1, 2, 3)
    assert model.neck.neck_channels == (2, 4, 8, 16)  # an eighth, a quarter, half and all of the width
    (path,) = results["pictures"]
    with Image.open(path) as picture:
        # Two held-out photos of 160 rows under a header; three columns and the scale.
        assert picture.size[1] == 16 + 2 * (160 + 4) and picture.size[0] > 3 * 160 + 40


@runs_once("torch", EXAMPLE_RUN)
def test_data_flag_holds_out_a_split_of_the_folder(example, smoke):
    from keras_vit.tasks.dense_data import read_depth

    _, out = smoke
    folder = str(out / "data" / "train")
    args = example.build_parser().parse_args(["--data", folder, "--validation-split", "0.25"])
    train, test, paths, depth_paths = example.load_data(args, _reader_model())
    assert len(train[0]) == 6 and len(test[0]) == 2 and len(paths) == 2
    for depth, depth_path in zip(test[1], depth_paths):
        np.testing.assert_allclose(depth, read_depth(depth_path, 1e-3))
    assert example.largest_depth(args) == pytest.approx(example.FAR)


@runs_once("torch", EXAMPLE_RUN)
def test_preset_flag_takes_a_depth_model(example, smoke, tmp_path):
    """--preset of a depth model fine-tunes that model whole, its own depth
    range kept; a preset of another task is refused by name."""
    import keras_vit

    results, _ = smoke
    args = example.build_parser().parse_args(["--preset", results["model"]["preset"], "--image-size", "32"])
    model = example.build_model(args, max_depth=99.0)
    assert isinstance(model, keras_vit.DepthEstimator) and model.max_depth == results["max_depth"]
    assert model.preprocessing.size == (32, 32)
    segmenter = tmp_path / "segmenter"
    segmenter.mkdir()
    (segmenter / "config.json").write_text(json.dumps({"registered_name": "keras_vit>Segmenter",
                                                       "class_name": "Segmenter"}))
    args = example.build_parser().parse_args(["--preset", str(segmenter)])
    with pytest.raises(SystemExit, match="holds a Segmenter: this example takes an image model or a DepthEstimator"):
        example.build_model(args, max_depth=15.0)


def test_feature_blocks_are_depth_anything_s():
    example = _load()
    assert example.feature_blocks(12) == (2, 5, 8, 11) and example.feature_blocks(24) == (5, 11, 17, 23)
    assert example.feature_blocks(4) == (0, 1, 2, 3)


@requires_shared
def test_pretrained_encoder_holds_the_deit_weights(example):
    args = example.build_parser().parse_args(["--image-size", "32"])
    encoder = example.common.encoder_or_task(args, "DepthEstimator")  # what build_model wraps
    kernel = np.load(DEIT_NPZ)["embedding/kernel"]
    np.testing.assert_array_equal(to_numpy(encoder.get_layer("embedding").kernel), kernel)
    assert encoder.mlp_activation == "gelu" and example.feature_blocks(encoder.num_layers) == (2, 5, 8, 11)
    assert example.common.processing(encoder, 32).mean == pytest.approx((0.485, 0.456, 0.406))
