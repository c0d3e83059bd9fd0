"""Fine-tuning the dense task models from folders of images with PNG masks or
depth maps (`keras_vit.tasks.dense_data`), with `model.fit` and the task's
losses and metrics; clear errors for bad data before training; EoMT's mask
annealing; sliding-window inference."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.tasks.dense_data import load_depth_folder, load_segmentation_folder
from keras_vit.tasks.mask_classification import MaskClassificationLoss
from keras_vit.tasks.dense_training import (
    AbsRel,
    Delta1,
    MaskAnnealing,
    SegmentationMeanIoU,
    SiLogLoss,
    sliding_window,
)
from conftest import spread

pytestmark = spread("the dense tasks' data, losses and fit over Keras' trainers, which the classifiers' "
                    "training tests hold on every backend; each case once")

Image = pytest.importorskip("PIL.Image")

COLOURS = np.array([[200, 30, 30], [30, 200, 30], [30, 30, 200]])
SIZE, CELL = 32, 8


def _write_folder(folder, count, seed):
    """Images of coloured 8x8 cells; the mask is the colour's class, the
    depth (millimetres, 16-bit) grows with it: learnable in a few steps."""
    rng = np.random.default_rng(seed)
    for kind in ("images", "masks", "depth"):
        os.makedirs(os.path.join(folder, kind))
    for i in range(count):
        cells = rng.integers(0, 3, (SIZE // CELL, SIZE // CELL))
        mask = np.kron(cells, np.ones((CELL, CELL), int))
        image = np.clip(COLOURS[mask] + rng.integers(-20, 20, (SIZE, SIZE, 3)), 0, 255).astype("uint8")
        Image.fromarray(image).save(os.path.join(folder, "images", f"{i:03d}.png"))
        Image.fromarray(mask.astype("uint8"), "L").save(os.path.join(folder, "masks", f"{i:03d}.png"))
        Image.fromarray((1000 * (1 + 2 * mask)).astype("uint16")).save(os.path.join(folder, "depth", f"{i:03d}.png"))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("dense_data")
    _write_folder(str(root / "train"), 24, seed=0)
    _write_folder(str(root / "test"), 8, seed=1)
    return str(root / "train"), str(root / "test")


def _encoder():
    return keras_vit.ViT(image_size=SIZE, patch_size=CELL, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
                         include_top=False)


def _compile(model, optimizer, **kwargs):
    """`model.compile(optimizer)`, the optimizer built as Keras builds it before
    `fit` on jax and torch: TensorFlow's trainer would make its slots inside
    the first trace of the train step, and trace the step a second time."""
    model.compile(optimizer=optimizer, **kwargs)
    model.optimizer.build(model.trainable_variables)


def _majority_iou(train_labels, test_labels, classes):
    """The mean IoU of labelling every pixel as the training pixels' most common class."""
    metric = SegmentationMeanIoU(classes)
    majority = np.bincount(train_labels.reshape(-1), minlength=classes).argmax()
    metric.update_state(test_labels, keras.utils.to_categorical(np.full_like(test_labels, majority), classes))
    return float(metric.result())


def test_eomt_fits_a_folder_of_masks(folders):
    model = keras_vit.Segmenter(_encoder(), classes=3, num_queries=4, num_blocks=1)
    x, y = load_segmentation_folder(folders[0], model)
    x_test, y_test = load_segmentation_folder(folders[1], model)
    assert x.shape == (24, SIZE, SIZE, 3) and y.dtype == np.int32
    # The published loss (the default), at fewer points than EoMT's 12544 for 16x16 masks.
    _compile(model, keras.optimizers.AdamW(3e-3), loss=MaskClassificationLoss(num_points=64))
    model.fit(x, y, batch_size=8, epochs=5, verbose=0, callbacks=[MaskAnnealing(steps=10)])
    assert float(model.eomt_head.mask_probability[0]) == 0.0
    _, miou = model.evaluate(x_test, y_test, verbose=0)
    baseline = _majority_iou(y, y_test, 3)
    assert miou > baseline + 0.3, (miou, baseline)


