"""Recipes: schedule, optimizers, losses and gradient accumulation."""

import math

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import training
from tests.conftest import TINY, to_numpy
from conftest import spread

pytestmark = spread("schedules, losses and accumulation are keras.ops and Keras' optimizers over every "
                    "backend's trainer, held by the training tests; each case once")


def reference_lr(step, base, total, warmup, decay, end=0.0):
    """vit_jax `create_learning_rate_schedule`, written out in NumPy."""
    lr = base * min(1.0, step / warmup) if warmup else base
    progress = min(max((step - warmup) / max(total - warmup, 1), 0.0), 1.0)
    if decay == "cosine":
        return lr * 0.5 * (1 + math.cos(math.pi * progress))
    if decay == "linear":
        return end + (lr - end) * (1 - progress)
    return lr


@pytest.mark.parametrize("decay", ["cosine", "linear", "constant"])
def test_schedule_matches_reference(decay):
    schedule = training.WarmupDecay(0.03, total_steps=100, warmup_steps=10, decay=decay, end_learning_rate=1e-5)
    for step in (0, 1, 5, 10, 11, 50, 99, 100, 150):
        expected = reference_lr(step, 0.03, 100, 10, decay, end=1e-5)
        np.testing.assert_allclose(float(to_numpy(schedule(step))), expected, rtol=1e-5, atol=1e-9)


def test_schedule_counts_updates_not_micro_batches():
    plain = training.WarmupDecay(0.1, total_steps=20, warmup_steps=4)
    accumulated = training.WarmupDecay(0.1, total_steps=20, warmup_steps=4, steps_per_update=3)
    for update in range(20):
        for micro in range(3):
            np.testing.assert_allclose(
                float(to_numpy(accumulated(3 * update + micro))), float(to_numpy(plain(update))), rtol=1e-6
            )


def test_schedule_round_trips_config():
    schedule = training.WarmupDecay(0.01, total_steps=7, warmup_steps=2, decay="linear", steps_per_update=2)
    clone = training.WarmupDecay.from_config(schedule.get_config())
    assert clone.get_config() == schedule.get_config()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(base_learning_rate=0.1, total_steps=0), "total_steps"),
        (dict(base_learning_rate=0.1, total_steps=5, warmup_steps=6), "warmup_steps"),
        (dict(base_learning_rate=0.1, total_steps=5, decay="step"), "decay"),
        (dict(base_learning_rate=-1.0, total_steps=5), "base_learning_rate"),
    ],
)
def test_schedule_validates(kwargs, message):
    with pytest.raises(ValueError, match=message):
        training.WarmupDecay(**kwargs)


def test_finetune_optimizer_is_the_paper_recipe():
    opt = training.finetune_optimizer(1000, device_batch_size=128)
    assert isinstance(opt, keras.optimizers.SGD)
    assert opt.momentum == 0.9 and opt.global_clipnorm == 1.0
    assert not opt.weight_decay
    assert opt.gradient_accumulation_steps == 4
    schedule = opt.get_config()["learning_rate"]["config"]
    # The paper's 500 warm-up updates, at most a fifth of the run.
    assert schedule["base_learning_rate"] == 0.03 and schedule["warmup_steps"] == 200
    assert schedule["decay"] == "cosine" and schedule["steps_per_update"] == 4
    assert training.finetune_optimizer(10).gradient_accumulation_steps is None
    with pytest.raises(ValueError, match="device_batch_size"):
        training.finetune_optimizer(10, global_batch_size=512, device_batch_size=100)


def test_pretrain_optimizer_is_adamw():
    opt = training.pretrain_optimizer(100, warmup_steps=10, weight_decay=0.3, exclude_from_weight_decay=["bias"])
    assert isinstance(opt, keras.optimizers.AdamW)
    assert (opt.beta_1, opt.beta_2) == (0.9, 0.999)
    assert opt.weight_decay == 0.3 and opt.global_clipnorm == 1.0
    assert opt.get_config()["learning_rate"]["config"]["decay"] == "linear"


def test_scaled_learning_rate():
    assert training.scaled_learning_rate(0.03, 1024) == pytest.approx(0.06)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("from_logits", [True, False])
