"""Which patch embeddings to corrupt, and how (paper App. B.1.2).

The paper corrupts 50 % of the patch embeddings of an image: 80 % of those
are replaced by a learnable `[mask]` embedding, 10 % by "a random other patch
embedding", and 10 % are kept as they are (BERT's recipe, Devlin et al.
2019). A plan is an int tensor `(batch, num_patches)` with one code per
patch: `UNTOUCHED` (0), `MASKED` (1), `REPLACED` (2) or `KEPT` (3); codes 1-3
are the corrupted patches whose targets the model predicts.

Choices where the paper says no more:
- Exactly `round(rate * num_patches)` patches of every image are corrupted
  (at least one), chosen uniformly without replacement; each corrupted patch
  then takes its kind independently with the given probabilities.
- "Another patch" is a patch of the same image at another position, drawn
  uniformly from the other `num_patches - 1`. Staying within the image keeps
  every example independent of the others in its batch, so results do not
  depend on the batch size or on how a batch is split over devices.
"""

import keras
from keras import ops

from keras_vit.validation import check_float

__all__ = [
    "KEPT",
    "MASKED",
    "REPLACED",
    "UNTOUCHED",
    "apply_corruption",
    "corruption_plan",
    "num_corrupted",
    "other_patch_indices",
]

UNTOUCHED, MASKED, REPLACED, KEPT = 0, 1, 2, 3


def _check_rate(rate):
    # Open at both ends: no corruption or all of it leaves nothing to learn.
    ok = not isinstance(rate, bool) and isinstance(rate, (int, float)) and 0.0 < rate < 1.0
    if not ok:
        raise ValueError(f"`rate` must be a float in (0, 1). Received: rate={rate!r}")
    return float(rate)


def check_rates(rate, mask_rate, replace_rate):
    """Validates the three proportions; returns them as floats."""
    rate = _check_rate(rate)
    mask_rate = check_float(mask_rate, "mask_rate", minimum=0, maximum=1)
    replace_rate = check_float(replace_rate, "replace_rate", minimum=0, maximum=1)
    if mask_rate + replace_rate > 1.0 + 1e-9:
        raise ValueError(
            "`mask_rate + replace_rate` must not exceed 1 (the rest of the "
            f"corrupted patches are kept). Received: mask_rate={mask_rate}, "
            f"replace_rate={replace_rate}"
        )
    return rate, mask_rate, replace_rate


