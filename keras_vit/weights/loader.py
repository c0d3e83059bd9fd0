"""`load_weights`: strict loading of any supported checkpoint into a model."""

import logging
import os
import warnings

import keras
import numpy as np

from keras_vit.architectures import architecture_name
from keras_vit.execution import sharded_load
from keras_vit.weights import describe, readers
from keras_vit.weights.mapping import (
    HEAD_DIST_PREFIX,
    HEAD_PREFIX,
    POSEMB_KEY,
    POSITION_PREFIX_KEYS,
    PRE_LOGITS_PREFIX,
    model_variables,
)
from keras_vit.weights.patch_resample import adapt_patch_kernel
from keras_vit.weights.posemb import resample_posemb

logger = logging.getLogger("keras_vit")

_LIST_LIMIT = 25


def fetch_weights(weights, architecture):
    """The local file of `weights` (a path, or a registered name, downloaded)."""
    path, record = describe.weights_source(weights, architecture)
    if record is not None:
        from keras_vit.weights.download import fetch

        path = fetch(record)
    return os.fspath(path)


def _pop(params, prefix, ignored, reason):
    for key in [k for k in params if k.startswith(prefix)]:
        ignored[key] = reason
        params.pop(key)


def _zero_heads(params, targets):
    for prefix in (HEAD_PREFIX, HEAD_DIST_PREFIX):
        for leaf in ("kernel", "bias"):
            if prefix + leaf in targets:
                params[prefix + leaf] = np.zeros(targets[prefix + leaf].shape, "float32")


def _adapt_classifier(params, targets, path, ignored, notes):
    """include_top=False, dropped pre-logits and a new head, as the official code.

    DeiT's distillation head (`head_dist`) follows the head: both are kept,
    or both start from zeros.
    """
    if HEAD_PREFIX + "kernel" not in targets:
        reason = "the model has no classifier (include_top=False)"
        for prefix in (HEAD_PREFIX, HEAD_DIST_PREFIX, PRE_LOGITS_PREFIX):
            _pop(params, prefix, ignored, reason)
        return
    kernel = targets[HEAD_PREFIX + "kernel"]
    source = params.get(HEAD_PREFIX + "kernel")
    has_pre = any(k.startswith(PRE_LOGITS_PREFIX) for k in targets)
    if not has_pre and any(k.startswith(PRE_LOGITS_PREFIX) for k in params):
        _pop(params, PRE_LOGITS_PREFIX, ignored, "the model has no pre-logits layer (representation_size=None)")
        # The head was trained on the features of the dropped layer.
        _pop(params, HEAD_PREFIX, ignored, "it was fed by the dropped pre-logits layer")
        notes.append(
            f"{path}: the checkpoint's pre-logits layer is dropped (the model "
            "has representation_size=None), and the head is zero-initialised."
        )
    elif source is None:
        notes.append(f"{path}: the checkpoint has no head: the head is zero-initialised.")
    elif source.ndim == 2 and source.shape[0] == kernel.shape[0] and source.shape[1] != kernel.shape[1]:
        reason = f"{source.shape[1]}-class head; the model has {kernel.shape[1]}"
        _pop(params, HEAD_PREFIX, ignored, reason)
        if HEAD_DIST_PREFIX + "kernel" in targets:
            _pop(params, HEAD_DIST_PREFIX, ignored, reason)
        notes.append(
            f"{path}: the checkpoint's head has {source.shape[1]} classes, the "
            f"model {kernel.shape[1]}: the head is zero-initialised (as for fine-tuning)."
        )
    else:
        return
    _zero_heads(params, targets)


def _position_rows(keys):
    return sum(key in keys for key in POSITION_PREFIX_KEYS)


def _adapt_posemb(params, targets, model, path):
    """Resizes the position embedding to the model's patch grid."""
    posemb, target = params.get(POSEMB_KEY), targets.get(POSEMB_KEY)
    resizable = (
        posemb is not None
        and target is not None
        and posemb.ndim == 3
        and posemb.shape[-1] == target.shape[-1]
        and posemb.shape[1] != target.shape[1]
        and all((key in params) == (key in targets) for key in POSITION_PREFIX_KEYS)
    )
    if not resizable:
        return
    prefix = _position_rows(targets)
    grid = getattr(model, "grid_size", None)
    if grid is None or prefix + grid[0] * grid[1] != target.shape[1]:
        side = int(round((target.shape[1] - prefix) ** 0.5))
        grid = (side, side)
    try:
        params[POSEMB_KEY] = resample_posemb(posemb, grid, prefix)
    except ValueError as error:
        raise ValueError(f"Cannot load {path!r} into model {model.name!r}: {error}") from None
    logger.info("%s: position embedding resized to the %s grid", path, grid)


def _adapt(params, targets, model, path):
    """Fine-tuning adaptations. Returns `(params, ignored, notes)`."""
    params, ignored, notes = dict(params), {}, []
    _adapt_classifier(params, targets, path, ignored, notes)
    _adapt_posemb(params, targets, model, path)
    adapt_patch_kernel(params, targets, path)
    return params, ignored, notes


