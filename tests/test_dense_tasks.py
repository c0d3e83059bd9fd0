"""`keras_vit.estimate_depth` and `keras_vit.segment` on real photos
(scikit-image's), against transformers' `depth-estimation` and
`image-segmentation` pipelines and EoMT's image processor, on random
checkpoints made by transformers (the comparison is of the preparation and
post-processing, which do not depend on the weights being trained)."""

import numpy as np
import pytest

import keras_vit
from dense_dirs import chmv2_config, depth_anything_config, eomt_config, save_random
from conftest import runs_once, spread
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.tasks import segmentation_outputs as post
from keras_vit.preprocessing.dense import DenseProcessing, from_transformers, prepare_image, to_transformers

pytestmark = spread("depth and segmentation of real photos over models held on every backend by "
                    "test_dense_parity; each case once")

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
skimage_data = pytest.importorskip("skimage.data")
Image = pytest.importorskip("PIL.Image")

PHOTOS = ("chelsea", "coffee", "astronaut")
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]

DEPTH_PROCESSING = "the processing around predict is NumPy; the outputs are held on every backend by test_dense_parity"


def _photo(name):
    return getattr(skimage_data, name)()


@pytest.fixture(scope="module")
def depth_anything(tmp_path_factory):
    folder = tmp_path_factory.mktemp("depth_anything")
    model = save_random(transformers.DepthAnythingForDepthEstimation, depth_anything_config(transformers), folder)
    processor = transformers.DPTImageProcessorPil(
        size={"height": 56, "width": 56}, keep_aspect_ratio=True, ensure_multiple_of=7, resample=3,
        image_mean=MEAN, image_std=STD,
    )
    processor.save_pretrained(folder)
    return str(folder), transformers.pipeline("depth-estimation", model=model, image_processor=processor)


@pytest.fixture(scope="module")
def eomt(tmp_path_factory):
    """A random EoMT with a padding processor and one with EoMT's semantic split."""
    out = {}
    for split in (False, True):
        folder = tmp_path_factory.mktemp("eomt_split" if split else "eomt")
        model = save_random(transformers.EomtForUniversalSegmentation, eomt_config(transformers), folder,
                            mask_probability=0.0)
        size = {"shortest_edge": 32, "longest_edge": None if split else 32}
        processor = transformers.EomtImageProcessorPil(size=size, do_split_image=split, do_pad=not split)
        processor.save_pretrained(folder)
        out[split] = (str(folder), model, processor)
    return out


@runs_once("torch", DEPTH_PROCESSING)
def test_estimate_depth_matches_the_pipeline(depth_anything):
    folder, pipe = depth_anything
    model = keras_vit.from_preset(folder)
    photos = [_photo(name) for name in PHOTOS]
    results = keras_vit.estimate_depth(model, photos)
    for photo, result in zip(photos, results):
        reference = pipe(Image.fromarray(photo))
        expected = reference["predicted_depth"].numpy()
        assert result["predicted_depth"].shape == photo.shape[:2] == expected.shape
        relative = np.abs(result["predicted_depth"] - expected).max() / np.abs(expected).max()
        assert relative <= 1e-2
        assert np.mean(np.abs(result["depth"].astype(int) - np.asarray(reference["depth"], int)) <= 1) >= 0.99


@runs_once("torch", DEPTH_PROCESSING)
def test_chmv2_depth_is_padded_and_resized_as_its_processor(tmp_path):
    """CHMv2's processor (torchvision-only) centre-pads the scaled pixels to a
    multiple of 16, and its post-processing resizes the prediction to the
    image bilinearly with aligned corners: written out here with NumPy and torch."""
    reference = save_random(transformers.CHMv2ForDepthEstimation, chmv2_config(transformers), tmp_path,
                            depth_bias=5.0)
    mean, std = np.array([0.420, 0.411, 0.296]), np.array([0.213, 0.156, 0.143])
    model = keras_vit.from_preset(str(tmp_path))
    model.preprocessing = DenseProcessing(mean=mean, std=std, resize="none", pad="center", pad_multiple=16)
    photo = np.asarray(Image.fromarray(_photo("coffee")).resize((50, 37)))
    scaled = ((photo / 255.0 - mean) / std).astype("float32")
    top, left = (48 - 37) // 2, (64 - 50) // 2
    padded = np.pad(scaled, ((top, 48 - 37 - top), (left, 64 - 50 - left), (0, 0)))
    with torch.no_grad():
        depth = reference(pixel_values=torch.from_numpy(padded.transpose(2, 0, 1)[None])).predicted_depth
        expected = torch.nn.functional.interpolate(depth[None], size=(37, 50), mode="bilinear",
                                                   align_corners=True)[0, 0].numpy()
    ours = keras_vit.estimate_depth(model, photo)[0]["predicted_depth"]
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("task", ["semantic", "panoptic"])
def test_segment_matches_the_pipeline(eomt, task):
    folder, reference, processor = eomt[False]
    pipe = transformers.pipeline("image-segmentation", model=reference, image_processor=processor)
    model = keras_vit.from_preset(folder)
    assert model.class_names == ("sky", "tree", "road")
    options = {"panoptic": dict(threshold=0.3)}.get(task, {})
    for name in PHOTOS[:2]:
        photo = _photo(name)
        expected = pipe(Image.fromarray(photo), subtask=task, **options)
        ours = keras_vit.segment(model, photo, task=task, **options)[0]
        assert expected, f"{task}: no segment to compare"
        assert [s["label"] for s in ours["segments"]] == [e["label"] for e in expected]
        assert [s["score"] for s in ours["segments"]] == pytest.approx([e["score"] for e in expected], abs=1e-5)
        for segment, item in zip(ours["segments"], expected):
            agree = np.mean((ours["segmentation"] == segment["id"]) == (np.asarray(item["mask"]) > 0))
            assert agree >= 0.99


