"""What the one-call functions (`classify`, `estimate_depth`, `segment`,
`detect`) share: they read the images a batch at a time by one contract
(float images in [0, 1], channels-first arrays), show progress over many
images (plain lines where standard output is no terminal), name a bad image
by its place in the list, and name a bad argument before anything runs
(`segment_prompts` and `generate_masks` too)."""

import math
import re

import numpy as np
import pytest
from PIL import Image

import keras_vit
from conftest import TINY, runs_once, spread
from keras_vit.layers.detection_heads import DetectionHeads
from keras_vit.preprocessing import Preprocessing
from keras_vit.preprocessing.dense import DenseProcessing
from keras_vit.tasks import images as images_module
from keras_vit.tasks import prompt_masks
from keras_vit.tasks.depth import DepthEstimator
from keras_vit.tasks.detection import OpenVocabularyDetector
from keras_vit.tasks.segmentation import Segmenter

pytestmark = spread("the one-call functions' reading, batching and progress over models held on every "
                    "backend; each case once")


def _classifier():
    return keras_vit.ViT(**TINY, classes=2, class_names=["no", "yes"],
                         preprocessing=Preprocessing.from_mode("inception", image_size=32))


def _depth():
    encoder = keras_vit.ViT(**TINY, include_top=False)
    return DepthEstimator(encoder, (0, 1), (8, 16), (2, 0.5), 8, head_size=4,
                          preprocessing=DenseProcessing(size=(32, 32), resize="keep_aspect", multiple=8))


def _segmenter():
    encoder = keras_vit.ViT(**TINY, include_top=False)
    return Segmenter(encoder, classes=2, class_names=["sky", "sea"], num_queries=3, num_blocks=1,
                     preprocessing=DenseProcessing(size=(32, 32), resize="shorter_side", pad="end"))


def _detector():
    tower = keras_vit.ViT(**TINY, include_top=False, pre_norm=True,
                          preprocessing=Preprocessing(image_size=(32, 32)))
    return OpenVocabularyDetector(tower, DetectionHeads(query_dim=6, patch_size=8)).with_queries(
        np.eye(2, 6), names=["cat", "dog"])


# name: (model, call, images per forward pass)
TASKS = {
    "classify": (_classifier, lambda m, x, **kw: keras_vit.classify(m, x, batch_size=2, **kw), 2),
    "estimate_depth": (_depth, keras_vit.estimate_depth, 1),
    "segment": (_segmenter, keras_vit.segment, 1),
    "detect": (_detector, lambda m, x, **kw: keras_vit.detect(m, x, threshold=0.0, batch_size=2, **kw), 2),
}


def _photos(count):
    return [np.random.default_rng(i).integers(0, 256, (30 + i, 40, 3)).astype("uint8") for i in range(count)]


def _files(folder, count):
    paths = []
    for i, photo in enumerate(_photos(count)):
        paths.append(str(folder / f"{i}.png"))
        Image.fromarray(photo).save(paths[-1])
    return paths


def _same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, (float, np.ndarray)):
        np.testing.assert_allclose(a, b, atol=1e-5)
    else:
        assert a == b


