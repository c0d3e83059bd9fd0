"""The mask-classification loss of EoMT and Mask2Former: `MaskClassificationLoss`.

A segmenter of queries predicts, per query, a class (one more: "no object")
and a mask. The loss of one prediction (Cheng et al. 2022, kept by Kerssies
et al. 2025):

1. **Matching.** Each image's ground-truth segments are matched one to one
   to queries by the Hungarian algorithm on the cost
   `class_weight * (-p(class)) + mask_weight * BCE + dice_weight * dice`,
   the masks compared at `num_points` points drawn uniformly (the same
   points for every query and segment of an image).
2. **Class loss.** Cross-entropy of every query's class logits against its
   segment's class, or "no object" for an unmatched query, "no object"
   weighted by `no_object_weight`.
3. **Mask losses.** Binary cross-entropy and dice of each matched query's
   mask against its segment, at `num_points` points chosen by uncertainty
   (PointRend): `oversample_ratio * num_points` points drawn uniformly, the
   `importance_sample_ratio` share of `num_points` where the mask's logit is
   closest to 0 kept, the rest drawn uniformly anew; each summed over the
   matched queries and divided by the number of segments in the batch.

The total is `class_weight * class + mask_weight * mask + dice_weight *
dice`, summed over the predictions: EoMT's intermediate predictions (one
before each block with queries) and its final one (deep supervision).

Masks and labels are read at the points by bilinear interpolation with
zeros outside (`torch.nn.functional.grid_sample` with `align_corners=False`,
as the reference implementations do); the labels are segment maps, so a
point's label is the share of its four neighbouring pixels inside the
segment.

The matching runs on the host in NumPy (SciPy's `linear_sum_assignment`)
inside the compiled step (`keras_vit.execution.host.host_call`: jax's
`pure_callback`, TensorFlow's `numpy_function`, torch eagerly): only the
cost matrices (batch x queries x segments) go to the host and the matched
indices come back, the rest of the loss stays on the device and in one
step. Matching outside the step would need a second forward pass or a
custom train step per backend.
"""

import keras
import numpy as np
from keras import ops

from keras_vit.execution.host import host_call
from keras_vit.validation import check_float, check_int, check_positive_float, check_positive_int

IGNORE_INDEX = 255


# ----------------------------------------------------------- point sampling


def _corners(points, height, width):
    """`[(flat index, weight)]` of the four pixels around each point of
    `points` `(..., 2)` (x, y in [0, 1]); a weight is 0 outside the image."""
    points = ops.convert_to_tensor(points, "float32")
    x = points[..., 0] * width - 0.5
    y = points[..., 1] * height - 0.5
    x0, y0 = ops.floor(x), ops.floor(y)
    fx, fy = x - x0, y - y0
    out = []
    for dy in (0, 1):
        for dx in (0, 1):
            xi, yi = x0 + dx, y0 + dy
            inside = (xi >= 0) & (xi <= width - 1) & (yi >= 0) & (yi <= height - 1)
            weight = (fx if dx else 1 - fx) * (fy if dy else 1 - fy)
            index = ops.clip(yi, 0, height - 1) * width + ops.clip(xi, 0, width - 1)
            out.append((ops.cast(index, "int32"), ops.where(inside, weight, ops.zeros_like(weight))))
    return out


def sample_maps(maps, points):
    """Bilinear values of `maps` `(batch, n, H, W)` at `points` `(batch, n or
    1, p, 2)` (x, y in [0, 1], zeros outside): `(batch, n, p)`.

    Example:

    >>> import numpy as np
    >>> maps = np.arange(4, dtype="float32").reshape(1, 1, 2, 2)
    >>> points = np.array([[[[0.25, 0.25], [0.5, 0.5], [0.0, 0.0]]]], "float32")
    >>> np.round(ops.convert_to_numpy(sample_maps(maps, points)), 4).tolist()
    [[[0.0, 1.5, 0.0]]]
    """
    maps = ops.convert_to_tensor(maps)
    height, width = maps.shape[2], maps.shape[3]
    flat = ops.reshape(maps, (-1, maps.shape[1], height * width))
    shape = (ops.shape(flat)[0], maps.shape[1], points.shape[2])
    total = 0.0
    for index, weight in _corners(points, height, width):
        total = total + ops.take_along_axis(flat, ops.broadcast_to(index, shape), axis=2) * weight
    return total


