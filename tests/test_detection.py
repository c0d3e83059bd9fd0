"""OWL-ViT and OWLv2: detectors made at random by transformers, with a CLIP
tokenizer trained offline, load with `keras_vit.from_preset` and reproduce
transformers' raw outputs (text queries and example-image queries);
`keras_vit.detect` reproduces the `zero-shot-object-detection` pipeline on
real photos; a detector of fixed queries is an ordinary model; bad input
is refused by name."""

import functools

import keras
import numpy as np
import pytest

import keras_vit
from detection_dirs import FAMILIES, IMAGE_SIZE, detection_dir
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.tasks import detection
from sam_dirs import sam_dir
from conftest import spread

pytestmark = spread("OWL-ViT's parity and post-processing: its layers are held on every backend by their "
                    "contracts; each case once")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
skimage_data = pytest.importorskip("skimage.data")

QUERIES = ["a photo of a cat.", "a remote control.", "the sofa"]
RNG = np.random.default_rng(0)
IMAGES = RNG.normal(size=(2, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")


@functools.lru_cache(maxsize=None)
def _model(family):
    return keras_vit.from_preset(detection_dir(family)[0])


def _pixels(images):
    return torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))


@functools.lru_cache(maxsize=None)
def _reference(family):
    """transformers' outputs for the text queries and for example images."""
    _, model, tokenizer, _ = detection_dir(family)
    tokens = tokenizer(QUERIES * 2, padding="max_length", max_length=16, return_tensors="pt")
    with torch.no_grad():
        text = model(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"],
                     pixel_values=_pixels(IMAGES))
        guided = model.image_guided_detection(pixel_values=_pixels(IMAGES), query_pixel_values=_pixels(IMAGES[::-1]))
    out = {k: getattr(text, k).numpy() for k in ("logits", "pred_boxes", "objectness_logits") if hasattr(text, k)}
    out["guided_logits"] = guided.logits.numpy()
    out["guided_boxes"] = guided.target_pred_boxes.numpy()
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_outputs_match_transformers(family):
    model, reference = _model(family), _reference(family)
    assert type(model).__name__ == "OpenVocabularyDetector"
    queries = model.encode_texts(QUERIES)
    out = model.predict({"images": IMAGES, "queries": np.stack([queries, queries])}, verbose=0)
    assert sorted(out) == sorted(k for k in ("logits", "pred_boxes", "objectness_logits") if k in reference)
    for key in out:
        np.testing.assert_allclose(out[key], reference[key], rtol=0, atol=1e-4, err_msg=key)


@pytest.mark.parametrize("family", FAMILIES)
def test_image_queries_match_image_guided_detection(family):
    model, reference = _model(family), _reference(family)
    queries = model.encode_image_queries(IMAGES[::-1])
    out = model.predict({"images": IMAGES, "queries": queries[:, None]}, verbose=0)
    np.testing.assert_allclose(out["logits"], reference["guided_logits"], rtol=0, atol=1e-4)
    np.testing.assert_allclose(out["pred_boxes"], reference["guided_boxes"], rtol=0, atol=1e-4)


def _pipeline_detections(family, photo, threshold):
    from PIL import Image

    _, model, tokenizer, processor = detection_dir(family)
    detector = transformers.pipeline("zero-shot-object-detection", model=model, tokenizer=tokenizer,
                                     image_processor=processor)
    found = detector(Image.fromarray(photo), candidate_labels=QUERIES[:2], threshold=threshold)
    return sorted(found, key=lambda d: -d["score"])


