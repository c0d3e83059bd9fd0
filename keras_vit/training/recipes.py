"""Optimizers, schedules and losses of the ViT paper's training recipes.

Fine-tuning (§4.1, App. B.1.1, Table 4): SGD with momentum 0.9, gradient
clipping at global norm 1, linear warm-up then cosine decay, no weight decay,
batch 512. Pre-training (§4.1, Table 3): Adam (β1 0.9, β2 0.999) with
decoupled weight decay, linear warm-up then linear (or cosine) decay.

Everything returned is a stock Keras object (`keras.optimizers.SGD`,
`keras.optimizers.AdamW`, `keras.losses.*`), except the schedule, a small
`LearningRateSchedule` subclass that counts parameter updates rather than
micro-batches (see `WarmupDecay`).

Learning rate and batch size: the paper's learning rates belong to its
global batch (512 for fine-tuning, 4096 for pre-training). When the global
batch is reached with gradient accumulation the recipe is unchanged. For a
different global batch, scale the learning rate linearly with it
(`scaled_learning_rate`), the usual rule for SGD; the paper itself does not
test other batch sizes.
"""

import math

import keras
from keras import ops

from keras_vit.validation import (
    argument_names,
    check_choice,
    check_float,
    check_int,
    check_keywords,
)

DECAYS = ("cosine", "linear", "constant")
# The largest share of a run a default warm-up takes (AugReg's transfer
# configs warm up 100 of 500 updates).
WARMUP_FRACTION = 0.2


def default_warmup_steps(total_steps, recipe_steps):
    """The warm-up a recipe takes when none is given.

    The recipe's own number of warm-up updates, but never more than a fifth
    of the run (`WARMUP_FRACTION`), so that a short run still decays.

    Args:
        total_steps: int, parameter updates of the run.
        recipe_steps: int, the recipe's warm-up (e.g. 500 for fine-tuning).

    Returns:
        int, `min(recipe_steps, total_steps // 5)`.

    Example:

    >>> default_warmup_steps(500, 500), default_warmup_steps(20_000, 500)
    (100, 500)
    """
    check_int(total_steps, "total_steps", minimum=1)
    check_int(recipe_steps, "recipe_steps", minimum=0)
    return min(recipe_steps, int(total_steps * WARMUP_FRACTION))


def _warmup(warmup_steps, total_steps, recipe_steps):
    """An explicit warm-up as given (checked by `WarmupDecay`), else the default."""
    if warmup_steps is None:
        return default_warmup_steps(total_steps, recipe_steps)
    return warmup_steps


