"""SAM: a `SamModel` made at random by transformers and a `SAMBackbone` by
keras-hub load with `keras_vit.from_preset` and reproduce them (the image
embedding, then masks and IoU scores for clicks, boxes and a mask prompt);
`keras_vit.segment_prompts` reproduces `SamProcessor.post_process_masks`
and `keras_vit.generate_masks` the `mask-generation` pipeline on real photos;
bad prompts are refused by name."""

import functools

import numpy as np
import pytest

import keras_vit
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.tasks import prompt_masks
from sam_dirs import IMAGE_SIZE, keras_hub_sam_dir, sam_dir
from conftest import spread

pytestmark = spread("SAM's parity, prompts and post-processing: its layers are held on every backend by "
                    "their contracts; each case once")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
skimage_data = pytest.importorskip("skimage.data")

RNG = np.random.default_rng(0)
IMAGES = RNG.normal(size=(2, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
CLICKS = RNG.uniform(0, IMAGE_SIZE, size=(2, 3, 2)).astype("float32")
CLICK_LABELS = np.array([[1, 0, 1], [1, 1, 0]])
BOXES = np.array([[5.0, 6.0, 40.0, 50.0], [1.0, 2.0, 30.0, 60.0]], "float32")


@functools.lru_cache(maxsize=None)
def _model():
    return keras_vit.from_preset(sam_dir()[0])


@functools.lru_cache(maxsize=None)
def _reference():
    """transformers' embeddings and outputs for clicks, clicks with a box, and
    a mask prompt (computed once per process)."""
    _, model, _ = sam_dir()
    masks = RNG.normal(size=(2, 1, 4 * 8, 4 * 8)).astype("float32")
    with torch.no_grad():
        embeddings = model.get_image_embeddings(torch.from_numpy(IMAGES.transpose(0, 3, 1, 2)))
        points = torch.from_numpy(CLICKS[:, None])
        labels = torch.from_numpy(CLICK_LABELS[:, None])
        clicks = model(image_embeddings=embeddings, input_points=points, input_labels=labels)
        boxed = model(image_embeddings=embeddings, input_points=points, input_labels=labels,
                      input_boxes=torch.from_numpy(BOXES[:, None]), multimask_output=False)
        masked = model(image_embeddings=embeddings, input_points=points, input_labels=labels,
                       input_masks=torch.from_numpy(masks))
    out = {"embeddings": embeddings.numpy().transpose(0, 2, 3, 1), "masks": masks[:, 0]}
    for name, result in (("clicks", clicks), ("boxed", boxed), ("masked", masked)):
        out[name] = (result.iou_scores.numpy()[:, 0], result.pred_masks.numpy()[:, 0])
    return out


def test_image_embeddings_match_transformers():
    embeddings = _model().image_embedder.predict(IMAGES, verbose=0)
    np.testing.assert_allclose(embeddings, _reference()["embeddings"], rtol=0, atol=1e-4)


def test_prompt_decoder_matches_transformers():
    model, reference = _model(), _reference()
    embeddings = reference["embeddings"]
    padding = (np.zeros((2, 1, 2)), -np.ones((2, 1)))
    corners = (BOXES.reshape(2, 2, 2), np.tile([[2, 3]], (2, 1)))
    cases = {
        "clicks": (np.concatenate([CLICKS, padding[0]], 1), np.concatenate([CLICK_LABELS, padding[1]], 1), None, 1),
        "boxed": (np.concatenate([CLICKS, corners[0]], 1), np.concatenate([CLICK_LABELS, corners[1]], 1), None, 0),
        "masked": (np.concatenate([CLICKS, padding[0]], 1), np.concatenate([CLICK_LABELS, padding[1]], 1),
                   reference["masks"], 1),
    }
    for name, (points, labels, masks, first) in cases.items():
        out = model.prompt_decoder.predict(model.decoder_inputs(embeddings, points, labels, masks), verbose=0)
        iou, low_res = reference[name]
        chosen = slice(first, None) if first else slice(0, 1)
        np.testing.assert_allclose(out["iou_scores"][:, chosen], iou, rtol=0, atol=1e-4, err_msg=name)
        np.testing.assert_allclose(out["pred_masks"][:, chosen], low_res, rtol=0, atol=1e-4, err_msg=name)


def test_whole_model_predict_is_the_two_parts():
    model = _model()
    points = np.concatenate([CLICKS, np.zeros((2, 1, 2))], 1)
    labels = np.concatenate([CLICK_LABELS, -np.ones((2, 1))], 1)
    inputs = model.decoder_inputs(np.zeros((2, 8, 8, 16)), points, labels)
    inputs.pop("image_embeddings")
    whole = model.predict({"images": IMAGES, **inputs}, verbose=0)
    np.testing.assert_allclose(whole["pred_masks"][:, 1:], _reference()["clicks"][1], rtol=0, atol=1e-4)


def test_keras_hub_preset_matches_keras_hub():
    folder, segmenter = keras_hub_sam_dir()
    model = keras_vit.from_preset(folder)
    images = RNG.uniform(0, 1, size=(2, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
    boxes = BOXES.reshape(2, 1, 2, 2)
    labels = CLICK_LABELS.astype("float32")
    expected = segmenter.predict({"images": images, "points": CLICKS, "labels": labels, "boxes": boxes}, verbose=0)
    embeddings = model.image_embedder.predict(keras_vit.preprocess_input(images * 255, model=model), verbose=0)
    points = np.concatenate([CLICKS, boxes.reshape(2, 2, 2)], 1)
    out = model.prompt_decoder.predict(
        model.decoder_inputs(embeddings, points, np.concatenate([labels, np.tile([[2, 3]], (2, 1))], 1)), verbose=0)
    np.testing.assert_allclose(out["iou_scores"], expected["iou_pred"], rtol=0, atol=1e-4)
    np.testing.assert_allclose(out["pred_masks"], expected["masks"], rtol=0, atol=2e-4 * np.abs(expected["masks"]).max())


def _photo():
    return skimage_data.chelsea()  # 300 x 451


def test_segment_prompts_matches_sam_processor():
    folder, torch_model, processor = sam_dir()
    photo = _photo()
    points, boxes = [[[120.0, 80.0], [300.0, 200.0]]], [[30.0, 40.0, 250.0, 280.0]]
    inputs = processor(images=photo, input_points=[points], input_labels=[[[1, 0]]], input_boxes=[boxes],
                       return_tensors="pt")
    with torch.no_grad():
        out = torch_model(**{k: v for k, v in inputs.items() if k not in ("original_sizes", "reshaped_input_sizes")},
                          multimask_output=True)
    expected = processor.post_process_masks(out.pred_masks, inputs["original_sizes"], inputs["reshaped_input_sizes"])
    ours = keras_vit.segment_prompts(_model(), photo, points=points[0], labels=[1, 0], boxes=boxes[0])
    pixels, _, _ = prompt_masks.prepare_image(_model(), photo)
    np.testing.assert_allclose(pixels[0], inputs["pixel_values"][0].numpy().transpose(1, 2, 0), atol=1e-5)
    np.testing.assert_allclose(ours["iou_scores"], out.iou_scores[0].numpy(), atol=1e-3)
    agreement = (ours["masks"] == expected[0].numpy()).mean()
    assert ours["masks"].shape == (1, 3) + photo.shape[:2] and agreement >= 0.99, agreement


def _pipeline_candidates(photo, per_side, batch, **options):
    """The masks, IoU scores and boxes the `mask-generation` pipeline keeps
    before its non-maximum suppression (which needs torchvision): its own
    `preprocess` and `_forward`, batch by batch."""
    from PIL import Image

    _, torch_model, processor = sam_dir()
    generator = transformers.pipeline("mask-generation", model=torch_model, image_processor=processor.image_processor)
    masks, scores, boxes = [], [], []
    for inputs in generator.preprocess(Image.fromarray(photo), points_per_batch=batch, points_per_crop=per_side):
        with torch.no_grad():
            out = generator._forward(inputs, **options)
        masks += [np.asarray(prompt_masks_rle(rle)) for rle in out["masks"]]
        scores.append(np.asarray(out["iou_scores"]))
        boxes.append(np.asarray(out["boxes"]))
    return masks, np.concatenate(scores), np.concatenate(boxes)


def prompt_masks_rle(rle):
    from transformers.models.sam.image_processing_pil_sam import _rle_to_mask

    return np.asarray(_rle_to_mask(rle))


def test_generate_masks_matches_mask_generation_pipeline():
    photo = _photo()
    # Thresholds that drop some of the random model's masks on each criterion.
    masks, scores, boxes = _pipeline_candidates(photo, 4, 16, pred_iou_thresh=0.45, stability_score_thresh=0.1)
    # No suppression (IoU is never above 1): every candidate, best first.
    ours = keras_vit.generate_masks(_model(), photo, points_per_side=4, points_per_batch=16, pred_iou_threshold=0.45,
                                    stability_score_threshold=0.1, nms_threshold=1.0)
    order = np.argsort(-scores, kind="stable")
    assert len(ours["masks"]) == len(scores) > 0
    np.testing.assert_allclose(ours["scores"], scores[order], atol=1e-3)
    np.testing.assert_allclose(ours["boxes"], boxes[order], atol=1)
    agreement = np.mean([(a == masks[i]).mean() for a, i in zip(ours["masks"], order)])
    assert agreement >= 0.99, agreement


def test_masks_at_the_image_size_are_made_a_group_at_a_time(monkeypatch):
    """Masks made a few at a time equal those made all at once, and a grid of
    clicks then holds a fraction of the float64 masks in memory."""
    import tracemalloc

    from keras_vit.tasks import mask_outputs

    model = _model()
    photo = np.repeat(np.repeat(_photo(), 2, axis=0), 2, axis=1)  # 600 x 902
    options = dict(points_per_side=4, points_per_batch=16, pred_iou_threshold=0.0,
                   stability_score_threshold=0.0, nms_threshold=1.0)  # every candidate: 48 a batch
    keras_vit.generate_masks(model, photo, points_per_side=1)  # compiled before measuring
    runs = {}
    for masks_at_once in (None, 4):
        if masks_at_once:
            monkeypatch.setattr(mask_outputs, "MASK_GROUP_BYTES", masks_at_once * 8 * photo.shape[0] * photo.shape[1])
        tracemalloc.start()
        found = keras_vit.generate_masks(model, photo, **options)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        clicked = keras_vit.segment_prompts(model, photo, boxes=[[10, 20, 300, 400], [200, 100, 800, 590]],
                                            multimask_output=True)
        runs[masks_at_once] = found, clicked, peak
    (whole, clicked_whole, peak_whole), (grouped, clicked_grouped, peak_grouped) = runs[None], runs[4]
    assert len(whole["masks"]) == 48
    for key in ("masks", "scores", "boxes"):
        np.testing.assert_array_equal(grouped[key], whole[key])
    for key in ("masks", "iou_scores", "low_res_masks"):
        np.testing.assert_array_equal(clicked_grouped[key], clicked_whole[key])
    # All at once: more than the 48 float64 masks. Four at a time: those
    # four, the 48 boolean masks returned and the decoder's low-resolution
    # logits (on this photo together 18 masks' bytes; at 12 megapixels,
    # about the four and the booleans alone).
    one_mask = 8 * photo.shape[0] * photo.shape[1]
    assert peak_whole > 48 * one_mask and peak_grouped < peak_whole / 3, (peak_whole, peak_grouped, one_mask)


def test_generate_masks_shows_its_progress_over_the_clicks(tmp_path, capsys):
    """A bar over the clicks when they make several decoder batches (on the
    error stream in `keras-vit masks --automatic`), none for one batch or
    with verbose=0; the masks the same."""
    from PIL import Image

    from keras_vit_tools.commands import keras_vit as run_cli

    model, photo = _model(), _photo()[:120, :160]
    options = dict(points_per_side=4, pred_iou_threshold=0.0, stability_score_threshold=0.0)
    shown = keras_vit.generate_masks(model, photo, points_per_batch=4, **options)
    assert "16/16" in capsys.readouterr().out
    for quiet in (dict(points_per_batch=16), dict(points_per_batch=4, verbose=0)):
        again = keras_vit.generate_masks(model, photo, **options, **quiet)
        assert capsys.readouterr().out == ""
        np.testing.assert_array_equal(again["masks"], shown["masks"])
    Image.fromarray(photo).save(tmp_path / "cat.png")
    status = run_cli(["masks", sam_dir()[0], str(tmp_path / "cat.png"), "--automatic", "--points-per-side", "9",
                      "--out", str(tmp_path / "out")])
    printed = capsys.readouterr()
    assert status == 0 and "81/81" in printed.err and "81/81" not in printed.out, printed
    assert printed.out.startswith(f"{tmp_path / 'cat.png'}: "), printed.out


def test_float_images_in_0_1_give_what_their_uint8_images_give():
    """`segment_prompts` and `generate_masks` read images by the contract of
    every task: a float image in [0, 1] is its uint8 image multiplied by 255
    (with a warning), a channels-first array its channels-last one."""
    model, photo = _model(), _photo()[:IMAGE_SIZE, :IMAGE_SIZE].copy()  # the model's size: nothing resized
    calls = (lambda image: keras_vit.segment_prompts(model, image, points=[[20, 30]]),
             lambda image: keras_vit.generate_masks(model, image, points_per_side=2, pred_iou_threshold=0.0,
                                                    stability_score_threshold=0.0))
    for call in calls:
        expected = call(photo)
        with pytest.warns(UserWarning, match=r"holds floats in \[0, 1\]: .* multiplied by 255"):
            scaled = call(photo / 255.0)
        for image_out in (scaled, call(np.moveaxis(photo, -1, 0))):
            for key, value in expected.items():
                np.testing.assert_array_equal(image_out[key], value)


def test_nms_keeps_what_exhaustive_suppression_keeps():
    from keras_vit.tasks.detection_outputs import nms

    rng = np.random.default_rng(3)
    corners = rng.uniform(0, 50, size=(40, 2))
    boxes = np.concatenate([corners, corners + rng.uniform(5, 30, size=(40, 2))], axis=1)
    scores = rng.uniform(size=40)
    kept = []
    for i in np.argsort(-scores):  # the definition: keep a box unless a kept one overlaps it more
        lo, hi = np.maximum(boxes[i, :2], boxes[kept, :2]), np.minimum(boxes[i, 2:], boxes[kept, 2:])
        inter = np.prod(np.clip(hi - lo, 0, None), axis=-1)
        area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
        if not kept or np.all(inter / (area(boxes[i]) + area(boxes[kept]) - inter) <= 0.4):
            kept.append(int(i))
    assert nms(boxes, scores, 0.4).tolist() == kept


def test_images_with_alpha_or_gray_are_converted():
    model, photo = _model(), _photo()
    rgba = np.concatenate([photo, np.full(photo.shape[:2] + (1,), 7, "uint8")], axis=-1)
    gray = photo.mean(axis=-1).astype("uint8")
    pixels = prompt_masks.prepare_image(model, photo)[0]
    np.testing.assert_array_equal(prompt_masks.prepare_image(model, rgba)[0], pixels)
    np.testing.assert_array_equal(prompt_masks.prepare_image(model, gray)[0],
                                  prompt_masks.prepare_image(model, np.repeat(gray[..., None], 3, -1))[0])


@pytest.mark.parametrize("prompt, message", [
    (dict(points=[[500.0, 10.0]]), "must lie in the image"),
    (dict(points=[[-1.0, 10.0]]), "must lie in the image"),
    (dict(boxes=[50.0, 10.0, 20.0, 40.0]), "x1 >= x0"),
    (dict(points=[[5.0, 5.0]], labels=[2]), "one 0 (background) or 1"),
    (dict(), "Give a prompt"),
    (dict(points=[[[5.0, 5.0]], [[6.0, 6.0]]], boxes=[[1.0, 1.0, 9.0, 9.0]]), "as many prompts"),
])
def test_bad_prompts_are_refused(prompt, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        prompt_masks.prompt_points((300, 451), (681, 1024), **prompt)


def test_layers_round_trip_their_config():
    model = _model()
    for layer in (model.prompt_encoder, model.mask_decoder, *model.mask_decoder.blocks,
                  model.mask_decoder.final_attention):
        clone = type(layer).from_config(layer.get_config())
        assert clone.get_config() == layer.get_config()
    again = keras_vit.PromptableSegmenter.from_config(model.get_config())
    assert again.image_encoder.get_config() == model.image_encoder.get_config()


def test_masks_command_writes_pictures_and_json(tmp_path, capsys):
    """Each image's masks under its own name, the same prompt in each; a
    prompt outside one image names it and passes over it, the other
    images' files written."""
    import json

    from PIL import Image

    from keras_vit_tools.commands import keras_vit as run_cli
    from keras_vit.tasks import pictures
    from keras_vit.tasks.rle import mask_to_rle

    photos = {"chelsea": _photo(), "corner": _photo()[:200, 150:].copy()}  # 300 x 451, 200 x 301
    for name, pixels in photos.items():
        Image.fromarray(pixels).save(tmp_path / f"{name}.png")
    out = tmp_path / "masks"
    model = _model()
    for names in (["chelsea"], ["chelsea", "corner"]):
        status = run_cli(["masks", sam_dir()[0], *(str(tmp_path / f"{n}.png") for n in names),
                          "--points", "120,80", "300,150", "--labels", "1", "0", "--out", str(out)])
        assert status == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    for name, pixels in photos.items():
        data = json.loads((out / f"{name}_masks.json").read_text())
        assert data["image"] == str(tmp_path / f"{name}.png") and data["size"] == list(pixels.shape[:2])
        expected = keras_vit.segment_prompts(model, pixels, points=[[120, 80], [300, 150]], labels=[1, 0])
        best = np.argsort(-expected["iou_scores"][0])
        assert [m["score"] for m in data["masks"]] == pytest.approx(
            expected["iou_scores"][0][best].tolist(), abs=1e-6)
        assert [m["mask"] for m in data["masks"]] == [mask_to_rle(m) for m in expected["masks"][0][best]]
        # The picture: all three masks, the click on the object green, the one off it red.
        drawn = np.asarray(Image.open(out / f"{name}_masks.png"))
        np.testing.assert_array_equal(drawn, pictures.masks_picture(
            pixels, expected["masks"][0][best], points=[(120, 80), (300, 150)], labels=[1, 0]))
        assert drawn[80, 120].tolist() == list(pictures.POSITIVE) and drawn[150, 300].tolist() == list(pictures.NEGATIVE)
        assert f"{tmp_path / name}.png: 3 masks; wrote" in printed
    assert sorted(f.name for f in out.iterdir()) == [
        "chelsea_masks.json", "chelsea_masks.png", "corner_masks.json", "corner_masks.png"]
    again = tmp_path / "again"
    status = run_cli(["masks", str(tmp_path / "corner.png"), str(tmp_path / "chelsea.png"),
                      "--preset", sam_dir()[0], "--points", "400,80", "--out", str(again)])
    err = capsys.readouterr().err
    # An image that the prompt does not fit is named and passed over; the others' files are written.
    assert status == 1 and f"skipped {tmp_path / 'corner.png'}: " in err and "must lie in the image" in err, err
    assert err.endswith(f"1 of 2 images failed (the results of the others are written):\n  {tmp_path / 'corner.png'}\n")
    assert sorted(f.name for f in again.iterdir()) == ["chelsea_masks.json", "chelsea_masks.png"]
    # No prompt is a usage error named by the command's flags, before the model loads.
    assert run_cli(["masks", str(tmp_path / "absent"), str(tmp_path / "chelsea.png"), "--out", str(out)]) == 2
    assert "--points (with --labels), --box, both, or --automatic" in capsys.readouterr().err
    assert run_cli(["masks", sam_dir()[0], str(tmp_path / "chelsea.png"), "--automatic",
                    "--box", "1", "1", "9", "9", "--out", str(out)]) == 2
    assert "--automatic segments everything" in capsys.readouterr().err
    # A prompt that fits no image (a label missing) is the command's error, before the model loads.
    assert run_cli(["masks", str(tmp_path / "absent"), str(tmp_path / "chelsea.png"), str(tmp_path / "corner.png"),
                    "--points", "10,10", "20,20", "--labels", "1", "--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("error") == 1 and "`labels` must be one 0 (background) or 1 (object) per point" in err, err
    assert not (tmp_path / "none").exists()


def test_run_length_encoding_matches_transformers_and_pycocotools():
    """Both forms of COCO's RLE round-trip, and read as transformers and
    pycocotools read them; the compressed string is pycocotools' own."""
    from transformers.models.sam.image_processing_pil_sam import _rle_to_mask

    from keras_vit.tasks.rle import mask_to_rle, rle_to_mask

    coco = pytest.importorskip("pycocotools.mask")
    block = np.zeros((300, 200), bool)
    block[40:260, 30:170] = True  # long runs: counts of several characters, differences of both signs
    masks = (RNG.uniform(size=(5, 7)) > 0.5, RNG.uniform(size=(40, 33)) > 0.97, block, np.ones((3, 4), bool),
             np.zeros((3, 4), bool))
    for mask in masks:
        plain, packed = mask_to_rle(mask), mask_to_rle(mask, compressed=True)
        reference = coco.encode(np.asfortranarray(mask.astype("uint8")))
        assert packed == {"size": list(reference["size"]), "counts": reference["counts"].decode("ascii")}
        assert coco.frPyObjects(plain, *mask.shape)["counts"] == reference["counts"]
        np.testing.assert_array_equal(_rle_to_mask(plain), mask)
        for rle in (plain, packed, dict(packed, counts=reference["counts"])):
            np.testing.assert_array_equal(rle_to_mask(rle), mask)
    with pytest.raises(ValueError, match=r"add up to height \* width = 6\. Received: 2 counts adding up to 3"):
        rle_to_mask({"size": [2, 3], "counts": [1, 2]})


def test_task_presets_are_one_table():
    """A SAM directory goes through the one table of task presets: its model
    takes the overrides its row lists, another task class's `from_preset`
    refuses it, `describe_preset` names the class that reads it; every row
    names a registered task class and, where it has one, its reader."""
    from keras_vit.presets import tasks

    folder = sam_dir()[0]
    with pytest.raises(ValueError, match=r"cannot change \['image_size'\] of a PromptableSegmenter"):
        keras_vit.from_preset(folder, image_size=64)
    with pytest.raises(ValueError, match="holds a PromptableSegmenter, not a DepthEstimator"):
        keras_vit.DepthEstimator.from_preset(folder)
    with pytest.raises(ValueError, match="which its class reads whole"):
        keras_vit.presets.describe_preset(folder)
    classes = {row.task_class for row in tasks.TASK_PRESETS.values()}
    assert classes == {"DepthEstimator", "Segmenter", "OpenVocabularyDetector", "PromptableSegmenter"}
    for row in tasks.TASK_PRESETS.values():
        task_class = tasks.task_class(row.task_class)
        assert task_class.__name__ == row.task_class
        assert row.reader is None or callable(getattr(task_class, row.reader))