@pytest.mark.parametrize("task", TASKS)
def test_images_are_read_a_batch_at_a_time_with_progress(task, tmp_path, monkeypatch, capsys):
    build, call, per_pass = TASKS[task]
    model = build()
    photos = _files(tmp_path, 5)
    quiet = call(model, photos, verbose=0)
    assert capsys.readouterr().out == ""
    events = []
    read = images_module._read
    run = model.predict_on_batch
    monkeypatch.setattr(images_module, "_read", lambda *a: events.append("read") or read(*a))
    monkeypatch.setattr(model, "predict_on_batch", lambda *a: events.append("run") or run(*a))
    shown = call(model, photos)  # "auto": more than one pass, progress
    _same(shown, quiet)
    printed = capsys.readouterr().out
    # Standard output is no terminal here: plain lines, no bar redrawn with escape codes.
    assert "5/5 images" in printed and not re.search("[\x1b\r\b]", printed), repr(printed)
    # Each pass's files are read just before it: never all five first.
    passes = -(-5 // per_pass)
    expected = []
    for i in range(passes):
        expected += ["read"] * min(per_pass, 5 - i * per_pass) + ["run"]
    assert events == expected
    call(model, photos[:1])
    assert capsys.readouterr().out == ""  # one pass: no bar
    call(model, photos[:1], verbose=1)
    assert "1/1" in capsys.readouterr().out


@pytest.mark.parametrize("task", TASKS)
def test_a_bad_image_is_named_by_its_place_in_the_list(task):
    build, call, _ = TASKS[task]
    model = build()
    photos = _photos(4) + [np.zeros((5,), "uint8")]
    with pytest.raises(ValueError, match=r"`images\[4\]`"):
        call(model, photos, verbose=0)
    with pytest.raises(ValueError, match="verbose.*'loud'"):
        call(model, photos[:1], verbose="loud")


@pytest.mark.parametrize("task", TASKS)
def test_float_images_in_0_1_give_what_their_uint8_images_give(task):
    """Every task reads images by one contract (`keras_vit.tasks.images`): a
    float image in [0, 1] is its uint8 image multiplied by 255, with a
    warning; a channels-first array is its channels-last one; floats outside
    [0, 255] (an image scaled for a model already) are refused by name."""
    build, call, _ = TASKS[task]
    model = build()
    photo = np.random.default_rng(0).integers(0, 256, (32, 32, 3)).astype("uint8")  # the model's size
    expected = call(model, photo, verbose=0)
    with pytest.warns(UserWarning, match=r"`images\[0\]` holds floats in \[0, 1\]: .* multiplied by 255"):
        _same(call(model, photo / 255.0, verbose=0), expected)
    _same(call(model, np.moveaxis(photo, -1, 0), verbose=0), expected)
    with pytest.raises(ValueError, match=r"`images\[0\]` holds values from -1 to 1: pixels must be in \[0, 255\]"):
        call(model, photo / 127.5 - 1.0, verbose=0)


IMAGE = np.zeros((20, 30, 3), "uint8")


def _cli(*argv):
    from keras_vit_tools.commands import keras_vit as run_cli

    return lambda: run_cli(list(argv))


def _read(image):
    return lambda: images_module.read_images(image)


# id: (a call that must refuse an argument, what its message must say). The
# functions check before they load a model ("unused" is never read) or read
# an image; the commands' parsers before anything loads.
BAD_ARGUMENTS = {
    "segment-threshold-negative": (lambda: keras_vit.segment("unused", IMAGE, threshold=-1),
                                   r"`threshold` must be a number in \[0.0, 1.0\]. Received: threshold=-1"),
    "segment-threshold-above-1": (lambda: keras_vit.segment("unused", IMAGE, task="instance", threshold=1.5),
                                  r"Received: threshold=1.5"),
    "segment-threshold-text": (lambda: keras_vit.segment("unused", IMAGE, threshold="0.5"),
                               r"`threshold` must be a number .* Received: threshold='0.5'"),
    "segment-mask-threshold": (lambda: keras_vit.segment("unused", IMAGE, mask_threshold=-3),
                               r"`mask_threshold` must be a number in \[0.0, 1.0\]. Received: mask_threshold=-3"),
    "segment-overlap": (lambda: keras_vit.segment("unused", IMAGE, overlap_mask_area_threshold=math.nan),
                        r"Received: overlap_mask_area_threshold=nan"),
    "segment-stuff-classes": (lambda: keras_vit.segment(_segmenter(), IMAGE, task="panoptic", stuff_classes=[7]),
                              r"`stuff_classes` must be None or a list of ints in \[0, 1\]. "
                              r"Received: stuff_classes=\[7\]"),
    "segment-batch-size": (lambda: keras_vit.segment("unused", IMAGE, batch_size=0), r"Received: batch_size=0"),
    "segment-task": (lambda: keras_vit.segment("unused", IMAGE, task="panoptics"), r"Received: task='panoptics'"),
    "classify-top": (lambda: keras_vit.classify("unused", IMAGE, top=0), r"`top` must be a positive int"),
    "classify-batch-size": (lambda: keras_vit.classify("unused", IMAGE, batch_size=2.5), r"Received: batch_size=2.5"),
    "depth-verbose": (lambda: keras_vit.estimate_depth("unused", IMAGE, verbose=3), r"Received: verbose=3"),
    "detect-threshold-text": (lambda: keras_vit.detect("unused", IMAGE, threshold="0.1"),
                              r"Received: threshold='0.1'"),
    "detect-nms": (lambda: keras_vit.detect("unused", IMAGE, nms_threshold=2), r"Received: nms_threshold=2"),
    "detect-top-k": (lambda: keras_vit.detect("unused", IMAGE, top_k=0), r"Received: top_k=0"),
    "detect-clip-boxes": (lambda: keras_vit.detect("unused", IMAGE, clip_boxes="yes"),
                          r"`clip_boxes` must be True or False. Received: clip_boxes='yes'"),
    "prompts-mask-threshold": (lambda: keras_vit.segment_prompts("unused", IMAGE, points=[[1, 1]],
                                                                 mask_threshold=math.inf),
                               r"`mask_threshold` must be a finite number. Received: mask_threshold=inf"),
    "prompts-batch-size": (lambda: keras_vit.segment_prompts("unused", IMAGE, points=[[1, 1]], batch_size=0),
                           r"Received: batch_size=0"),
    "prompts-points-text": (lambda: prompt_masks.prompt_points((20, 30), (40, 60), points="here"),
                            r"`points` must be finite numbers .* Received: points='here'"),
    "prompts-labels": (lambda: prompt_masks.prompt_points((20, 30), (40, 60), points=[[1, 1]], labels=["1"]),
                       r"`labels` must be one 0 \(background\) or 1"),
    "masks-points-per-side": (lambda: keras_vit.generate_masks("unused", IMAGE, points_per_side=0),
                              r"Received: points_per_side=0"),
    "masks-offset": (lambda: keras_vit.generate_masks("unused", IMAGE, stability_score_offset=-1),
                     r"`stability_score_offset` must be a number >= 0.0. Received: stability_score_offset=-1"),
    "masks-nms": (lambda: keras_vit.generate_masks("unused", IMAGE, nms_threshold=1.5), r"Received: nms_threshold=1.5"),
    "image-scaled-already": (_read(np.full((4, 4, 3), -0.5)), r"`images\[0\]` holds values from -0.5 to -0.5"),
    "image-nan": (_read(np.full((4, 4, 3), np.nan)), r"`images\[0\]` holds 48 NaN or infinite value\(s\)"),
    "image-int-above-255": (_read(np.full((4, 4), 300)), r"holds values from 300 to 300: pixels must be in \[0, 255\]"),
    "image-bool": (_read(np.ones((4, 4), bool)), r"must hold pixel values: .* Received: dtype bool"),
    "image-shape": (_read(np.zeros((5, 4, 2))), r"channels-first \(1 \| 3 \| 4, height, width\) image"),
    "cli-detect-threshold": (_cli("detect", "m", "a.png", "--queries", "a cat", "--threshold", "1.5", "--out", "o"),
                             r"argument --threshold: must be a number in \[0, 1\]; got '1.5'"),
    "cli-segment-threshold": (_cli("segment", "m", "a.png", "--threshold", "-1", "--out", "o"),
                              r"argument --threshold: must be a number in \[0, 1\]; got '-1'"),
    "cli-classify-top": (_cli("classify", "m", "a.png", "--top", "0"), r"argument --top: must be an int >= 1; got '0'"),
    "cli-export-crop-fraction": (_cli("export", "m", "--format", "onnx", "--output", "m.onnx", "--crop-fraction",
                                      "1.2"), r"argument --crop-fraction: must be a number in \(0, 1\]; got '1.2'"),
    "cli-classify-batch-size": (_cli("classify", "m", "a.png", "--batch-size", "two"),
                                r"argument --batch-size: must be an int >= 1; got 'two'"),
    "cli-masks-labels": (_cli("masks", "m", "a.png", "--points", "1,1", "--labels", "2", "--out", "o"),
                         r"argument --labels: invalid choice: 2"),
    "cli-masks-points": (_cli("masks", "m", "a.png", "--points", "1,nan", "--out", "o"),
                         r"argument --points: must be x,y in pixels \(numbers >= 0\); got '1,nan'"),
    "cli-masks-grid": (_cli("masks", "m", "a.png", "--automatic", "--points-per-side", "0", "--out", "o"),
                       r"argument --points-per-side: must be an int >= 1"),
    "cli-zero-shot-top": (_cli("zero-shot", "m", "a.png", "--classes", "cat", "--top", "-2"), r"argument --top"),
    "cli-depth-threads": (_cli("depth", "m", "a.png", "--threads", "0", "--out", "o"), r"argument --threads"),
    "cli-export-agreement": (_cli("export", "m", "--format", "onnx", "--output", "m.onnx", "--min-agreement", "2"),
                             r"argument --min-agreement: must be a number in \[0, 1\]; got '2'"),
}


@runs_once("torch", "the argument checks are keras_vit's Python and the parsers', before any backend computes")
@pytest.mark.parametrize("case", BAD_ARGUMENTS)
def test_bad_arguments_are_named_with_what_is_allowed(case, capsys):
    call, message = BAD_ARGUMENTS[case]
    try:
        call()
    except ValueError as error:
        said = str(error)
    except SystemExit as exit:
        assert exit.code == 2
        said = capsys.readouterr().err
    else:
        pytest.fail(f"{case}: accepted")
    assert re.search(message, said), said