def test_semantic_split_matches_the_pipeline(eomt):
    folder, reference, processor = eomt[True]
    model = keras_vit.from_preset(folder)
    assert model.preprocessing.split
    photo = _photo("coffee")
    expected = transformers.pipeline("image-segmentation", model=reference, image_processor=processor)(
        Image.fromarray(photo), subtask="semantic")
    ours = keras_vit.segment(model, photo)[0]
    labels = {s["label"]: s["id"] for s in ours["segments"]}
    assert sorted(labels) == sorted(e["label"] for e in expected)
    for item in expected:
        agree = np.mean((ours["segmentation"] == labels[item["label"]]) == (np.asarray(item["mask"]) > 0))
        assert agree >= 0.99


def test_maps_at_the_image_size_are_made_a_few_at_a_time(eomt, monkeypatch):
    """The label maps and segments of every subtask are the same when the
    class and query maps are resized to the image two at a time, and then no
    resize to the image's size takes more than two."""
    folder, _, _ = eomt[False]
    model, photo = keras_vit.from_preset(folder), _photo("chelsea")
    options = {"semantic": {}, "panoptic": dict(threshold=0.3), "instance": dict(threshold=0.2)}
    whole = {task: keras_vit.segment(model, photo, task=task, **kw)[0] for task, kw in options.items()}
    sizes, resize = [], post._resize
    monkeypatch.setattr(post, "_resize", lambda maps, size: sizes.append((len(maps), tuple(size))) or resize(maps, size))
    monkeypatch.setattr(post, "MAP_GROUP_BYTES", 2 * 4 * photo.shape[0] * photo.shape[1])
    for task, kw in options.items():
        grouped = keras_vit.segment(model, photo, task=task, **kw)[0]
        assert grouped["segments"] == whole[task]["segments"] and whole[task]["segments"], task
        np.testing.assert_array_equal(grouped["segmentation"], whole[task]["segmentation"])
    at_image_size = [n for n, size in sizes if size == photo.shape[:2]]
    assert at_image_size and max(at_image_size) == 2 and len(at_image_size) > 3, sizes


def test_post_processing_is_the_processors_on_its_own_pixels(eomt):
    """On the processor's own pixels and transformers' outputs, the label
    maps and segments are the processor's exactly (instance included, which
    the pipeline cannot run for EoMT)."""
    _, reference, processor = eomt[False]
    photo = _photo("chelsea")
    record = from_transformers(processor.to_dict())
    prepared = prepare_image(photo, record)
    inputs = processor(images=[Image.fromarray(photo)], return_tensors="pt")
    np.testing.assert_array_equal(inputs["pixel_values"].numpy().transpose(0, 2, 3, 1), prepared.pixels)
    with torch.no_grad():
        out = reference(pixel_values=inputs["pixel_values"])
    classes, masks = out.class_queries_logits.numpy(), out.masks_queries_logits.numpy()
    sizes = [photo.shape[:2]]
    semantic = processor.post_process_semantic_segmentation(out, target_sizes=sizes)[0].numpy()
    scores = post.semantic_scores(classes, masks, prepared, record)
    np.testing.assert_array_equal(post.semantic(scores, photo.shape[:2])[0], semantic)
    panoptic = dict(threshold=0.3, mask_threshold=0.5, overlap_mask_area_threshold=0.5)
    for task, options in (("panoptic", panoptic), ("panoptic", dict(panoptic, stuff_classes=[0, 1, 2])),
                          ("instance", dict(threshold=0.2))):
        expected = getattr(processor, f"post_process_{task}_segmentation")(out, target_sizes=sizes, **options)[0]
        segmentation, segments = getattr(post, task)(classes, masks, prepared, record, **options)
        np.testing.assert_array_equal(segmentation, expected["segmentation"].numpy())
        assert [(s["id"], s["label_id"]) for s in segments] == [(e["id"], e["label_id"]) for e in expected["segments_info"]]
        assert [s["score"] for s in segments] == pytest.approx([e["score"] for e in expected["segments_info"]], abs=2e-6)
        assert segments, f"{task}: no segment to compare"


def test_processor_files_round_trip():
    for kind, config in (
        ("DPTImageProcessor", dict(size={"height": 518, "width": 518}, keep_aspect_ratio=True, ensure_multiple_of=14)),
        ("EomtImageProcessor", dict(size={"shortest_edge": 512, "longest_edge": None}, do_split_image=True)),
        ("CHMv2ImageProcessor", dict(do_pad=True, size_divisor=16)),
    ):
        record = from_transformers(dict(config, image_processor_type=kind))
        assert from_transformers(to_transformers(record, kind)) == record


def test_unknown_processor_setting_is_named():
    with pytest.raises(ValueError, match="colour_jitter"):
        from_transformers({"image_processor_type": "DPTImageProcessor", "colour_jitter": True})
    with pytest.raises(ValueError, match="ViTImageProcessor"):
        from_transformers({"image_processor_type": "ViTImageProcessor"})
