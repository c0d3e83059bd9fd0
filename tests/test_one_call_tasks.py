"""What the one-call functions (`classify`, `estimate_depth`, `segment`,
`detect`) share: they read the images a batch at a time, show progress over
many images, and name a bad image by its place in the list."""

import numpy as np
import pytest
from PIL import Image

import keras_vit
from conftest import TINY, spread
from keras_vit.layers.detection_heads import DetectionHeads
from keras_vit.preprocessing import Preprocessing
from keras_vit.preprocessing.dense import DenseProcessing
from keras_vit.tasks import images as images_module
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
    shown = call(model, photos)  # "auto": more than one pass, a progress bar
    _same(shown, quiet)
    assert "5/5" in capsys.readouterr().out
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
