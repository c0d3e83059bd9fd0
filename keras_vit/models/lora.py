"""LoRA on keras_vit's projections: enable, save and load the adapters, merge.

Low-rank adaptation (Hu et al. 2021, arXiv:2106.09685) through Keras' own
`Dense.enable_lora` / `EinsumDense.enable_lora`: the chosen projections of
every Transformer block get `kernel + (alpha / rank) * A @ B` with `A` and
`B` trainable and the rest of the model frozen. keras_vit's attention and
MLP call a LoRA-enabled projection as the Keras layer it is, so the
adapters take part in the forward pass on every backend. `ModelBase`
exposes these functions as model methods (`model.enable_lora(...)`).

The adapter file follows keras-hub's `Backbone.save_lora_weights`: a
`.lora.h5` file holding the rank and the adapters alone; loading it into a
model without LoRA enables LoRA with the file's rank first. Unlike
keras-hub, adapters are keyed by their variable paths (stable layer names,
`encoderblock_3/MultiHeadDotProductAttention_1/query/lora_kernel_a`), and
the file also records `alpha` and the targets.
"""

import math
from dataclasses import dataclass

import keras
import numpy as np

# The projections of a Transformer block, by layer name.
TARGETS = ("query", "key", "value", "out", "Dense_0", "Dense_1")
# The classifier layers `train_head` keeps trainable.
HEAD_LAYERS = ("head", "head_dist")
_BLOCK_PREFIX = "encoderblock_"
# Head variables that are statistics or schedules, never trained by gradients.
STATISTICS = ("moving_mean", "moving_variance", "mask_probabilities")


@dataclass(frozen=True)
class LoraSettings:
    """What `enable_lora` was called with: `rank`, `alpha`, `targets`."""

    rank: int
    alpha: float
    targets: tuple


def check_targets(targets):
    """The targets as a tuple of valid names, or a `ValueError` listing them.

    Example:

    >>> check_targets(["value", "query"])
    ('query', 'value')
    """
    if isinstance(targets, str):
        targets = (targets,)
    targets = tuple(targets)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or not targets:
        raise ValueError(
            f"`targets` must name one or more of the block projections {TARGETS}. "
            f"Received: targets={targets!r}" + (f" (unknown: {unknown})" if unknown else "")
        )
    return tuple(t for t in TARGETS if t in targets)


def _check_rank(rank):
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
        raise ValueError(f"`rank` must be a positive int. Received: rank={rank!r}")
    return int(rank)


def _layer_path(layer):
    return layer._kernel.path.rpartition("/")[0] if hasattr(layer, "_kernel") else layer.name


def projection_layers(model, targets=TARGETS):
    """`{path: layer}` of the blocks' `Dense`/`EinsumDense` projections named in `targets`."""
    found = {}
    for layer in model._flatten_layers(include_self=False):
        if not isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense)):
            continue
        path = _layer_path(layer)
        if layer.name in targets and path.startswith(_BLOCK_PREFIX):
            found[path] = layer
    return found


def lora_layers(model):
    """`{path: layer}` of the LoRA-enabled layers of `model`."""
    return {p: l for p, l in projection_layers(model).items() if getattr(l, "lora_enabled", False)}


def refuse_adapters(model, before):
    """Raises a ValueError where `model` has LoRA adapters, which `before`
    (the caller's step, e.g. "exporting") would leave out: it reads the
    plain kernels."""
    if lora_layers(model):
        raise ValueError(
            f"Model {model.name!r} has LoRA adapters: merge them into the kernels with "
            f"`model.merge_lora()` before {before}."
        )


def _forget_compiled_functions(model):
    # The step functions were traced with the old variables.
    for name in ("train_function", "test_function", "predict_function"):
        if getattr(model, name, None) is not None:
            setattr(model, name, None)


def _is_adapter(variable):
    return variable.path.rpartition("/")[2] in ("lora_kernel_a", "lora_kernel_b")


def _freeze(model, train_head):
    # A task model (depth, segmentation) names its own layers, all trained as a head.
    heads = HEAD_LAYERS + tuple(getattr(model, "head_layer_names", ()))
    for variable in model.weights:
        head = (train_head and variable.path.partition("/")[0] in heads
                and not variable.path.endswith(STATISTICS))
        variable.trainable = bool(head or _is_adapter(variable))


def enable_lora(model, rank, targets=("query", "value"), alpha=None, train_head=True, verbose=True):
    """Enables LoRA on the blocks' projections and freezes everything else.

    Args:
        model: a keras_vit model.
        rank: int, the rank of the adapters.
        targets: names among "query", "key", "value", "out" (attention) and
            "Dense_0", "Dense_1" (MLP); default ("query", "value"), the
            LoRA paper's choice.
        alpha: None (default: `rank`, scale 1) or a float; the update is
            scaled by `alpha / rank`.
        train_head: bool, default True: the classifier (`head`, DeiT's
            `head_dist`; a task model's own layers, its `head_layer_names`)
            stays trainable, as a new head must be trained.
        verbose: bool, default True: prints the trainable-parameter count.

    Returns:
        int, the number of trainable parameters.

    Raises:
        ValueError: for an invalid `rank` or `targets` (the valid names are
            listed), or when LoRA is already enabled.
    """
    rank = _check_rank(rank)
    targets = check_targets(targets)
    if lora_layers(model):
        raise ValueError(
            f"LoRA is already enabled on model {model.name!r} "
            f"({getattr(model, '_lora_settings', None)}); build a new model to change it."
        )
    alpha = float(rank if alpha is None else alpha)
    layers = projection_layers(model, targets)
    if not layers:
        raise ValueError(f"Model {model.name!r} has no Transformer block projections for LoRA.")
    for layer in layers.values():
        layer.enable_lora(rank, lora_alpha=alpha)
    _freeze(model, train_head)
    model._lora_settings = LoraSettings(rank, alpha, targets)
    _forget_compiled_functions(model)
    count = sum(math.prod(v.shape) for v in model.trainable_weights)
    if verbose:
        total = sum(math.prod(v.shape) for v in model.weights)
        print(
            f"LoRA rank {rank} on {', '.join(targets)} of {len(layers)} projections: "
            f"{count:,} trainable parameters of {total:,} ({100 * count / total:.2f}%)."
        )
    return count