@pytest.mark.parametrize("family", FAMILIES)
def test_detect_matches_the_pipeline_on_photos(family):
    photo = skimage_data.chelsea()  # 300 x 451: OWLv2 pads it to a square
    model = _model(family)
    _, _, _, processor = detection_dir(family)
    inputs, sizes = detection.prepare_images(model, photo)
    expected_pixels = processor(images=photo, return_tensors="np")["pixel_values"][0].transpose(1, 2, 0)
    np.testing.assert_allclose(inputs[0], expected_pixels, atol=1e-4)
    expected = _pipeline_detections(family, photo, threshold=0.0)
    found = keras_vit.detect(model, photo, queries=QUERIES[:2], threshold=0.0, clip_boxes=False)[0]
    assert len(found) == len(expected) == 2 * (IMAGE_SIZE // 8) ** 2
    np.testing.assert_allclose([d.score for d in found], [d["score"] for d in expected], atol=1e-3)
    assert [d.label for d in found] == [d["label"] for d in expected]
    # The pipeline truncates its boxes to ints.
    boxes = np.array([d.box for d in found])
    reference = np.array([[d["box"][k] for k in ("xmin", "ymin", "xmax", "ymax")] for d in expected])
    assert np.abs(boxes - reference).max() <= 1.0
    # By default the boxes are cut to the photo; OWLv2's reach into the padding below it.
    clipped = keras_vit.detect(model, photo, queries=QUERIES[:2], threshold=0.0)[0]
    assert [(d.label, d.score) for d in clipped] == [(d.label, d.score) for d in found]
    np.testing.assert_allclose([d.box for d in clipped], np.clip(boxes, 0, [451, 300, 451, 300]), atol=1e-9)
    assert family != "owlv2" or boxes[:, 3].max() > 300
    median = float(np.median([d.score for d in found]))
    kept = keras_vit.detect(model, photo, queries=QUERIES[:2], threshold=median, top_k=5)[0]
    assert [d.score for d in kept] == [d.score for d in found if d.score > median][:5]


def test_fixed_queries_make_an_ordinary_model(tmp_path):
    model = _model("owlv2")
    fixed = model.with_queries(QUERIES)
    assert fixed.query_names == tuple(QUERIES)
    # The detector's own layers, not copies: the same variables.
    mine = {id(v) for v in model.image_encoder.weights + model.heads.weights}
    assert mine <= {id(v) for v in fixed.weights}
    out = fixed.predict(IMAGES, verbose=0)
    np.testing.assert_allclose(out["logits"], _reference("owlv2")["logits"], rtol=0, atol=1e-4)
    path = str(tmp_path / "fixed.keras")
    fixed.save(path)
    again = keras.saving.load_model(path)
    np.testing.assert_allclose(again.predict(IMAGES, verbose=0)["logits"], out["logits"], atol=1e-6)
    found = keras_vit.detect(fixed, skimage_data.coffee(), threshold=0.0, top_k=3)[0]
    assert len(found) == 3 and {d.label for d in found} <= set(QUERIES)


def test_images_with_alpha_or_gray_are_converted():
    model, photo = _model("owlv2"), skimage_data.chelsea()
    rgba = np.concatenate([photo, np.zeros(photo.shape[:2] + (1,), "uint8")], axis=-1)
    gray = photo.mean(axis=-1).astype("uint8")
    np.testing.assert_array_equal(detection.prepare_images(model, rgba)[0], detection.prepare_images(model, photo)[0])
    np.testing.assert_array_equal(detection.prepare_images(model, gray)[0],
                                  detection.prepare_images(model, np.repeat(gray[..., None], 3, -1))[0])


@pytest.mark.parametrize("options, message", [
    (dict(queries=[]), "`queries` is empty"),
    (dict(queries=["a cat", " "]), r"`queries\[1\]` is blank"),
    (dict(), "needs `queries`"),
    (dict(queries=["a cat"], threshold=1.5), "threshold"),
    (dict(queries=["a cat"], top_k=0), "top_k"),
])
def test_bad_detect_arguments_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.detect(_model("owlvit"), np.zeros((20, 30, 3), "uint8"), **options)


def test_fixed_detector_takes_no_queries():
    with pytest.raises(ValueError, match=r"`queries\[0\]` is blank"):
        _model("owlvit").with_queries(["", "a cat"])
    fixed = _model("owlvit").with_queries(np.eye(1, 24), names=["x"])
    with pytest.raises(ValueError, match="fixed queries"):
        keras_vit.detect(fixed, np.zeros((20, 30, 3), "uint8"), queries=["a cat"])


def test_detect_command_embeds_the_queries_once(tmp_path, monkeypatch, capsys):
    """Texts and example images are embedded once for every chunk of images,
    and find what `detect` finds given them each time."""
    import json

    from PIL import Image

    from keras_vit.cli import tasks as cli_tasks
    from keras_vit_tools.commands import keras_vit as run_cli

    photos = [skimage_data.coffee(), skimage_data.chelsea(), skimage_data.astronaut()[::2, ::2]]
    paths = []
    for i, photo in enumerate(photos):
        paths.append(str(tmp_path / f"{i}.png"))
        Image.fromarray(photo).save(paths[-1])
    calls = []
    for method in ("encode_texts", "encode_image_queries"):
        original = getattr(detection.OpenVocabularyDetector, method)
        monkeypatch.setattr(detection.OpenVocabularyDetector, method,
                            lambda self, x, _m=method, _o=original: calls.append(_m) or _o(self, x))
    monkeypatch.setattr(cli_tasks, "CHUNK", 1)
    out = tmp_path / "found"
    status = run_cli(["detect", detection_dir("owlv2")[0], *paths, "--queries", QUERIES[0],
                      "--query-images", paths[1], "--threshold", "0.2", "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    assert sorted(calls) == ["encode_image_queries", "encode_texts"]
    records = [json.loads((out / f"{i}_detections.json").read_text()) for i in range(len(photos))]
    assert [r["image"] for r in records] == paths
    expected = keras_vit.detect(_model("owlv2"), photos, queries=QUERIES[0], query_images=paths[1], threshold=0.2)
    for record, found in zip(records, expected):
        assert [d["label"] for d in record["detections"]] == [d.label for d in found]
        assert [d["score"] for d in record["detections"]] == pytest.approx([d.score for d in found], abs=1e-5)
    assert {d.label for found in expected for d in found} == {"1.png", QUERIES[0]}


def test_heads_round_trip_their_config():
    heads = _model("owlv2").heads
    again = type(heads).from_config(heads.get_config())
    assert again.get_config() == heads.get_config()
    logits = detection.QueryLogits(num_queries=2, query_dim=4)
    assert type(logits).from_config(logits.get_config()).get_config() == logits.get_config()


def test_detect_command_writes_pictures_and_json(tmp_path, capsys):
    import json

    from PIL import Image

    from keras_vit.tasks import pictures
    from keras_vit.tasks.detection_outputs import Detection
    from keras_vit_tools.commands import keras_vit as run_cli

    photo = tmp_path / "coffee.png"
    Image.fromarray(skimage_data.coffee()).save(photo)
    out = tmp_path / "found"
    status = run_cli(["detect", detection_dir("owlv2")[0], str(photo), "--queries", *QUERIES[:2],
                       "--threshold", "0.5", "--top-k", "4", "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    record = json.loads((out / "coffee_detections.json").read_text())
    found = keras_vit.detect(_model("owlv2"), skimage_data.coffee(), queries=QUERIES[:2], threshold=0.5, top_k=4)[0]
    assert record["image"] == str(photo) and record["size"] == [400, 600]
    assert [d["score"] for d in record["detections"]] == pytest.approx([d.score for d in found], abs=1e-6)
    np.testing.assert_allclose([d["box"] for d in record["detections"]], [d.box for d in found], atol=1e-3)
    # The boxes of the JSON lie in the photo, and the picture draws them.
    boxes = np.array([d["box"] for d in record["detections"]])
    assert (boxes >= 0).all() and (boxes[:, [0, 2]] <= 600).all() and (boxes[:, [1, 3]] <= 400).all()
    written = [Detection(d["label"], d["score"], tuple(d["box"])) for d in record["detections"]]
    np.testing.assert_array_equal(np.asarray(Image.open(out / "coffee_detections.png")),
                                  pictures.detections_picture(skimage_data.coffee(), written))
    assert sorted(f.name for f in out.iterdir()) == ["coffee_detections.json", "coffee_detections.png"]
    # A detector needs something to look for: a usage error, and an error from a non-detector.
    with pytest.raises(SystemExit):
        run_cli(["detect", str(photo), "--preset", detection_dir("owlv2")[0], "--queries", "--out", str(out)])
    assert run_cli(["detect", str(photo), "--preset", detection_dir("owlv2")[0], "--out", str(out)]) == 2
    assert "--queries (texts), --query-images (example images) or both" in capsys.readouterr().err
    assert run_cli(["detect", sam_dir()[0], str(photo), "--queries", "a cat", "--out", str(out)]) == 2
    assert "is not a detector (OWL-ViT, OWLv2): its class is PromptableSegmenter" in capsys.readouterr().err
    assert run_cli(["detect", detection_dir("owlv2")[0], str(photo), "--queries", "a cat", " ",
                    "--out", str(out)]) == 2
    assert "`queries[1]` is blank" in capsys.readouterr().err