def _check_count(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        # A scalar tensor (a dynamic batch size in a traced graph) passes.
        if not ops.is_tensor(value):
            raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")
    return value


def num_corrupted(num_patches, rate=0.5):
    """Patches corrupted per image: `round(rate * num_patches)`, at least 1.

    Example:

    >>> num_corrupted(196), num_corrupted(3, rate=0.1)
    (98, 1)
    """
    _check_count(num_patches, "num_patches")
    rate = _check_rate(rate)
    return max(1, min(num_patches, int(rate * num_patches + 0.5)))


def _uniform(shape, seed):
    return keras.random.uniform(shape, seed=seed)


def corruption_plan(
    batch, num_patches, rate=0.5, mask_rate=0.8, replace_rate=0.1, seed=None
):
    """Samples which patches to corrupt and how.

    Args:
        batch: int (or a scalar tensor in a traced graph), images.
        num_patches: int, patches per image.
        rate: float in (0, 1), default 0.5: fraction of the patches of
            every image that are corrupted (exactly `num_corrupted`).
        mask_rate: float in [0, 1], default 0.8: probability that a
            corrupted patch is replaced by the `[mask]` embedding.
        replace_rate: float in [0, 1], default 0.1: probability that it is
            replaced by another patch's embedding; with probability
            `1 - mask_rate - replace_rate` it is kept as is.
        seed: None, an int or a `keras.random.SeedGenerator` (needed inside
            a jax-traced function). The same int seed gives the same plan.

    Returns:
        int32 `(batch, num_patches)`: `UNTOUCHED` (0), `MASKED` (1),
        `REPLACED` (2) or `KEPT` (3).

    Example:

    >>> import numpy as np
    >>> plan = np.asarray(corruption_plan(2, 16, seed=0))
    >>> plan.shape, (plan > 0).sum(axis=1).tolist()
    ((2, 16), [8, 8])
    """
    _check_count(batch, "batch")
    k = num_corrupted(num_patches, rate)
    _, mask_rate, replace_rate = check_rates(rate, mask_rate, replace_rate)
    # One draw for both uses: two draws with the same int seed would repeat.
    noise = _uniform((2, batch, num_patches), seed)
    # The k patches with the smallest noise: a uniform k-subset of each row.
    ranks = ops.argsort(ops.argsort(noise[0], axis=-1), axis=-1)
    kind = noise[1]
    code = ops.where(
        kind < mask_rate,
        MASKED,
        ops.where(kind < mask_rate + replace_rate, REPLACED, KEPT),
    )
    return ops.cast(ops.where(ranks < k, code, UNTOUCHED), "int32")


def other_patch_indices(batch, num_patches, seed=None):
    """For every patch, the index of another patch of the same image.

    Drawn uniformly among the other `num_patches - 1` positions (an image of
    a single patch gets its own index).

    Args:
        batch: int (or a scalar tensor), images.
        num_patches: int, patches per image.
        seed: None, an int or a `keras.random.SeedGenerator`.

    Returns:
        int32 `(batch, num_patches)` indices into the patch axis.

    Example:

    >>> import numpy as np
    >>> idx = np.asarray(other_patch_indices(3, 5, seed=0))
    >>> bool((idx != np.arange(5)).all())
    True
    """
    _check_count(batch, "batch")
    _check_count(num_patches, "num_patches")
    u = _uniform((batch, num_patches), seed)
    # An offset in 1..n-1 never lands on the patch itself.
    offset = ops.minimum(ops.floor(u * (num_patches - 1)), max(num_patches - 2, 0)) + 1
    offset = ops.cast(offset, "int32")
    position = ops.arange(num_patches, dtype="int32")[None, :]
    return (position + offset) % num_patches


def apply_corruption(tokens, plan, mask_embedding, other_indices):
    """Corrupts patch embeddings as a plan says.

    `MASKED` positions get `mask_embedding`, `REPLACED` positions get the
    (uncorrupted) embedding at `other_indices` of the same image, `UNTOUCHED`
    and `KEPT` positions keep theirs. Values are copied exactly (a gather and
    selects, no arithmetic).

    Args:
        tokens: `(batch, num_patches, D)` patch embeddings.
        plan: int `(batch, num_patches)`, from `corruption_plan`.
        mask_embedding: `(D,)` or broadcastable to `(1, 1, D)`.
        other_indices: int `(batch, num_patches)`, from
            `other_patch_indices`.

    Returns:
        The corrupted `(batch, num_patches, D)` embeddings.

    Example:

    >>> import numpy as np
    >>> tokens = np.arange(6, dtype="float32").reshape(1, 3, 2)
    >>> out = apply_corruption(tokens, np.array([[1, 2, 0]]),
    ...                        np.full((2,), -1.0, "float32"), np.array([[2, 0, 1]]))
    >>> np.asarray(out).tolist()
    [[[-1.0, -1.0], [0.0, 1.0], [4.0, 5.0]]]
    """
    tokens = ops.convert_to_tensor(tokens)
    batch, num_patches = ops.shape(tokens)[0], ops.shape(tokens)[1]
    depth = tokens.shape[-1]
    flat = ops.reshape(tokens, (-1, depth))
    rows = ops.arange(batch, dtype="int32")[:, None] * num_patches
    gathered = ops.take(flat, ops.reshape(rows + ops.cast(other_indices, "int32"), (-1,)), axis=0)
    others = ops.reshape(gathered, ops.shape(tokens))
    mask = ops.reshape(ops.cast(mask_embedding, tokens.dtype), (1, 1, depth))
    plan = ops.cast(plan, "int32")[..., None]
    out = ops.where(plan == REPLACED, others, tokens)
    return ops.where(plan == MASKED, mask, out)