def test_annealed_masks_are_left_out_at_inference():
    """After `MaskAnnealing` brings a block's probability weight to 0, `predict`
    attends unmasked there, as training did: the model built with 0 (no
    masks, transformers' forward for `attn_mask_probs` 0), same weights."""
    model = keras_vit.Segmenter(_encoder(), classes=3, num_queries=4, num_blocks=1)
    unmasked = keras_vit.Segmenter(_encoder(), classes=3, num_queries=4, num_blocks=1, mask_probabilities=(0.0,))
    for target, source in zip(unmasked.weights, model.weights):
        target.assign(keras.ops.convert_to_numpy(source))
    images = np.random.default_rng(0).normal(size=(2, SIZE, SIZE, 3)).astype("float32")
    expected = unmasked.predict(images, verbose=0)["masks_queries_logits"]
    masked = model.predict(images, verbose=0)["masks_queries_logits"]
    assert np.abs(masked - expected).max() > 1e-3  # the masks change the output
    model.eomt_head.mask_probability.assign([0.0])
    np.testing.assert_allclose(model.predict(images, verbose=0)["masks_queries_logits"], expected, atol=1e-5)


def test_linear_head_on_a_frozen_encoder_fits(folders):
    encoder = _encoder()
    before = [keras.ops.convert_to_numpy(v) for v in encoder.weights]
    model = keras_vit.Segmenter(encoder, classes=3, head="linear")
    encoder.trainable = False
    x, y = load_segmentation_folder(folders[0], model)
    x_test, y_test = load_segmentation_folder(folders[1], model)
    _compile(model, keras.optimizers.AdamW(1e-2))
    model.fit(x, y, batch_size=8, epochs=6, verbose=0)
    _, miou = model.evaluate(x_test, y_test, verbose=0)
    assert miou > _majority_iou(y, y_test, 3) + 0.3
    assert all(np.array_equal(a, keras.ops.convert_to_numpy(b)) for a, b in zip(before, encoder.weights))


def test_depth_estimator_fits_a_folder_of_depth_maps(folders):
    model = keras_vit.DepthEstimator(_encoder(), (0, 1), (8, 16), (2, 0.5), fusion_size=8, head_size=8,
                                     depth="metric", max_depth=10.0)
    x, depth = load_depth_folder(folders[0], model)
    x_test, depth_test = load_depth_folder(folders[1], model)
    assert float(depth.max()) == 5.0  # millimetres to metres
    _compile(model, keras.optimizers.AdamW(3e-3))
    _, before, _ = model.evaluate(x_test, depth_test, verbose=0)
    model.fit(x, depth, batch_size=8, epochs=10, verbose=0)
    _, abs_rel, delta1 = model.evaluate(x_test, depth_test, verbose=0)
    valid = depth_test > 0
    baseline = np.mean(np.abs(np.median(depth[depth > 0]) - depth_test[valid]) / depth_test[valid])
    assert abs_rel < 0.6 * baseline and abs_rel < before, (abs_rel, baseline, before)
    assert 0.0 <= delta1 <= 1.0


def _copy_folder(source, target):
    import shutil

    shutil.copytree(source, target)
    return target