def sample_segments(segment_map, points, segments):
    """Bilinear values of the masks of `segments` `(batch, m)` (ids of
    `segment_map` `(batch, H, W)`) at `points` `(batch, m or 1, p, 2)`:
    `(batch, m, p)`, a point's share of its four pixels inside the segment.

    Example:

    >>> import numpy as np
    >>> segment_map = np.array([[[0, 1], [1, 1]]], "int32")
    >>> points = np.array([[[[0.5, 0.5], [0.25, 0.25]]]], "float32")
    >>> ops.convert_to_numpy(sample_segments(segment_map, points, np.array([[0, 1]]))).tolist()
    [[[0.25, 1.0], [0.75, 0.0]]]
    """
    segment_map = ops.convert_to_tensor(segment_map, "int32")
    height, width = segment_map.shape[1], segment_map.shape[2]
    flat = ops.reshape(segment_map, (-1, height * width))
    wanted = ops.expand_dims(ops.cast(segments, "int32"), -1)
    total = 0.0
    for index, weight in _corners(points, height, width):
        ids = ops.take_along_axis(flat, ops.reshape(index, (ops.shape(flat)[0], -1)), axis=1)
        ids = ops.reshape(ids, ops.shape(index))
        total = total + ops.cast(ops.equal(ids, wanted), weight.dtype) * weight
    return total


def importance_points(mask_logits, candidates, uniform, num_uncertain):
    """The points of each mask where its logit is least certain, then uniform ones.

    Args:
        mask_logits: `(batch, m, H, W)`.
        candidates: `(batch, m, c, 2)` uniform points in [0, 1].
        uniform: `(batch, m, r, 2)` uniform points appended as they are.
        num_uncertain: int, how many of the candidates are kept: those
            whose interpolated logit is nearest 0.

    Returns:
        `(batch, m, num_uncertain + r, 2)`.
    """
    uncertainty = -ops.abs(sample_maps(mask_logits, candidates))
    _, top = ops.top_k(uncertainty, num_uncertain)
    shape = ops.shape(top)
    index = ops.broadcast_to(ops.expand_dims(top, -1), (shape[0], shape[1], num_uncertain, 2))
    return ops.concatenate([ops.take_along_axis(candidates, index, axis=2), uniform], axis=2)


# ----------------------------------------------------------- targets


def segments_of(labels, num_classes, max_segments):
    """`(segment map, segment classes, present)` of a batch of targets.

    `labels` `(batch, H, W)`: class indices (255 none), each class present
    one segment (semantic labels, as EoMT trains on them); `(batch, H, W, 2)`:
    a class map and a map of segment ids in `[0, max_segments)` (255 none),
    one class per segment. Returns the segment id of each pixel (-1 none),
    `(batch, K)` classes and `(batch, K)` whether each segment is there (K:
    `num_classes` or `max_segments`).
    """
    labels = ops.cast(labels, "int32")
    if len(labels.shape) == 3:
        count = num_classes
        ids = classes = labels
    else:
        count = max_segments
        classes, ids = labels[..., 0], labels[..., 1]
    ids = ops.where((ids >= 0) & (ids < count) & (classes >= 0) & (classes < num_classes), ids, -1)
    batch = ops.shape(ids)[0]
    flat = ops.reshape(ids, (batch, -1))
    # Every image's segments numbered apart, the pixels of none in one bin at the end.
    row = ops.expand_dims(ops.arange(batch, dtype="int32") * count, -1)
    bins = ops.reshape(ops.where(flat >= 0, flat + row, batch * count), (-1,))
    pixels = ops.segment_sum(ops.ones_like(bins, "float32"), bins, num_segments=batch * count + 1)
    present = ops.reshape(pixels[:-1] > 0, (batch, count))
    if len(labels.shape) == 3:
        segment_classes = ops.broadcast_to(ops.arange(count, dtype="int32"), (batch, count))
    else:
        values = ops.reshape(ops.where(flat >= 0, ops.reshape(classes, (batch, -1)), 0), (-1,))
        most = ops.segment_max(values, bins, num_segments=batch * count + 1)[:-1]
        segment_classes = ops.reshape(ops.clip(most, 0, num_classes - 1), (batch, count))
    return ids, ops.cast(segment_classes, "int32"), present


# ----------------------------------------------------------- matching


def _bce(logits, labels):
    """Binary cross-entropy with logits, element-wise (labels may be fractions)."""
    return ops.relu(logits) - logits * labels + ops.log1p(ops.exp(-ops.abs(logits)))


