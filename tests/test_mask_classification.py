"""EoMT's mask-classification loss (`keras_vit.tasks.mask_classification`):
equal to transformers' `EomtForUniversalSegmentation` loss on the same batch
and the same random points, with instance and semantic labels; `fit` with it
under each backend's trainer (the matching runs on the host inside the
step); what a fine-tuned model records and says."""

import numpy as np
import pytest

import keras
import keras_vit
from conftest import every_backend, runs_once, spread
from dense_dirs import eomt_config, save_random
from keras_vit.tasks.mask_classification import MaskClassificationLoss
from keras_vit.tasks.segmentation_outputs import SUBTASKS

pytestmark = spread("the loss is keras.ops, the same code on every backend; each label kind once")

NUM_POINTS = 64
# Two images, three and four segments (classes 0-2 of the tiny EoMT; 255: no label).
SEGMENTS = (
    ((0, 0, np.s_[:, :12]), (1, 2, np.s_[:16, 12:]), (2, 2, np.s_[20:, 14:30])),
    ((0, 1, np.s_[:10, :]), (1, 0, np.s_[10:20, :20]), (2, 1, np.s_[22:, 3:17]), (3, 2, np.s_[12:30, 22:])),
)


def _labels():
    """`(batch, 32, 32, 2)` class and segment-id maps."""
    labels = np.full((len(SEGMENTS), 32, 32, 2), 255, "int32")
    for image, segments in zip(labels, SEGMENTS):
        for segment, label, where in segments:
            image[where] = (label, segment)
    return labels


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A random tiny EoMT saved by transformers (masked attention on), in training mode."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("eomt_loss")
    model = save_random(transformers.EomtForUniversalSegmentation, eomt_config(transformers, train_num_points=NUM_POINTS),
                        folder, seed=3, mask_probability=1.0)
    with torch.no_grad():  # the loss's class weights, moved by the randomisation
        model.criterion.empty_weight.copy_(torch.tensor([1.0, 1.0, 1.0, 0.1]))
    return str(folder), model.train()


def _transformers_loss(model, images, masks, classes):
    """transformers' loss and every uniform draw its loss made (`torch.rand`), in order."""
    import torch

    draws, real = [], torch.rand

    def recorded(*args, **kwargs):
        draws.append(real(*args, **kwargs))
        return draws[-1]

    torch.manual_seed(0)
    torch.rand = recorded
    try:
        out = model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)),
                    mask_labels=[torch.from_numpy(m.astype("float32")) for m in masks],
                    class_labels=[torch.from_numpy(c.astype("int64")) for c in classes])
    finally:
        torch.rand = real
    return float(out.loss.detach()), [d.numpy() for d in draws]


def _points(draws, counts, loss, predictions, slots):
    """transformers' draws laid out as `MaskClassificationLoss.components`
    takes them: per prediction, each image's matching points, then the
    candidate and uniform points of the matched masks of the batch
    (in image and query order) in each image's first slots."""
    out, draws = [], iter(draws)
    for _ in range(predictions):
        shapes = loss.point_shapes(len(counts), slots)
        matching = np.concatenate([next(draws) for _ in counts])
        candidates, uniform = next(draws), next(draws)
        laid = {"matching": matching}
        for key, drawn in (("candidates", candidates), ("uniform", uniform)):
            laid[key] = np.zeros(shapes[key], "float32")
            start = np.cumsum([0, *counts])
            for image, count in enumerate(counts):
                laid[key][image, :count] = drawn[start[image] : start[image] + count]
        out.append(laid)
    return out