def test_bad_data_is_named_before_training(folders, tmp_path):
    model = keras_vit.Segmenter(_encoder(), classes=3, head="linear")
    folder = _copy_folder(folders[1], str(tmp_path / "classes"))
    Image.fromarray(np.full((SIZE, SIZE), 7, "uint8"), "L").save(os.path.join(folder, "masks", "002.png"))
    with pytest.raises(ValueError, match=r"002\.png.*class 7: the model has 3 classes"):
        load_segmentation_folder(folder, model)
    folder = _copy_folder(folders[1], str(tmp_path / "missing"))
    os.remove(os.path.join(folder, "masks", "004.png"))
    with pytest.raises(ValueError, match=r"004\.png.*has no mask"):
        load_segmentation_folder(folder, model)
    folder = _copy_folder(folders[1], str(tmp_path / "size"))
    Image.fromarray(np.zeros((SIZE, SIZE + 4), "uint16")).save(os.path.join(folder, "depth", "001.png"))
    depth_model = keras_vit.DepthEstimator(_encoder(), (0, 1), (8, 16), (2, 0.5), fusion_size=8)
    with pytest.raises(ValueError, match=r"001\.png.* is 32x36; its image .* is 32x32"):
        load_depth_folder(folder, depth_model)
    # A phone photo stored on its side: read upright, it no longer fits a mask drawn on its pixels.
    folder = _copy_folder(folders[1], str(tmp_path / "turned"))
    wide = Image.fromarray(np.zeros((SIZE, SIZE + 8, 3), "uint8"))
    exif = wide.getexif()
    exif[0x0112] = 6
    wide.save(os.path.join(folder, "images", "003.png"), exif=exif)
    Image.fromarray(np.zeros((SIZE, SIZE + 8), "uint8"), "L").save(os.path.join(folder, "masks", "003.png"))
    with pytest.raises(ValueError, match=r"003\.png.* is 32x40; its image .* is 40x32: .*EXIF orientation"):
        load_segmentation_folder(folder, model)
    folder = _copy_folder(folders[1], str(tmp_path / "colour"))
    Image.fromarray((np.zeros((SIZE, SIZE, 3)) + [1, 2, 3]).astype("uint8")).save(os.path.join(folder, "masks", "000.png"))
    with pytest.raises(ValueError, match=r"000\.png.*colour image"):
        load_segmentation_folder(folder, model)


def test_depth_metrics_and_loss_against_numpy():
    rng = np.random.default_rng(0)
    true = rng.uniform(0.5, 5, (2, 6, 7)).astype("float32")
    true[0, :2] = 0  # no depth there
    pred = (true * rng.uniform(0.8, 1.5, true.shape)).astype("float32") + 0.01
    valid = true > 0
    abs_rel, delta1 = AbsRel(), Delta1()
    abs_rel.update_state(true, pred)
    delta1.update_state(true, pred)
    ratio = np.maximum(pred[valid] / true[valid], true[valid] / pred[valid])
    np.testing.assert_allclose(float(abs_rel.result()), np.mean(np.abs(pred - true)[valid] / true[valid]), rtol=1e-5)
    np.testing.assert_allclose(float(delta1.result()), np.mean(ratio < 1.25), rtol=1e-6)
    losses = []
    for t, p in zip(true, pred):
        g = np.log(p[t > 0]) - np.log(t[t > 0])
        losses.append(np.sqrt(np.mean(g**2) - 0.85 * np.mean(g) ** 2))
    np.testing.assert_allclose(float(SiLogLoss()(true, pred)), np.mean(losses), rtol=1e-5)


def test_sliding_window_covers_a_larger_image():
    model = keras_vit.Segmenter(_encoder(), classes=3, head="linear")
    image = np.random.default_rng(0).normal(size=(SIZE, SIZE, 3)).astype("float32")
    scores = model.class_log_probabilities(model.predict(image[None], verbose=0), (SIZE, SIZE))
    whole = keras.ops.convert_to_numpy(scores)
    np.testing.assert_allclose(sliding_window(model, image), whole[0], atol=1e-5)
    large = np.random.default_rng(1).normal(size=(56, 40, 3)).astype("float32")
    out = sliding_window(model, large, stride=8)
    assert out.shape == (56, 40, 3)
    # The bottom-right window alone, where no other overlaps its last pixels.
    corner = model.class_log_probabilities(model.predict(large[None, 24:, 8:], verbose=0), (SIZE, SIZE))
    np.testing.assert_allclose(out[-1, -1], keras.ops.convert_to_numpy(corner)[0, -1, -1], atol=1e-5)
