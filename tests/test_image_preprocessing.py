"""`ImagePreprocessing`: a checkpoint's resize, crop and scaling in the graph,
against the preparation of `keras_vit.classify` (Pillow, then `preprocess_input`)."""

import numpy as np
import pytest

from conftest import inference
from harness import run_layer_test
from keras_vit.layers import ImagePreprocessing
from keras_vit.layers.image_preprocessing import _pillow_vertical_first
from keras_vit.preprocessing import Preprocessing, preprocess_input, resize_and_crop

RECORDS = {
    # DeiT's: shorter side to 256/224 of the crop, bicubic, ImageNet statistics.
    "shorter-side-bicubic": Preprocessing.from_mode("imagenet", image_size=32, crop_fraction=0.875),
    # ViT's processor: straight to the input size, aspect ratio not kept.
    "straight-bilinear": Preprocessing.from_mode("inception", image_size=(24, 40), interpolation="bilinear"),
    "exact-lanczos": Preprocessing(image_size=24, resize=(30, 44), interpolation="lanczos"),
    "shorter-side-hamming": Preprocessing(image_size=24, resize=28, interpolation="hamming",
                                          mean=(0.48, 0.46, 0.41), std=(0.27, 0.26, 0.28)),
}


@pytest.fixture(scope="module")
def photos():
    import skimage.data

    rng = np.random.default_rng(0)
    # A photo, random pixels upscaled on one axis, a tall strip.
    return [skimage.data.chelsea(), rng.integers(0, 256, (23, 131, 3), dtype="uint8"),
            rng.integers(0, 256, (400, 37, 3), dtype="uint8")]


def _levels(got, expected, record):
    """Per-value differences in 8-bit pixel levels."""
    return np.abs(got - expected) * 255 * np.asarray(record.std)


@pytest.mark.parametrize("name", RECORDS)
def test_images_are_prepared_as_classify_prepares_them(name, photos):
    record = RECORDS[name]
    layer = ImagePreprocessing(**record.get_config())
    for photo in photos:
        expected = preprocess_input(resize_and_crop(photo, record).astype("float32"), preprocessing=record)
        got = inference(layer, photo[None])[0]
        levels = _levels(got, expected, record)
        # A float32 weight one off in its last fixed-point bit next to a
        # half-level (Pillow's are float64): rare, one level.
        assert levels.max() <= 1.001 and (levels > 1e-3).mean() <= 5e-3, (name, photo.shape, levels.max())


def test_the_passes_run_in_the_installed_pillows_order(photos):
    """Pillow 13 runs the vertical pass first where the height shrinks by far
    more pixels than the width: the other order gives other pixels."""
    record = Preprocessing(image_size=(16, 30), interpolation="bicubic")
    tall = photos[2]  # 400 x 37 -> 16 x 30: the height shrinks far more
    expected = preprocess_input(resize_and_crop(tall, record).astype("float32"), preprocessing=record)
    installed = _pillow_vertical_first()
    for vertical_first in (installed, not installed):
        layer = ImagePreprocessing(**record.get_config(), vertical_first=vertical_first)
        off = (_levels(inference(layer, tall[None])[0], expected, record) > 0.5).mean()
        assert (off <= 1e-3) == (vertical_first == installed), (vertical_first, off)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(interpolation="nearest"), r"`interpolation` must be one of .*'bicubic'.*Received: interpolation='nearest'"),
        (dict(interpolation="box"), "Received: interpolation='box'"),
        (dict(resize=0), "Received: resize=0"),
        (dict(mean=(0.5, 0.5), std=(0.5,)), "one value per channel"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ImagePreprocessing(image_size=8, **kwargs)
    with pytest.raises(ValueError, match="3 channels"):
        ImagePreprocessing(image_size=8)(np.zeros((1, 9, 9, 4), "uint8"))


def test_layer_contract():
    images = np.random.default_rng(1).integers(0, 256, (2, 9, 12, 3)).astype("float32")
    _, outputs = run_layer_test(
        lambda **kw: ImagePreprocessing(image_size=4, resize=6, **kw), images, (2, 4, 4, 3), training=False
    )
    assert np.all(np.isfinite(outputs)) and np.abs(outputs).max() <= 1.0