@pytest.mark.parametrize("kind", ["instances", "semantic"])
def test_loss_matches_transformers(checkpoint, kind):
    """The total over the intermediate and final predictions (deep
    supervision: three predictions of two blocks with queries), at 1e-4:
    instance labels (segment-id maps) and semantic labels (each class present
    a segment)."""
    folder, reference = checkpoint
    labels = _labels()
    images = np.random.default_rng(1).normal(size=(2, 32, 32, 3)).astype("float32")
    if kind == "instances":
        segments = [[segment for segment, _, _ in image] for image in SEGMENTS]
        masks = [np.stack([labels[b, ..., 1] == s for s in image]) for b, image in enumerate(segments)]
        classes = [np.array([label for _, label, _ in image]) for image in SEGMENTS]
    else:
        labels = labels[..., 0]
        classes = [np.unique(image[image != 255]) for image in labels]
        masks = [np.stack([image == c for c in present]) for image, present in zip(labels, classes)]
    expected, draws = _transformers_loss(reference, images, masks, classes)

    model = keras_vit.from_preset(folder)
    loss = MaskClassificationLoss(num_points=NUM_POINTS)
    predictions = model.supervised_predictions(model(images, training=True))
    assert len(predictions) == 3
    slots = min(model.num_queries, 3 if kind == "semantic" else loss.max_segments)
    points = _points(draws, [len(c) for c in classes], loss, len(predictions), slots)
    total = float(keras.ops.convert_to_numpy(loss.weighted_total(loss.components(labels, predictions, points))))
    np.testing.assert_allclose(total, expected, rtol=1e-4)
    # The points matter: other uniform points give another loss.
    other = [dict(p, uniform=1.0 - p["uniform"]) for p in points]
    moved = float(keras.ops.convert_to_numpy(loss.weighted_total(loss.components(labels, predictions, other))))
    assert abs(moved - expected) > 1e-3 * expected


@every_backend("the matching's host call (jax's pure_callback, TensorFlow's numpy_function, torch) and each "
               "backend's trainer")
def test_fit_trains_on_segments():
    """`fit` on class and segment-id maps: the loss falls, the queries
    move, the points are drawn anew at each step, the model records that it
    learnt all three tasks (saved in its config); on TensorFlow its steps
    stay out of XLA."""
    encoder = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
                            include_top=False)
    model = keras_vit.Segmenter(encoder, classes=3, num_queries=5, num_blocks=1)
    model.compile(optimizer=keras.optimizers.AdamW(1e-2), loss=MaskClassificationLoss(num_points=NUM_POINTS, seed=0))
    assert model.trained_tasks is None
    queries = keras.ops.convert_to_numpy(model.queries.weights[0])
    images = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype("float32")
    history = model.fit(images, _labels(), batch_size=2, epochs=6, verbose=0).history["loss"]
    assert np.isfinite(history).all() and history[-1] < history[0], history
    assert np.abs(keras.ops.convert_to_numpy(model.queries.weights[0]) - queries).max() > 1e-3
    assert model.trained_tasks == SUBTASKS and model.get_config()["trained_tasks"] == list(SUBTASKS)
    # The points are drawn anew at each step, from the model's seed generator:
    # per step one draw for the masked attention, three per prediction (two).
    assert keras.ops.convert_to_numpy(model.seed_generator.state)[1] == 6 * (1 + 3 * 2)
    if keras.backend.backend() == "tensorflow":
        assert model.jit_compile is False


@runs_once("torch", "argument checks and a warning of `segment`, before any backend work")
def test_semantic_only_models_say_so_and_bad_arguments_are_named(recwarn):
    encoder = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                            include_top=False)
    processing = keras_vit.DenseProcessing(size=(32, 32), resize="shorter_side", pad="end")
    model = keras_vit.Segmenter(encoder, classes=2, num_queries=3, num_blocks=1, trained_tasks=["semantic"],
                                preprocessing=processing)
    image = np.zeros((32, 32, 3), "uint8")
    keras_vit.segment(model, image, task="semantic")
    assert not [w for w in recwarn.list if "fine-tuned" in str(w.message)]
    with pytest.warns(UserWarning, match="fine-tuned for semantic segmentation only"):
        keras_vit.segment(model, image, task="panoptic")
    with pytest.raises(ValueError, match="`trained_tasks` must be None or some of"):
        keras_vit.Segmenter(encoder, classes=2, num_queries=3, num_blocks=1, trained_tasks=["depth"])
    linear = keras_vit.Segmenter(encoder, classes=2, head="linear")
    with pytest.raises(ValueError, match="MaskClassificationLoss trains queries: it takes head='eomt'"):
        linear.compile(loss=MaskClassificationLoss())
    with pytest.raises(ValueError, match="importance_sample_ratio"):
        MaskClassificationLoss(importance_sample_ratio=1.5)
    with pytest.raises(ValueError, match="cannot all be 0"):
        MaskClassificationLoss(class_weight=0, mask_weight=0, dice_weight=0)
    loss = MaskClassificationLoss(num_points=10, seed=3)
    assert MaskClassificationLoss.from_config(loss.get_config()).get_config() == loss.get_config()
