"""Training the dense task models: the losses and metrics, EoMT's mask
annealing and sliding-window inference (the folders of images with masks
or depth maps are read by `keras_vit.tasks.dense_data`).

- `SegmentationLoss` (cross-entropy of per-pixel class log-probabilities,
  255 ignored), `SiLogLoss` (the scale-invariant log loss of Eigen et al.
  on pixels with depth);
- `SegmentationMeanIoU`, `AbsRel`, `Delta1`: Keras metrics;
- `MaskAnnealing`: lowers EoMT's masked-attention probabilities in
  training, as the paper does, until the masks are no longer needed;
- `sliding_window`: a model's main output on an image larger than its
  input, from overlapping windows averaged.
"""

import keras
import numpy as np
from keras import ops

from keras_vit.tasks.dense_data import IGNORE_INDEX
from keras_vit.validation import check_positive_float, check_positive_int


@keras.saving.register_keras_serializable(package="keras_vit")
class SegmentationLoss(keras.losses.Loss):
    """Cross-entropy of per-pixel class log-probabilities, labels `ignore_index` left out.

    `y_pred` is `(batch, H, W, classes)` log-probabilities (what
    `Segmenter.class_log_probabilities` gives, at the labels' size); `y_true`
    `(batch, H, W)` class indices. The mean is over the labelled pixels.

    Example:

    >>> import numpy as np
    >>> log_p = np.log(np.array([[[[0.5, 0.5], [0.9, 0.1]]]], "float32"))
    >>> round(float(SegmentationLoss()(np.array([[[0, 255]]]), log_p)), 4)
    0.6931
    """

    def __init__(self, ignore_index=IGNORE_INDEX, name="segmentation_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.ignore_index = int(ignore_index)

    def call(self, y_true, y_pred):
        labels = ops.cast(y_true, "int32")
        valid = ops.not_equal(labels, self.ignore_index)
        safe = ops.where(valid, labels, 0)
        picked = ops.take_along_axis(ops.cast(y_pred, "float32"), safe[..., None], axis=-1)[..., 0]
        weights = ops.cast(valid, "float32")
        total = ops.sum(-picked * weights, axis=(1, 2))
        return total / ops.maximum(ops.sum(weights, axis=(1, 2)), 1.0)

    def get_config(self):
        return {**super().get_config(), "ignore_index": self.ignore_index}


@keras.saving.register_keras_serializable(package="keras_vit")
class SiLogLoss(keras.losses.Loss):
    """The scale-invariant log loss (Eigen et al. 2014) on pixels with depth.

    With `g = log(pred) - log(true)` over the pixels where the true depth is
    positive: `sqrt(mean(g**2) - variance_focus * mean(g)**2)`, per image.
    `variance_focus` 1 ignores the global scale entirely (relative depth),
    0.85 (default, ZoeDepth's and Depth Anything's metric fine-tuning) keeps
    some of it.

    Example:

    >>> import numpy as np
    >>> true = np.array([[[1.0, 2.0], [4.0, 0.0]]], "float32")
    >>> round(float(SiLogLoss(variance_focus=1.0)(true, 2 * true + 1e-6)), 4)  # a scale only
    0.0
    """

    def __init__(self, variance_focus=0.85, min_depth=1e-3, name="silog_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.variance_focus = float(variance_focus)
        self.min_depth = check_positive_float(min_depth, "min_depth")

    def call(self, y_true, y_pred):
        true = ops.cast(y_true, "float32")
        valid = ops.cast(true > 0, "float32")
        count = ops.maximum(ops.sum(valid, axis=(1, 2)), 1.0)
        g = (ops.log(ops.maximum(ops.cast(y_pred, "float32"), self.min_depth))
             - ops.log(ops.maximum(true, self.min_depth))) * valid
        mean = ops.sum(g, axis=(1, 2)) / count
        square = ops.sum(g * g, axis=(1, 2)) / count
        return ops.sqrt(ops.maximum(square - self.variance_focus * mean * mean, 1e-12))

    def get_config(self):
        return {**super().get_config(), "variance_focus": self.variance_focus, "min_depth": self.min_depth}


@keras.saving.register_keras_serializable(package="keras_vit")
class SegmentationMeanIoU(keras.metrics.Metric):
    """Mean intersection over union of the classes, from per-pixel scores.

    `y_pred` `(batch, H, W, classes)` (any monotonic scores: logits,
    log-probabilities) is reduced to its best class; `y_true` holds class
    indices, `ignore_index` pixels left out. The confusion matrix is summed
    over the batches; classes absent from both the labels and the
    predictions do not count.

    Example:

    >>> import numpy as np
    >>> metric = SegmentationMeanIoU(2)
    >>> metric.update_state(np.array([[[0, 1]]]), np.array([[[[1.0, 0.0], [1.0, 0.0]]]], "float32"))
    >>> round(float(metric.result()), 3)  # class 0: 1/2, class 1: 0/1
    0.25
    """

    def __init__(self, num_classes, ignore_index=IGNORE_INDEX, name="mean_iou", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes = check_positive_int(num_classes, "num_classes")
        self.ignore_index = int(ignore_index)
        self.confusion = self.add_variable(shape=(self.num_classes, self.num_classes), initializer="zeros",
                                           name="confusion", dtype="float32")

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels = ops.reshape(ops.cast(y_true, "int32"), (-1,))
        predicted = ops.reshape(ops.argmax(y_pred, axis=-1), (-1,))
        valid = ops.cast(ops.not_equal(labels, self.ignore_index), "float32")
        safe = ops.where(ops.not_equal(labels, self.ignore_index), labels, 0)
        pairs = safe * self.num_classes + ops.cast(predicted, "int32")
        counts = ops.segment_sum(valid, pairs, num_segments=self.num_classes**2)
        self.confusion.assign_add(ops.reshape(counts, (self.num_classes, self.num_classes)))

    def result(self):
        matrix = self.confusion
        true_positive = ops.diagonal(matrix)
        union = ops.sum(matrix, axis=0) + ops.sum(matrix, axis=1) - true_positive
        present = ops.cast(union > 0, "float32")
        iou = true_positive / ops.maximum(union, 1.0)
        return ops.sum(iou * present) / ops.maximum(ops.sum(present), 1.0)

    def reset_state(self):
        self.confusion.assign(ops.zeros(self.confusion.shape, "float32"))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "ignore_index": self.ignore_index}


class _DepthMetric(keras.metrics.Metric):
    """A mean over the pixels with depth (true depth > 0) of all batches."""

    def __init__(self, name, **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total", dtype="float32")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count", dtype="float32")

    def per_pixel(self, true, pred):
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        true = ops.cast(y_true, "float32")
        pred = ops.maximum(ops.cast(y_pred, "float32"), 1e-6)
        valid = ops.cast(true > 0, "float32")
        self.total.assign_add(ops.sum(self.per_pixel(ops.maximum(true, 1e-6), pred) * valid))
        self.count.assign_add(ops.sum(valid))

    def result(self):
        return self.total / ops.maximum(self.count, 1.0)

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)


@keras.saving.register_keras_serializable(package="keras_vit")
class AbsRel(_DepthMetric):
    """Mean absolute relative error `|pred - true| / true` over pixels with depth.

    Example:

    >>> import numpy as np
    >>> metric = AbsRel()
    >>> metric.update_state(np.array([[[2.0, 0.0]]]), np.array([[[3.0, 5.0]]]))
    >>> float(metric.result())
    0.5
    """

    def __init__(self, name="abs_rel", **kwargs):
        super().__init__(name=name, **kwargs)

    def per_pixel(self, true, pred):
        return ops.abs(pred - true) / true


@keras.saving.register_keras_serializable(package="keras_vit")
class Delta1(_DepthMetric):
    """The share of pixels with depth where `max(pred / true, true / pred) < 1.25` (δ1).

    Example:

    >>> import numpy as np
    >>> metric = Delta1()
    >>> metric.update_state(np.array([[[2.0, 2.0]]]), np.array([[[2.2, 4.0]]]))
    >>> float(metric.result())
    0.5
    """

    def __init__(self, name="delta1", **kwargs):
        super().__init__(name=name, **kwargs)

    def per_pixel(self, true, pred):
        return ops.cast(ops.maximum(pred / true, true / pred) < 1.25, "float32")


class MaskAnnealing(keras.callbacks.Callback):
    """Lowers a `Segmenter`'s masked-attention probabilities during `fit`.

    EoMT trains with masked attention and anneals it away, block after
    block, so that the model needs no mask at inference (Kerssies et al.
    2025, §3.3): block `j` of the `n` with queries goes from 1 to 0
    following `(1 - t)**power` over its share of `steps`, the blocks one
    after another from the first.

    Args:
        steps: int, the training steps over which all blocks are annealed.
        power: float, default 0.9 (the paper's polynomial).

    Example:

    >>> callback = MaskAnnealing(steps=100)
    >>> [round(callback.probability(step, 0, 2), 3) for step in (0, 25, 50, 99)]
    [1.0, 0.536, 0.0, 0.0]
    """

    def __init__(self, steps, power=0.9):
        super().__init__()
        self.steps = check_positive_int(steps, "steps")
        self.power = check_positive_float(power, "power")
        self._step = 0

    def probability(self, step, block, blocks):
        share = self.steps / blocks
        t = (step - block * share) / share
        return 1.0 if t <= 0 else max(0.0, 1.0 - min(t, 1.0)) ** self.power

    def on_train_batch_begin(self, batch, logs=None):
        head = getattr(self.model, "eomt_head", None)
        if head is None or head.mask_probability is None:
            raise ValueError("MaskAnnealing anneals a Segmenter(head='eomt') built with masked attention "
                             "(mask_probabilities above 0).")
        blocks = len(head.mask_probabilities)
        head.mask_probability.assign([self.probability(self._step, j, blocks) for j in range(blocks)])
        self._step += 1


def _windows(length, window, stride):
    """Start offsets covering `length` with windows of `window` every `stride` (the last flush)."""
    if length <= window:
        return [0]
    starts = list(range(0, length - window, stride))
    return starts + [length - window]


def sliding_window(model, pixels, window=None, stride=None, batch_size=8):
    """A dense model's main output on prepared `pixels` larger than its input.

    The image is covered by overlapping `window`-sized crops every
    `stride` pixels (the last crops flush with the edges); the model's
    per-pixel output of each crop (a `DepthEstimator`'s depth, a
    `Segmenter`'s class log-probabilities) is put back in place and the
    overlaps are averaged.

    Args:
        model: a `DepthEstimator` or `Segmenter`.
        pixels: one prepared image `(H, W, 3)` (or `(1, H, W, 3)`), as the
            model takes it (scaled).
        window: None (default: the model's image size) or an int or
            `(height, width)`, multiples of the patch size.
        stride: None (default: two thirds of the window, rounded down to
            the patch size) or an int or `(height, width)`.
        batch_size: int, default 8: crops per forward pass.

    Returns:
        NumPy `(H, W)` depths, or `(H, W, classes)` class log-probabilities.

    Example:

    >>> import numpy as np, keras_vit
    >>> encoder = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1, num_heads=2,
    ...                         mlp_dim=16, include_top=False)
    >>> model = keras_vit.Segmenter(encoder, classes=3, head="linear")
    >>> sliding_window(model, np.zeros((40, 24, 3), "float32")).shape
    (40, 24, 3)
    """
    from keras_vit.validation import pair

    pixels = np.asarray(pixels, "float32")
    pixels = pixels[0] if pixels.ndim == 4 else pixels
    window = pair(window, "window") if window is not None else tuple(model.image_size)
    cell = model.effective_patch_size
    if stride is None:
        stride = tuple(max(c, (2 * w // 3) // c * c) for w, c in zip(window, cell))
    stride = pair(stride, "stride")
    height, width = pixels.shape[:2]
    if height < window[0] or width < window[1]:
        raise ValueError(f"The image ({height}x{width}) is smaller than the window {window}: run the model on it.")
    boxes = [(top, left) for top in _windows(height, window[0], stride[0]) for left in _windows(width, window[1], stride[1])]
    total, count = None, np.zeros((height, width, 1), "float32")
    for i in range(0, len(boxes), batch_size):
        chunk = boxes[i : i + batch_size]
        crops = np.stack([pixels[t : t + window[0], left : left + window[1]] for t, left in chunk])
        outputs = model.predict_on_batch(crops)
        main = np.asarray(ops.convert_to_numpy(model._main(outputs, np.zeros(crops.shape[:3], "int32"))))
        main = main[..., None] if main.ndim == 3 else main
        if total is None:
            total = np.zeros((height, width, main.shape[-1]), "float32")
        for (t, left), value in zip(chunk, main):
            total[t : t + window[0], left : left + window[1]] += value
            count[t : t + window[0], left : left + window[1]] += 1
    out = total / np.maximum(count, 1)
    return out[..., 0] if out.shape[-1] == 1 and model.MAIN_OUTPUT == "predicted_depth" else out