def test_loss_matches_numpy(smoothing, from_logits, rng):
    logits = rng.normal(size=(6, 5)).astype("float32")
    labels = rng.integers(0, 5, size=6)
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    target = np.eye(5)[labels] * (1 - smoothing) + smoothing / 5
    expected = -(target * np.log(probs)).sum(-1).mean()
    loss = training.classification_loss(from_logits=from_logits, label_smoothing=smoothing)
    got = loss(labels, logits if from_logits else probs)
    np.testing.assert_allclose(float(to_numpy(got)), expected, rtol=1e-5)


def _tiny_model():
    return keras_vit.ViT(**TINY, classes=3, classifier_activation=None)


def _one_update(optimizer, batches, weights):
    model = _tiny_model()
    model.set_weights(weights)
    model.compile(optimizer=optimizer, loss=training.classification_loss(from_logits=True))
    for x, y in batches:
        model.train_on_batch(x, y)
    return model


@pytest.mark.parametrize("recipe", ["plain_sgd", "finetune_recipe"])
def test_gradient_accumulation_equals_large_batch(recipe, rng):
    k, micro = 2, 4
    x = rng.uniform(-1, 1, size=(k * micro, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 3, size=k * micro)
    reference = _tiny_model()
    # A non-zero head, so that every weight receives a gradient.
    weights = [w + 0.05 * rng.normal(size=w.shape).astype("float32") for w in reference.get_weights()]
    if recipe == "plain_sgd":
        big_opt = keras.optimizers.SGD(0.5)
        acc_opt = keras.optimizers.SGD(0.5, gradient_accumulation_steps=k)
        updates = 1
    else:
        args = dict(total_steps=4, base_lr=0.5, warmup_steps=1, global_batch_size=k * micro)
        big_opt = training.finetune_optimizer(**args)
        acc_opt = training.finetune_optimizer(**args, device_batch_size=micro)
        updates = 3  # warm-up gives 0 at update 0; momentum and decay after
    big = _one_update(big_opt, [(x, y)] * updates, weights)
    parts = [(x[i * micro : (i + 1) * micro], y[i * micro : (i + 1) * micro]) for i in range(k)]
    acc = _one_update(acc_opt, parts * updates, weights)
    assert int(to_numpy(acc.optimizer.iterations)) == int(to_numpy(big.optimizer.iterations)) == updates
    changed = 0
    for w0, a, b in zip(weights, acc.get_weights(), big.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
        changed += not np.allclose(a, w0)
    assert changed > len(weights) // 2


def test_compile_for_finetuning_fits(rng):
    model = keras_vit.ViT(**TINY, classes=2)
    training.compile_for_finetuning(model, total_steps=4, warmup_steps=1, base_lr=0.01)
    x = rng.uniform(-1, 1, size=(4, 32, 32, 3)).astype("float32")
    history = model.fit(x, np.array([0, 1, 0, 1]), epochs=1, verbose=0)
    assert "accuracy" in history.history
    with pytest.raises(ValueError, match="classifier_activation"):
        training.compile_for_finetuning(
            keras_vit.ViT(**TINY, classes=2, classifier_activation="sigmoid"), total_steps=4
        )


def _schedule(optimizer):
    return training.WarmupDecay(**optimizer.get_config()["learning_rate"]["config"])


@pytest.mark.parametrize("total", [10, 100, 500, 2_500, 20_000])
def test_default_warmup_is_at_most_a_fifth_of_the_run(total):
    """A 500-update fine-tune (the README's) warms up 100 updates, then decays:
    the rate peaks at update 100 and falls to 0 by update 500."""
    for optimizer, recipe_steps in ((training.finetune_optimizer, 500),
                                    (training.pretrain_optimizer, 10_000),
                                    (training.masked_patch_optimizer, 10_000)):
        schedule = _schedule(optimizer(total))
        expected = min(recipe_steps, total // 5)
        assert schedule.warmup_steps == expected, optimizer.__name__
        peak = float(schedule(expected))
        assert peak == pytest.approx(schedule.base_learning_rate)
        # The last fifth of the run learns at less than half the peak rate.
        assert float(schedule(int(total * 0.9))) < 0.5 * peak, optimizer.__name__


def test_explicit_warmup_longer_than_the_run_is_refused():
    with pytest.raises(ValueError, match="warmup_steps"):
        training.finetune_optimizer(100, warmup_steps=500)
    assert _schedule(training.finetune_optimizer(100, warmup_steps=100)).warmup_steps == 100