def _listing(title, items):
    items = sorted(items)
    shown = "\n    ".join(items[:_LIST_LIMIT])
    more = f"\n    ... and {len(items) - _LIST_LIMIT} more" if len(items) > _LIST_LIMIT else ""
    return f"\n  {title} ({len(items)}):\n    {shown}{more}"


def plan_assignment(checkpoint, model):
    """Matches a `Checkpoint` to a model's variables, strictly.

    Returns:
        `(assignments, ignored, notes)`: `{checkpoint key: (variable, array)}`,
        `{source key: reason}` and user-facing messages.

    Raises:
        ValueError: naming the file and listing missing keys (model weights
            with no value), unexpected keys (checkpoint entries not used) and
            shape mismatches (both shapes).
    """
    targets = model_variables(model)
    params, ignored, notes = _adapt(checkpoint.params, targets, model, checkpoint.path)
    ignored.update(checkpoint.ignored)
    missing = [f"{k}  (model variable {v.path})" for k, v in targets.items() if k not in params]
    unexpected = [k for k in params if k not in targets]
    mismatched = [
        f"{k}: checkpoint {tuple(params[k].shape)} vs model {tuple(v.shape)} ({v.path})"
        for k, v in targets.items()
        if k in params and tuple(params[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or mismatched:
        message = f"Cannot load checkpoint {checkpoint.path!r} into model {model.name!r}:"
        if missing:
            message += _listing("missing keys: model weights the checkpoint lacks", missing)
        if unexpected:
            message += _listing("unexpected keys: checkpoint entries the model lacks", unexpected)
        if mismatched:
            message += _listing("shape mismatches", mismatched)
        raise ValueError(message)
    assignments = {k: (v, params[k]) for k, v in targets.items()}
    return assignments, ignored, notes


def load_weights(model, weights):
    """Loads a checkpoint into a keras_vit model, strictly.

    Every model weight must receive a value and every checkpoint entry must be
    used or deliberately ignored, else nothing is loaded. As the official
    fine-tuning code does: the position embedding is resized to the model's
    patch grid (`scipy.ndimage.zoom(order=1)`, class-token row kept; the grid
    may be non-square); a patch kernel of another patch size is resampled
    (FlexiViT, `keras_vit.resample_patch_embedding`); a head whose class
    count differs is replaced by
    zeros (with a warning); the pre-logits layer is kept when the model has
    `representation_size` and otherwise dropped together with the head it
    fed; models built with `include_top=False` ignore both.

    Args:
        model: a `keras_vit.ViT` (or `ViTHybrid`).
        weights: a registered weights name for the model's architecture, or a
            checkpoint path: official/big_vision `.npz`, timm `.safetensors`
            or `.pth`, keras_vit `.weights.h5` / `.keras`.

    Returns:
        The model.

    Raises:
        ValueError: for unknown names, unreadable files (including `.npz`
            files with pickled objects, which are never unpickled) and any
            key or shape mismatch; the message names the file.
        FileNotFoundError: when the file does not exist.

    Example:

    >>> import keras_vit, os, tempfile
    >>> tiny = dict(image_size=32, patch_size=8, hidden_size=16,
    ...             num_layers=2, num_heads=2, mlp_dim=32, classes=10)
    >>> file = os.path.join(tempfile.mkdtemp(), "tiny.weights.h5")
    >>> keras_vit.ViT(**tiny).save_weights(file)
    >>> model = load_weights(keras_vit.ViT(**dict(tiny, image_size=48)), file)
    >>> tuple(model.get_layer("embedding").pos_embedding.shape)
    (1, 37, 16)
    """
    path = fetch_weights(weights, architecture_name(model.architecture_config()))
    return load_checkpoint(model, readers.read_checkpoint(path, model))


def load_checkpoint(model, checkpoint):
    """Loads a checkpoint in the canonical layout into a model, strictly.

    The step every loader shares, whatever the source format: the rules of
    `load_weights` (position-embedding resize, head replacement, dropped
    pre-logits) and its strict accounting, then the assignment. Nothing is
    assigned when a key or shape does not match.

    Args:
        model: a keras_vit model.
        checkpoint: a `keras_vit.weights.canonical.Checkpoint` (`params` keyed
            by the official `.npz` names, see `keras_vit.weights.mapping`).

    Returns:
        The model.

    Raises:
        ValueError: listing missing, unexpected and mismatched keys, naming
            `checkpoint.path`.
    """
    assignments, ignored, notes = plan_assignment(checkpoint, model)
    for key, reason in sorted(ignored.items()):
        logger.info("%s: ignored %s: %s", checkpoint.path, key, reason)
    for note in notes:
        warnings.warn(note, stacklevel=3)
    sliced = sharded_load.active()
    for variable, value in assignments.values():
        if sliced:
            # Under a distribution on jax: each device's slice, read alone.
            sharded_load.assign(variable, value)
            continue
        # A backend tensor (another model's variable) is copied by the
        # backend (jax's training steps donate a variable's buffer, which must
        # not be shared); anything else is read into NumPy now, one tensor
        # at a time.
        variable.assign(keras.ops.copy(value) if keras.ops.is_tensor(value) else np.asarray(value, dtype="float32"))
    if sliced:
        sharded_load.initialize_rest(model)
    return model