def matching_cost(class_logits, mask_logits, segment_map, segment_classes, points, weights):
    """The cost `(batch, queries, K)` of giving each segment to each query.

    `weights` `(class, mask, dice)`; `points` `(batch, p, 2)`, shared by
    every query and segment of an image.
    """
    class_weight, mask_weight, dice_weight = weights
    batch, queries, count = ops.shape(class_logits)[0], class_logits.shape[1], segment_classes.shape[1]
    probabilities = ops.softmax(class_logits, axis=-1)
    index = ops.broadcast_to(ops.expand_dims(segment_classes, 1), (batch, queries, count))
    cost_class = -ops.take_along_axis(probabilities, index, axis=2)
    shared = ops.expand_dims(points, 1)
    predicted = sample_maps(mask_logits, shared)
    every = ops.broadcast_to(ops.arange(count, dtype="int32"), (batch, count))
    target = sample_segments(segment_map, shared, every)
    num_points = predicted.shape[-1]
    cost_mask = (ops.einsum("bqp,bkp->bqk", _bce(predicted, 1.0), target)
                 + ops.einsum("bqp,bkp->bqk", _bce(predicted, 0.0), 1.0 - target)) / num_points
    probs = ops.sigmoid(predicted)
    overlap = 2.0 * ops.einsum("bqp,bkp->bqk", probs, target)
    sizes = ops.expand_dims(ops.sum(probs, -1), -1) + ops.expand_dims(ops.sum(target, -1), 1)
    cost_dice = 1.0 - (overlap + 1.0) / (sizes + 1.0)
    return class_weight * cost_class + mask_weight * cost_mask + dice_weight * cost_dice


def assign(cost, present):
    """Hungarian matching per image, in NumPy: `(batch, queries)` int32, each
    query's segment or -1.

    NaN and infinite costs are taken as the largest float32, so that they are
    matched only where nothing else is left.

    Example:

    >>> import numpy as np
    >>> cost = np.array([[[0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.5, 0.5, 0.0]]], "float32")
    >>> assign(cost, np.array([[True, True, False]])).tolist()
    [[1, 0, -1]]
    """
    from scipy.optimize import linear_sum_assignment

    largest = np.finfo("float32").max
    out = np.full(cost.shape[:2], -1, "int32")
    for i, (matrix, here) in enumerate(zip(cost, present)):
        columns = np.flatnonzero(here)
        if columns.size:
            chosen = np.nan_to_num(matrix[:, columns], nan=largest, posinf=largest, neginf=largest)
            rows, picked = linear_sum_assignment(chosen)
            out[i, rows] = columns[picked]
    return out


def matched_slots(match, slots):
    """The matched queries of each image, in query order, padded to `slots`:
    `(queries (batch, slots), their segments, valid)`."""
    queries = match.shape[1]
    order = ops.arange(queries, dtype="int32")
    matched = match >= 0
    # Matched queries first, each group in query order (the keys are distinct:
    # any sort gives this order).
    key = ops.where(matched, order, order + queries)
    picked = ops.cast(ops.argsort(key, axis=1)[:, :slots], "int32")
    return picked, ops.maximum(ops.take_along_axis(match, picked, axis=1), 0), ops.take_along_axis(matched, picked, axis=1)


# ----------------------------------------------------------- the loss


