"""`keras_vit.classify_video` against transformers: a VideoMAE classifier made
at random by transformers, its processor (resize, centre crop, scaling)
saved beside it; the same frames, sampled by transformers' own sampler, go
through transformers' processor and model, and the top 5 agree."""

import sys

import numpy as np
import pytest

import keras_vit
from conftest import runs_once, spread
from hub_dirs import randomise_torch
from keras_vit.preprocessing import Preprocessing
from keras_vit.tasks.video import sample_frames

pytestmark = spread("classify_video's reading and sampling of clips: the model's calls are held on every "
                    "backend by test_video.py and test_video_families.py; each check once")

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

CLASSES = 7


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """`(folder, transformers model, processor)` of a tiny VideoMAE classifier of 4-frame clips."""
    config = transformers.VideoMAEConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, image_size=16,
        patch_size=8, num_frames=4, tubelet_size=2, num_labels=CLASSES,
        id2label={i: f"class {i}" for i in range(CLASSES)})
    model = randomise_torch(transformers.VideoMAEForVideoClassification(config), 0)
    processor = transformers.VideoMAEImageProcessor(
        size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16}, image_mean=[0.45, 0.4, 0.5],
        image_std=[0.22, 0.25, 0.2])
    folder = tmp_path_factory.mktemp("videomae")
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return str(folder), model, processor


@pytest.fixture(scope="module")
def model(checkpoint):
    return keras_vit.from_preset(checkpoint[0])


def theirs(checkpoint, frames):
    """transformers' class probabilities of a clip's frames, through its processor."""
    _, model, processor = checkpoint
    inputs = processor(list(frames), return_tensors="pt")
    with torch.no_grad():
        return torch.softmax(model(**inputs).logits[0].double(), -1).numpy()


def assert_top_5(predictions, probabilities):
    best = np.argsort(-probabilities, kind="stable")[:5]
    assert [p.index for p in predictions] == best.tolist()
    assert [p.name for p in predictions] == [f"class {i}" for i in best]
    np.testing.assert_allclose([p.probability for p in predictions], probabilities[best], rtol=0, atol=1e-4)


def _clip(frames, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (frames, 24, 20, 3), dtype=np.uint8)


def test_clip_frames_are_sampled_and_prepared_as_transformers_does(checkpoint, model):
    from transformers.video_utils import VideoMetadata, default_sample_indices_fn

    clip = _clip(10)
    indices = default_sample_indices_fn(VideoMetadata(total_num_frames=10), num_frames=4)
    expected = theirs(checkpoint, clip[indices])
    assert_top_5(keras_vit.classify_video(model, clip)[0], expected)


def test_uint8_and_float_frames_give_the_same_classes(model):
    """Frames of the model's size (no resize, whose rounding differs): uint8
    and float pixels in [0, 255] are the same clip."""
    clip = np.random.default_rng(3).integers(0, 256, (2, 4, 16, 16, 3), dtype=np.uint8)
    uint8, floats = keras_vit.classify_video(model, [clip[0], clip[0].astype("float32")])
    assert [p.index for p in uint8] == [p.index for p in floats]
    np.testing.assert_allclose([p.probability for p in uint8], [p.probability for p in floats], rtol=0, atol=1e-6)
    assert len(keras_vit.classify_video(model, clip, top=2)) == 2  # a (clips, frames, H, W, C) batch


def test_a_folder_of_frames_is_read_in_name_order(checkpoint, model, tmp_path):
    from PIL import Image

    clip = _clip(4, seed=1)
    for i, frame in enumerate(clip):
        Image.fromarray(frame).save(tmp_path / f"frame_{i:03d}.png")
    (tmp_path / "notes.txt").write_text("not a frame")
    assert_top_5(keras_vit.classify_video(model, str(tmp_path))[0], theirs(checkpoint, clip))


def test_a_video_file_is_decoded_and_sampled(checkpoint, model, tmp_path):
    """A lossless video file (PNG frames in AVI, written by PyAV) gives the
    classes of its frames sampled as transformers samples them."""
    av = pytest.importorskip("av")
    from transformers.video_utils import VideoMetadata, default_sample_indices_fn

    clip = _clip(7, seed=4)
    with av.open(str(tmp_path / "clip.avi"), "w") as container:
        stream = container.add_stream("png", rate=5)
        stream.width, stream.height, stream.pix_fmt = 20, 24, "rgb24"
        for frame in clip:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    indices = default_sample_indices_fn(VideoMetadata(total_num_frames=7), num_frames=4)
    expected = theirs(checkpoint, clip[indices])
    assert_top_5(keras_vit.classify_video(model, str(tmp_path / "clip.avi"))[0], expected)


def test_a_short_clip_repeats_its_frames_in_order(checkpoint, model):
    clip = _clip(3, seed=2)
    assert_top_5(keras_vit.classify_video(model, clip)[0], theirs(checkpoint, clip[[0, 0, 1, 2]]))


@runs_once("torch", "argument checks")
def test_sampling_and_bad_clips(model, tmp_path, monkeypatch):
    from transformers.video_utils import VideoMetadata, default_sample_indices_fn

    for total in (4, 7, 16, 33):
        expected = default_sample_indices_fn(VideoMetadata(total_num_frames=total), num_frames=4)
        assert sample_frames(total, 4).tolist() == expected.tolist()
    with pytest.raises(ValueError, match="holds no frame image"):
        keras_vit.classify_video(model, str(tmp_path))
    with pytest.raises(ValueError, match="neither a folder nor a file"):
        keras_vit.classify_video(model, str(tmp_path / "missing.mp4"))
    (tmp_path / "clip.mp4").write_bytes(b"")
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "av", None)
        with pytest.raises(ImportError, match=r"pip install keras_vit\[video\]"):
            keras_vit.classify_video(model, str(tmp_path / "clip.mp4"))
    with pytest.raises(ValueError, match=r"an array of shape \(4, 5\)"):
        keras_vit.classify_video(model, [np.zeros((4, 5), "uint8")])
    image_model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=8,
                                classes=2, preprocessing=Preprocessing.from_mode("imagenet"))
    with pytest.raises(ValueError, match="takes images, not clips"):
        keras_vit.classify_video(image_model, _clip(4))