def save_lora_weights(model, filepath):
    """Writes the adapters alone to a `.lora.h5` file (see `enable_lora`)."""
    import h5py

    layers = lora_layers(model)
    if not layers:
        raise ValueError(
            "There are no LoRA-enabled layers in this model: call "
            "`model.enable_lora(rank)` first."
        )
    if not str(filepath).endswith(".lora.h5"):
        raise ValueError(f"The filename must end in `.lora.h5`. Received: filepath={filepath}")
    settings = model._lora_settings
    with h5py.File(filepath, "w") as f:
        f.attrs["rank"], f.attrs["alpha"] = settings.rank, settings.alpha
        f.attrs["targets"] = ",".join(settings.targets)
        for path, layer in layers.items():
            f[f"{path}/lora_kernel_a"] = keras.ops.convert_to_numpy(layer.lora_kernel_a)
            f[f"{path}/lora_kernel_b"] = keras.ops.convert_to_numpy(layer.lora_kernel_b)


def _read_adapters(filepath):
    import h5py

    with h5py.File(filepath, "r") as f:
        if "rank" not in f.attrs:
            raise ValueError(f"{filepath!r} is not a keras_vit LoRA file (no rank).")
        settings = LoraSettings(int(f.attrs["rank"]), float(f.attrs["alpha"]),
                                tuple(str(f.attrs["targets"]).split(",")))
        arrays = {}

        def collect(name, item):
            if isinstance(item, h5py.Dataset):
                arrays[name] = item[()]

        f.visititems(collect)
    return settings, arrays


def load_lora_weights(model, filepath):
    """Loads adapters written by `save_lora_weights`.

    A model without LoRA gets it first, with the file's rank, alpha and
    targets (and `train_head=True`); a model with LoRA must have the file's
    rank and targets. Every adapter of the model must be in the file and
    every adapter of the file used, with equal shapes, else nothing is set.
    """
    settings, arrays = _read_adapters(filepath)
    if not lora_layers(model):
        enable_lora(model, settings.rank, settings.targets, alpha=settings.alpha, verbose=False)
    current = model._lora_settings
    if (current.rank, current.targets) != (settings.rank, settings.targets):
        raise ValueError(
            f"The LoRA file {filepath!r} holds rank={settings.rank}, targets={settings.targets}, "
            f"but the model was called with `enable_lora(rank={current.rank}, "
            f"targets={current.targets})`. Both must match."
        )
    variables = {}
    for path, layer in lora_layers(model).items():
        variables[f"{path}/lora_kernel_a"] = layer.lora_kernel_a
        variables[f"{path}/lora_kernel_b"] = layer.lora_kernel_b
    missing = sorted(set(variables) - set(arrays))
    unexpected = sorted(set(arrays) - set(variables))
    shared = set(variables) & set(arrays)
    mismatched = sorted(k for k in shared if arrays[k].shape != tuple(variables[k].shape))
    if missing or unexpected or mismatched:
        raise ValueError(
            f"Cannot load the LoRA file {filepath!r} into model {model.name!r}: missing "
            f"{missing[:5]}, unexpected {unexpected[:5]}, shape mismatches {mismatched[:5]}."
        )
    for key, variable in variables.items():
        variable.assign(arrays[key])


def merge_lora(model):
    """Folds every adapter into its kernel and removes LoRA, in place.

    `kernel += (alpha / rank) * A @ B`, then the adapters are untracked: the
    model has the variables and the config of a model that never had LoRA,
    so `model.export`, `save` and the converters see plain projections. The
    kernels become trainable again (the rest keeps its trainable flags).

    Returns:
        The model.
    """
    layers = lora_layers(model)
    if not layers:
        raise ValueError(f"Model {model.name!r} has no LoRA adapters to merge.")
    for layer in layers.values():
        delta = keras.ops.matmul(layer.lora_kernel_a, layer.lora_kernel_b)
        scale = layer.lora_alpha / layer.lora_rank
        kernel = layer._kernel
        kernel.assign(keras.ops.cast(kernel + scale * keras.ops.cast(delta, kernel.dtype), kernel.dtype))
        # Keras' `Layer.__delattr__` untracks a variable attribute.
        del layer.lora_kernel_a, layer.lora_kernel_b
        layer.lora_enabled, layer.lora_rank, layer.lora_alpha = False, None, None
        kernel.trainable = True
    model._lora_settings = None
    _forget_compiled_functions(model)
    return model