def prediction_losses(class_logits, mask_logits, target, points, settings):
    """The three losses of one prediction, unweighted, as a dict.

    Args:
        class_logits: `(batch, queries, classes + 1)`.
        mask_logits: `(batch, queries, h, w)`.
        target: `segments_of`'s `(segment map, segment classes, present)`.
        points: a dict of uniform points in [0, 1] (`MaskClassificationLoss.point_shapes`):
            "matching" `(batch, num_points, 2)`, "candidates" `(batch,
            slots, oversampled, 2)`, "uniform" `(batch, slots, rest, 2)`,
            `slots = min(queries, K)`.
        settings: the `MaskClassificationLoss` (its weights and point counts).

    Returns:
        `{"loss_cross_entropy", "loss_mask", "loss_dice"}` scalars.
    """
    segment_map, segment_classes, present = target
    num_classes = class_logits.shape[-1] - 1
    class_logits, mask_logits = ops.cast(class_logits, "float32"), ops.cast(mask_logits, "float32")
    weights = (settings.class_weight, settings.mask_weight, settings.dice_weight)
    cost = matching_cost(class_logits, mask_logits, segment_map, segment_classes, points["matching"], weights)
    match = host_call(assign, [cost, present], (class_logits.shape[0], class_logits.shape[1]))
    # The class of each query: its segment's, or "no object".
    wanted = ops.where(match >= 0, ops.take_along_axis(segment_classes, ops.maximum(match, 0), axis=1), num_classes)
    picked = ops.take_along_axis(ops.log_softmax(class_logits, axis=-1), ops.expand_dims(wanted, -1), axis=2)[..., 0]
    weight = ops.where(wanted == num_classes, settings.no_object_weight, 1.0)
    cross_entropy = ops.sum(-picked * weight) / ops.sum(weight)
    # The masks of the matched queries at their uncertain points.
    slots = points["candidates"].shape[1]
    queries, segments, valid = matched_slots(match, slots)
    height, width = mask_logits.shape[2], mask_logits.shape[3]
    flat = ops.reshape(mask_logits, (-1, mask_logits.shape[1], height * width))
    index = ops.broadcast_to(ops.expand_dims(queries, -1), (ops.shape(flat)[0], slots, height * width))
    masks = ops.reshape(ops.take_along_axis(flat, index, axis=1), (-1, slots, height, width))
    chosen = ops.stop_gradient(importance_points(ops.stop_gradient(masks), points["candidates"], points["uniform"],
                                                 settings.num_uncertain))
    logits = sample_maps(masks, chosen)
    labels = ops.stop_gradient(sample_segments(segment_map, chosen, segments))
    probabilities = ops.sigmoid(logits)
    dice = 1.0 - (2.0 * ops.sum(probabilities * labels, -1) + 1.0) / (
        ops.sum(probabilities, -1) + ops.sum(labels, -1) + 1.0)
    valid = ops.cast(valid, "float32")
    count = ops.maximum(ops.sum(ops.cast(present, "float32")), 1.0)
    return {
        "loss_cross_entropy": cross_entropy,
        "loss_mask": ops.sum(ops.mean(_bce(logits, labels), -1) * valid) / count,
        "loss_dice": ops.sum(dice * valid) / count,
    }


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskClassificationLoss(keras.losses.Loss):
    """EoMT's (and Mask2Former's) loss: queries matched to segments, then
    class, mask and dice losses, over every prediction.

    `y_true` is `(batch, H, W)` class indices (semantic labels: each class
    present is a segment; 255 unlabelled) or `(batch, H, W, 2)`: a class map
    and a segment-id map (panoptic or instance labels: segment ids in
    `[0, max_segments)` per image, 255 where there is none; one class per
    segment). `y_pred` is one `(class_logits, mask_logits)` pair or a list of
    them (an EoMT `Segmenter`'s intermediate predictions and its final one:
    `Segmenter.compile` picks this loss by default and feeds them); class
    logits `(batch, queries, classes + 1)`, the last "no object", mask
    logits `(batch, queries, h, w)` at any size. The module docstring of
    `keras_vit.tasks.mask_classification` gives the computation; the
    defaults are EoMT's (transformers' `EomtConfig`).

    Args:
        num_points: int, default 12544 (112**2): the points a mask is compared at.
        oversample_ratio: float, default 3.0: candidate points per point.
        importance_sample_ratio: float in [0, 1], default 0.75: the share of
            the points taken where the predicted mask is least certain.
        no_object_weight: float, default 0.1: the weight of "no object" in
            the class cross-entropy.
        class_weight: float, default 2.0 (matching cost and loss).
        mask_weight: float, default 5.0: binary cross-entropy of the masks.
        dice_weight: float, default 5.0: dice of the masks.
        max_segments: int, default 100: segment ids of segment-id maps
            are below it (ids at or above it are left out). The mask
            losses' work grows with `min(queries, max_segments)`: the most
            segments of an image of the data is the cheapest right value.
        seed: None or int: the point draws of a standalone call (a
            `Segmenter` draws from its own seed generator).
        name: the loss's name.

    Example:

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> class_logits = rng.normal(size=(2, 4, 3)).astype("float32")   # 4 queries, 2 classes + no object
    >>> mask_logits = rng.normal(size=(2, 4, 8, 8)).astype("float32")
    >>> labels = np.zeros((2, 16, 16, 2), "int32")
    >>> labels[:, :, 8:] = (1, 1)                                     # segment 1, class 1, on the right
    >>> loss = MaskClassificationLoss(num_points=64, seed=0)
    >>> float(loss(labels, (class_logits, mask_logits))) > 0
    True

    Reference:
        Cheng et al., "Masked-attention Mask Transformer for Universal Image
        Segmentation", CVPR 2022, arXiv:2112.01527; Kerssies et al., "Your
        ViT is Secretly an Image Segmentation Model", CVPR 2025, arXiv:2503.19108.
    """

    # `Segmenter.compile` keeps the steps out of XLA on TensorFlow for it.
    matches_on_host = True

    def __init__(self, num_points=12544, oversample_ratio=3.0, importance_sample_ratio=0.75, no_object_weight=0.1,
                 class_weight=2.0, mask_weight=5.0, dice_weight=5.0, max_segments=100, seed=None,
                 name="mask_classification_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_points = check_positive_int(num_points, "num_points")
        self.oversample_ratio = check_float(oversample_ratio, "oversample_ratio", minimum=1.0)
        self.importance_sample_ratio = check_float(importance_sample_ratio, "importance_sample_ratio", minimum=0.0,
                                                   maximum=1.0)
        self.no_object_weight = check_positive_float(no_object_weight, "no_object_weight")
        self.class_weight, self.mask_weight, self.dice_weight = (
            check_float(w, n, minimum=0.0) for w, n in ((class_weight, "class_weight"), (mask_weight, "mask_weight"),
                                                        (dice_weight, "dice_weight")))
        if self.class_weight == self.mask_weight == self.dice_weight == 0:
            raise ValueError("`class_weight`, `mask_weight` and `dice_weight` cannot all be 0.")
        self.max_segments = check_positive_int(max_segments, "max_segments")
        self.seed = None if seed is None else check_int(seed, "seed")
        self.seed_generator = keras.random.SeedGenerator(self.seed)

    @property
    def num_uncertain(self):
        return int(self.importance_sample_ratio * self.num_points)

    def point_shapes(self, batch, slots):
        """The shapes of one prediction's uniform draws (`prediction_losses`'s `points`)."""
        return {
            "matching": (batch, self.num_points, 2),
            "candidates": (batch, slots, int(self.num_points * self.oversample_ratio), 2),
            "uniform": (batch, slots, self.num_points - self.num_uncertain, 2),
        }

    def components(self, y_true, y_pred, points=None, seed=None):
        """The unweighted losses of each prediction, as transformers names them.

        Args:
            y_true: as the loss takes it.
            y_pred: one `(class_logits, mask_logits)` pair or a list of them.
            points: None (drawn) or one dict of points per prediction
                (`point_shapes`): the draws made explicit, to reproduce a run
                or another implementation's.
            seed: None (the loss's own generator) or a `keras.random.SeedGenerator`.

        Returns:
            A list of dicts `{"loss_cross_entropy", "loss_mask", "loss_dice"}`, one per prediction.
        """
        pairs = [y_pred] if not isinstance(y_pred[0], (list, tuple)) else list(y_pred)
        num_classes = pairs[0][0].shape[-1] - 1
        target = segments_of(y_true, num_classes, self.max_segments)
        batch, queries = ops.shape(pairs[0][0])[0], pairs[0][0].shape[1]
        slots = min(queries, target[1].shape[1])
        if points is not None and len(points) != len(pairs):
            raise ValueError(f"`points` must hold one dict per prediction ({len(pairs)}). Received: {len(points)}")
        seed = self.seed_generator if seed is None else seed
        out = []
        for i, (class_logits, mask_logits) in enumerate(pairs):
            if points is None:
                draws = {k: keras.random.uniform(s, seed=seed) for k, s in self.point_shapes(batch, slots).items()}
            else:
                draws = {k: ops.convert_to_tensor(v, "float32") for k, v in points[i].items()}
            out.append(prediction_losses(class_logits, mask_logits, target, draws, self))
        return out

    def weighted_total(self, components):
        """The weighted sum of `components` (all predictions)."""
        weights = {"loss_cross_entropy": self.class_weight, "loss_mask": self.mask_weight,
                   "loss_dice": self.dice_weight}
        return sum(weights[k] * v for losses in components for k, v in losses.items())

    def call(self, y_true, y_pred):
        return self.weighted_total(self.components(y_true, y_pred))

    def get_config(self):
        return {
            **super().get_config(), "num_points": self.num_points, "oversample_ratio": self.oversample_ratio,
            "importance_sample_ratio": self.importance_sample_ratio, "no_object_weight": self.no_object_weight,
            "class_weight": self.class_weight, "mask_weight": self.mask_weight, "dice_weight": self.dice_weight,
            "max_segments": self.max_segments, "seed": self.seed,
        }