@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0, then cosine, linear or no decay.

    The schedule of the official fine-tuning code (`vit_jax`): at update `t`
    the rate is `base_lr * min(1, t / warmup_steps) * f(p)` with
    `p = (t - warmup_steps) / (total_steps - warmup_steps)` clipped to [0, 1]
    and `f(p) = 0.5 * (1 + cos(pi * p))` (cosine), `1 - p` (linear, ending at
    `end_learning_rate`) or 1 (constant).

    Keras optimizers evaluate schedules at every micro-batch when
    `gradient_accumulation_steps=k` is set. `steps_per_update=k` makes the
    schedule count parameter updates instead, so that accumulating `k`
    micro-batches follows exactly the schedule of one `k` times larger batch.

    Args:
        base_learning_rate: float, the peak rate reached after warm-up.
        total_steps: int, parameter updates of the whole run.
        warmup_steps: int, default 0, updates of linear warm-up.
        decay: "cosine" (default), "linear" or "constant".
        end_learning_rate: float, default 0, the final rate of linear decay.
        steps_per_update: int, default 1, optimizer iterations per update.

    Example:

    >>> schedule = WarmupDecay(0.1, total_steps=10, warmup_steps=2)
    >>> [round(float(schedule(s)), 3) for s in (0, 1, 2, 6, 10)]
    [0.0, 0.05, 0.1, 0.05, 0.0]
    """

    def __init__(
        self,
        base_learning_rate,
        total_steps,
        warmup_steps=0,
        decay="cosine",
        end_learning_rate=0.0,
        steps_per_update=1,
        name="warmup_decay",
    ):
        super().__init__()
        self.base_learning_rate = check_float(base_learning_rate, "base_learning_rate", minimum=0.0)
        self.total_steps = check_int(total_steps, "total_steps", minimum=1)
        self.warmup_steps = check_int(warmup_steps, "warmup_steps", minimum=0)
        if self.warmup_steps > self.total_steps:
            raise ValueError(
                "`warmup_steps` must not exceed `total_steps`. Received: "
                f"warmup_steps={warmup_steps}, total_steps={total_steps}"
            )
        check_choice(decay, DECAYS, "decay")
        self.decay = decay
        self.end_learning_rate = check_float(end_learning_rate, "end_learning_rate", minimum=0.0)
        self.steps_per_update = check_int(steps_per_update, "steps_per_update", minimum=1)
        self.name = name

    def __call__(self, step):
        step = ops.cast(step, "float32")
        if self.steps_per_update > 1:
            step = ops.floor(step / self.steps_per_update)
        lr = ops.convert_to_tensor(self.base_learning_rate, "float32")
        if self.warmup_steps > 0:
            lr = lr * ops.minimum(1.0, step / self.warmup_steps)
        span = max(self.total_steps - self.warmup_steps, 1)
        progress = ops.clip((step - self.warmup_steps) / span, 0.0, 1.0)
        if self.decay == "cosine":
            lr = lr * 0.5 * (1.0 + ops.cos(math.pi * progress))
        elif self.decay == "linear":
            end = self.end_learning_rate
            lr = end + (lr - end) * (1.0 - progress)
        return lr

    def get_config(self):
        return {
            "base_learning_rate": self.base_learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
            "end_learning_rate": self.end_learning_rate,
            "steps_per_update": self.steps_per_update,
            "name": self.name,
        }


def accumulation_steps(global_batch_size, device_batch_size=None):
    """Micro-batches per update to reach `global_batch_size`.

    Args:
        global_batch_size: int, examples per parameter update.
        device_batch_size: int or None (default: no accumulation), examples
            that fit through the model at once (over all replicas).

    Returns:
        int `k >= 1` with `k * device_batch_size == global_batch_size`.
    """
    check_int(global_batch_size, "global_batch_size", minimum=1)
    if device_batch_size is None:
        return 1
    check_int(device_batch_size, "device_batch_size", minimum=1)
    if global_batch_size % device_batch_size:
        raise ValueError(
            "`global_batch_size` must be a multiple of `device_batch_size`. "
            f"Received: global_batch_size={global_batch_size}, "
            f"device_batch_size={device_batch_size}"
        )
    return global_batch_size // device_batch_size


def scaled_learning_rate(base_learning_rate, global_batch_size, reference_batch_size=512):
    """The linear-scaling rule: `base_lr * global_batch / reference_batch`.

    Example:

    >>> scaled_learning_rate(0.03, 128)
    0.0075
    """
    check_int(global_batch_size, "global_batch_size", minimum=1)
    check_int(reference_batch_size, "reference_batch_size", minimum=1)
    return base_learning_rate * global_batch_size / reference_batch_size


def finetune_optimizer(
    total_steps,
    base_lr=0.03,
    warmup_steps=None,
    decay="cosine",
    global_batch_size=512,
    device_batch_size=None,
    momentum=0.9,
    global_clipnorm=1.0,
):
    """SGD of the paper's fine-tuning recipe (§4.1, App. B.1.1, Table 4).

    Args:
        total_steps: int, parameter updates of the run (paper: 500 for Pets
            and Flowers, 2 500 for VTAB, 10 000 for CIFAR, 20 000 for
            ImageNet).
        base_lr: float, default 0.03 (the `vit_jax` default; the paper's
            grid is {0.001, 0.003, 0.01, 0.03}, 0.06 for ImageNet).
        warmup_steps: None (default: 500 updates, the `vit_jax` default, but
            at most a fifth of the run, `default_warmup_steps`) or an int
            of at most `total_steps`.
        decay: "cosine" (default, the paper), "linear" or "constant".
        global_batch_size: int, default 512, examples per update.
        device_batch_size: int or None, examples per forward pass; when
            smaller than `global_batch_size` the gradients of
            `global_batch_size / device_batch_size` micro-batches are averaged
            before each update (Keras `gradient_accumulation_steps`).
        momentum: float, default 0.9.
        global_clipnorm: float or None, default 1.0.

    Returns:
        A `keras.optimizers.SGD` without weight decay.

    Example:

    >>> opt = finetune_optimizer(100, warmup_steps=10, device_batch_size=128)
    >>> opt.gradient_accumulation_steps
    4
    """
    steps = accumulation_steps(global_batch_size, device_batch_size)
    schedule = WarmupDecay(
        base_lr,
        total_steps,
        warmup_steps=_warmup(warmup_steps, total_steps, 500),
        decay=decay,
        steps_per_update=steps,
    )
    return keras.optimizers.SGD(
        learning_rate=schedule,
        momentum=momentum,
        global_clipnorm=global_clipnorm,
        gradient_accumulation_steps=steps if steps > 1 else None,
        # A fixed name: the optimizer's state is saved under it (Orbax,
        # `get_state_tree`), and Keras numbers unnamed optimizers per process.
        name="sgd",
    )


def pretrain_optimizer(
    total_steps,
    base_lr=1e-3,
    warmup_steps=None,
    decay="linear",
    weight_decay=0.03,
    global_batch_size=4096,
    device_batch_size=None,
    beta_1=0.9,
    beta_2=0.999,
    global_clipnorm=1.0,
    end_learning_rate=1e-5,
    exclude_from_weight_decay=None,
):
    """AdamW of the paper's pre-training recipe (§4.1, Table 3).

    Table 3 rows: ImageNet-21k lr 1e-3, weight decay 0.03, linear decay;
    ImageNet lr 3e-3, weight decay 0.3, cosine decay; JFT lr 8e-4...3e-4,
    weight decay 0.1; all with batch 4096 and 10k warm-up steps. Keras'
    AdamW multiplies the decay by the current learning rate, as the Flax
    Adam of the original code did.

    Args:
        total_steps: int, parameter updates of the run.
        base_lr: float, default 1e-3.
        warmup_steps: None (default: 10 000 updates, the paper's, but at
            most a fifth of the run) or an int of at most `total_steps`.
        decay: "linear" (default), "cosine" or "constant".
        weight_decay: float, default 0.03.
        global_batch_size, device_batch_size: as in `finetune_optimizer`;
            default 4096 and None.
        beta_1, beta_2: floats, default 0.9 and 0.999.
        global_clipnorm: float or None, default 1.0 (the paper clips for
            ImageNet).
        end_learning_rate: float, default 1e-5, end of linear decay.
        exclude_from_weight_decay: None (decay every weight, as the paper) or
            a list of substrings of variable names to leave undecayed, e.g.
            `["bias", "gamma", "beta", "pos_embedding", "cls"]`.

    Returns:
        A `keras.optimizers.AdamW`.

    Example:

    >>> opt = pretrain_optimizer(1000, warmup_steps=100)
    >>> round(float(opt.weight_decay), 2)
    0.03
    """
    steps = accumulation_steps(global_batch_size, device_batch_size)
    schedule = WarmupDecay(
        base_lr,
        total_steps,
        warmup_steps=_warmup(warmup_steps, total_steps, 10_000),
        decay=decay,
        end_learning_rate=end_learning_rate if decay == "linear" else 0.0,
        steps_per_update=steps,
    )
    optimizer = keras.optimizers.AdamW(
        learning_rate=schedule,
        weight_decay=weight_decay,
        beta_1=beta_1,
        beta_2=beta_2,
        global_clipnorm=global_clipnorm,
        gradient_accumulation_steps=steps if steps > 1 else None,
        name="adamw",  # fixed, as the SGD recipe's
    )
    if exclude_from_weight_decay:
        optimizer.exclude_from_weight_decay(var_names=list(exclude_from_weight_decay))
    return optimizer


@keras.saving.register_keras_serializable(package="keras_vit")
class SparseCategoricalCrossentropyWithSmoothing(keras.losses.Loss):
    """Cross-entropy of integer labels with label smoothing.

    `keras.losses.SparseCategoricalCrossentropy` has no label smoothing; this
    one-hot encodes the labels and calls `categorical_crossentropy`.

    Args:
        label_smoothing: float in [0, 1), default 0.1.
        from_logits: bool, default False.
    """

    def __init__(self, label_smoothing=0.1, from_logits=False, name="smoothed_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)
        self.from_logits = bool(from_logits)

    def call(self, y_true, y_pred):
        y_true = ops.reshape(ops.cast(y_true, "int32"), ops.shape(y_pred)[:-1])
        one_hot = ops.one_hot(y_true, ops.shape(y_pred)[-1], dtype=y_pred.dtype)
        return keras.losses.categorical_crossentropy(
            one_hot, y_pred, from_logits=self.from_logits, label_smoothing=self.label_smoothing
        )

    def get_config(self):
        config = super().get_config()
        config.update(label_smoothing=self.label_smoothing, from_logits=self.from_logits)
        return config


def classification_loss(from_logits=False, label_smoothing=0.0):
    """Cross-entropy for integer labels, optionally label-smoothed."""
    smoothing = check_float(label_smoothing, "label_smoothing", minimum=0.0)
    if smoothing >= 1:
        raise ValueError(
            f"`label_smoothing` must be in [0, 1). Received: label_smoothing={label_smoothing}"
        )
    if smoothing == 0:
        return keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)
    return SparseCategoricalCrossentropyWithSmoothing(smoothing, from_logits=from_logits)


def _from_logits(model):
    activation = getattr(model, "classifier_activation", "softmax")
    if activation is None:
        return True
    if activation == "softmax":
        return False
    raise ValueError(
        "Training needs a model whose head returns logits "
        "(classifier_activation=None) or probabilities ('softmax'). "
        f"Received: classifier_activation={activation!r}"
    )


def _check_forwarded(kwargs, function, *targets):
    """Refuses `kwargs` that neither `function` nor the functions it forwards them to take."""
    check_keywords(kwargs, argument_names(function, *targets), function.__name__)


def _compile(model, optimizer, label_smoothing, metrics):
    model.compile(
        optimizer=optimizer,
        loss=classification_loss(_from_logits(model), label_smoothing),
        # Weighted, so that the zero-weight padding of the evaluation
        # pipeline (`keras_vit.training.data`) does not count.
        weighted_metrics=list(metrics) if metrics else ["accuracy"],
    )
    return model


def _with_layer_decay(optimizer, model, layer_decay):
    if layer_decay is None:
        return optimizer
    from keras_vit.training.layer_decay import layer_decay_optimizer

    return layer_decay_optimizer(optimizer, model, layer_decay)


def compile_for_finetuning(
    model, total_steps, label_smoothing=0.0, metrics=None, lora_rank=None,
    lora_targets=("query", "value"), layer_decay=None, **optimizer_kwargs,
):
    """Compiles `model` with the fine-tuning recipe.

    Args:
        model: a `keras_vit.ViT` (its head is zero-initialised, as in the
            paper).
        total_steps: int, parameter updates of the run.
        label_smoothing: float, default 0 (the paper uses none).
        metrics: list of metrics, default `["accuracy"]` (as weighted
            metrics).
        lora_rank: None (default: every weight trains) or an int: LoRA
            adapters of that rank on `lora_targets` (`model.enable_lora`),
            which train with the head while the rest is frozen.
        lora_targets: the projections LoRA adapts, default
            ("query", "value").
        layer_decay: None (default) or a float in (0, 1]: layer-wise
            learning-rate decay, block `i` at `lr * layer_decay **
            (num_layers - i)` (`keras_vit.training.layer_decay`).
        **optimizer_kwargs: forwarded to `finetune_optimizer`.

    Returns:
        The compiled model.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8,
    ...                       num_layers=1, num_heads=2, mlp_dim=8, classes=3)
    >>> model = compile_for_finetuning(model, total_steps=10, warmup_steps=2)
    >>> type(model.optimizer).__name__
    'SGD'
    """
    _check_forwarded(optimizer_kwargs, compile_for_finetuning, finetune_optimizer)
    if layer_decay is not None:
        from keras_vit.training.layer_decay import check_layer_decay

        check_layer_decay(layer_decay)  # before LoRA changes the model
    if lora_rank is not None:
        model.enable_lora(lora_rank, targets=lora_targets, train_head=True)
    optimizer = _with_layer_decay(finetune_optimizer(total_steps, **optimizer_kwargs), model, layer_decay)
    return _compile(model, optimizer, label_smoothing, metrics)


def compile_for_pretraining(
    model, total_steps, label_smoothing=0.0, metrics=None, layer_decay=None, **optimizer_kwargs
):
    """Compiles `model` with the pre-training recipe (AdamW, `pretrain_optimizer`).

    Args:
        model: a `keras_vit.ViT`, typically with `dropout_rate=0.1`.
        total_steps: int, parameter updates of the run.
        label_smoothing: float, default 0.
        metrics: list of metrics, default `["accuracy"]`.
        layer_decay: None (default) or a float in (0, 1], as in
            `compile_for_finetuning` (BEiT and MAE fine-tune with AdamW and
            0.65-0.75).
        **optimizer_kwargs: forwarded to `pretrain_optimizer`.

    Returns:
        The compiled model.
    """
    _check_forwarded(optimizer_kwargs, compile_for_pretraining, pretrain_optimizer)
    optimizer = _with_layer_decay(pretrain_optimizer(total_steps, **optimizer_kwargs), model, layer_decay)
    return _compile(model, optimizer, label_smoothing, metrics)


def masked_patch_optimizer(
    total_steps,
    base_lr=2e-4,
    warmup_steps=None,
    decay="cosine",
    weight_decay=0.0,
    global_batch_size=4096,
    device_batch_size=None,
    global_clipnorm=1.0,
    **kwargs,
):
    """Adam of the paper's masked patch prediction recipe (App. B.1.2).

    The paper pre-trains with Adam, base learning rate 2e-4, 10k warm-up
    steps and cosine decay, batch 4096, for 1M steps on JFT (ViT-B/16). It
    states no weight decay, so the default is none (Adam); gradients are
    clipped at global norm 1 as in the supervised pre-training recipe. Scale
    it down with the arguments (`total_steps`, `warmup_steps`,
    `global_batch_size`; for another batch size the rate usually scales
    with it, `scaled_learning_rate(2e-4, batch, 4096)`).

    Args:
        total_steps: int, parameter updates (paper: 1 000 000).
        base_lr: float, default 2e-4.
        warmup_steps: None (default: 10 000 updates, the paper's, but at
            most a fifth of the run) or an int of at most `total_steps`.
        decay: "cosine" (default), "linear" or "constant".
        weight_decay: float, default 0 (Adam).
        global_batch_size, device_batch_size: as in `finetune_optimizer`;
            default 4096 and None.
        global_clipnorm: float or None, default 1.0.
        **kwargs: other `pretrain_optimizer` arguments (`beta_1`, ...).

    Returns:
        A `keras.optimizers.AdamW` (plain Adam with `weight_decay=0`).

    Example:

    >>> opt = masked_patch_optimizer(1000, warmup_steps=100, global_batch_size=64)
    >>> round(float(opt.learning_rate), 6), float(opt.weight_decay)
    (0.0, 0.0)
    """
    _check_forwarded(kwargs, masked_patch_optimizer, pretrain_optimizer)
    return pretrain_optimizer(
        total_steps,
        base_lr=base_lr,
        warmup_steps=warmup_steps,
        decay=decay,
        weight_decay=weight_decay,
        global_batch_size=global_batch_size,
        device_batch_size=device_batch_size,
        global_clipnorm=global_clipnorm,
        **kwargs,
    )


def compile_for_masked_patch_prediction(task, total_steps, **optimizer_kwargs):
    """Compiles a `keras_vit.pretraining.MaskedPatchPrediction` with its recipe.

    The loss is the task's own (`MaskedPatchPrediction.compute_loss`), so
    only the optimizer is set.

    Args:
        task: a `MaskedPatchPrediction`.
        total_steps: int, parameter updates of the run.
        **optimizer_kwargs: forwarded to `masked_patch_optimizer`.

    Returns:
        The compiled task.

    Example:

    >>> import keras_vit
    >>> encoder = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1,
    ...                         num_heads=2, mlp_dim=8, include_top=False)
    >>> task = keras_vit.pretraining.MaskedPatchPrediction(encoder)
    >>> task = compile_for_masked_patch_prediction(task, total_steps=10, warmup_steps=2)
    >>> type(task.optimizer).__name__
    'AdamW'
    """
    from keras_vit.pretraining import MaskedPatchPrediction

    if not isinstance(task, MaskedPatchPrediction):
        raise ValueError(
            "`task` must be a keras_vit.pretraining.MaskedPatchPrediction. "
            f"Received: task={type(task).__name__}"
        )
    _check_forwarded(
        optimizer_kwargs, compile_for_masked_patch_prediction, masked_patch_optimizer,
        pretrain_optimizer,
    )
    task.compile(optimizer=masked_patch_optimizer(total_steps, **optimizer_kwargs))
    return task
