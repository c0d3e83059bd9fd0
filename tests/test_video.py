"""Video clips in the generic `ViT`: tubelet patches against NumPy, VideoMAE's
sinusoid table against transformers', the video position table's resize
against SciPy, and the model's video options (clips of any length and size,
`.keras` saving, refusals). Each family's parity: test_video_families.py."""

import keras
import numpy as np
import pytest
import scipy.ndimage

import keras_vit
from conftest import every_backend, runs_once, spread, to_numpy
from keras_vit import layers
from keras_vit.layers.sincos import sinusoid_position_embedding

pytestmark = spread("checks of one code path each: the layers' ops are held on every backend by their "
                    "contracts (test_layer_contracts.py); each check once")

TINY = dict(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=3,
            num_frames=4, tubelet_size=2, classifier="token")


def np_tubelets(clips, t, ph, pw):
    """Tubelets by explicit slicing, flattened in (frame, row, column, channel) order."""
    b, f, h, w, c = clips.shape
    out = np.zeros((b, f // t, h // ph, w // pw, t * ph * pw * c), clips.dtype)
    for k in range(f // t):
        for i in range(h // ph):
            for j in range(w // pw):
                out[:, k, i, j] = clips[:, k * t:(k + 1) * t, i * ph:(i + 1) * ph, j * pw:(j + 1) * pw].reshape(b, -1)
    return out


@pytest.fixture(scope="module")
def model():
    return keras_vit.ViT(**TINY, seed=0)


def test_tubelets_match_slicing(rng):
    clips = rng.normal(size=(2, 6, 8, 12, 3)).astype("float32")
    out = layers.Patches((4, 2), tubelet_size=3)(clips)
    np.testing.assert_array_equal(to_numpy(out), np_tubelets(clips, 3, 4, 2))
    cropped = layers.Patches(4, tubelet_size=4, crop=True)(clips[:, :, :8, :8])
    np.testing.assert_array_equal(to_numpy(cropped), np_tubelets(clips[:, :4, :8, :8], 4, 4, 4))
    with pytest.raises(ValueError, match="frames must be divisible by the tubelet size"):
        layers.Patches(4, tubelet_size=4)(clips)


@pytest.mark.parametrize("length", [8, 13])
def test_sinusoid_table_is_videomae_table(length):
    videomae = pytest.importorskip("transformers.models.videomae.modeling_videomae")
    expected = videomae.get_sinusoid_encoding_table(length, 12).numpy()
    np.testing.assert_allclose(to_numpy(sinusoid_position_embedding(length, 12)), expected, rtol=0, atol=1e-6)
    # A length known only at run time: the same table from the graph's ops.
    traced = sinusoid_position_embedding(keras.ops.convert_to_tensor(length), 12)
    np.testing.assert_allclose(to_numpy(traced), expected, rtol=0, atol=1e-5)


@runs_once("torch", "the resize's keras.ops are those of the images' resize, held on every backend by "
                    "test_posemb_interpolation.py")
def test_video_table_resize_equals_scipy_zoom(rng):
    """A learned (time, row, column) table resized to another clip is SciPy's
    corner-aligned linear zoom on the three axes (the official resize)."""
    encoder = layers.PatchEncoder(6, 2, (2, 3, 4), tubelet_size=2)
    encoder.build((None, 2, 3, 4, 24))
    pos = rng.normal(size=(1, 1 + 2 * 3 * 4, 6)).astype("float32")
    encoder.pos_embedding.assign(pos)
    new_grid = (3, 5, 2)
    resized = to_numpy(encoder.position_embedding_for(new_grid))
    grid = pos[0, 1:].reshape(2, 3, 4, 6).astype("float64")
    expected = scipy.ndimage.zoom(grid, (3 / 2, 5 / 3, 2 / 4, 1), order=1).reshape(1, -1, 6)
    np.testing.assert_array_equal(resized[:, :1], pos[:, :1])
    np.testing.assert_allclose(resized[:, 1:], expected, atol=1e-5)


@every_backend("a video model's graph and predict, on each backend")
def test_video_model_takes_clips_of_other_lengths_and_sizes(model, rng):
    # Another length and size than the table's (4 frames of 16 x 16).
    assert model.predict(rng.normal(size=(1, 6, 24, 16, 3)).astype("float32"), verbose=0).shape == (1, 3)


@runs_once("torch", "the features' layout is read from the patches' shape, whatever the backend")
def test_intermediates_of_clips_lie_on_their_tubelet_grid(model, rng):
    clips = rng.normal(size=(2, 4, 16, 16, 3)).astype("float32")
    final, features = model.forward_intermediates(clips, indices=1)
    assert tuple(final.shape) == (2, 1 + 2 * 2 * 2, 16)
    assert tuple(features[0].shape) == (2, 2, 2, 2, 16)  # (time, row, column) of tubelets


def test_video_model_reloads_from_keras_file(model, rng, tmp_path):
    clips = rng.normal(size=(1, 4, 16, 16, 3)).astype("float32")
    model.save(tmp_path / "video.keras")
    again = keras.models.load_model(tmp_path / "video.keras")
    assert (again.num_frames, again.tubelet_size) == (4, 2)
    np.testing.assert_allclose(to_numpy(again(clips)), to_numpy(model(clips)), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(num_frames=None), "`tubelet_size` groups the frames of a clip"),
        (dict(num_frames=5), "`num_frames` must be a multiple of `tubelet_size`"),
        (dict(position_embedding="sincos"), "takes a position_embedding of"),
        (dict(classifier="gap", neck_channels=8), "has no convolutional neck"),
        (dict(rope="dinov3", position_embedding="none"), "a video model \\(num_frames\\) takes none of them"),
        (dict(classifier="gap", window_size=2), "a video model \\(num_frames\\) takes none of them"),
        (dict(pooled_norm_epsilon=0.0), "pooled_norm_epsilon"),
    ],
)
def test_bad_video_options_are_named(change, match):
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT(**dict(TINY, **change))


@runs_once("torch", "the refusal reads the model's config before any exporter runs")
def test_video_models_are_not_exported_yet(model, tmp_path):
    with pytest.raises(ValueError, match="Video models are not exported yet.*num_frames=4"):
        model.export(str(tmp_path / "video.onnx"), format="onnx")


def test_images_given_to_a_video_model_are_refused(model):
    with pytest.raises(ValueError, match=r"must be a batch of clips: .* takes \(batch, frames, height, width, 3\)"):
        model(np.zeros((1, 16, 16, 3), "float32"))
    with pytest.raises(ValueError, match="frame count must be a multiple of 2"):
        model(np.zeros((1, 3, 16, 16, 3), "float32"))
