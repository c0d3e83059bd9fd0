"""EoMT's (and the linear head's) post-processing: semantic, panoptic and
instance segmentation of one image from the model's outputs, as
transformers' `EomtImageProcessor` computes them.

Each function takes one image's outputs (NumPy, without the batch axis;
several rows for a split image), the image's `Prepared` record
(`keras_vit.preprocessing.dense`) and the record it was prepared with,
and returns `(segmentation, segments)`: an int32 `(height, width)` map at
the image's size (semantic: a class per pixel; panoptic and instance: a
segment id per pixel, -1 where none) and a list of segment dicts (`id`,
`label_id`, `score`). The resizes are torch's bilinear (half-pixel, no
antialias: `keras_vit.layers.resize.resize_bilinear`), on the backend. The
maps at the image's size (a class's or a query's) are made a group at a
time (`MAP_GROUP_BYTES`): at 12 megapixels each is 48 MB, and a model has
hundreds of classes and queries.

What `keras-vit segment` writes comes from here too: `segments_with_masks`
(each segment's pixels as COCO's run-length encoding) and `label_map` (the
class of every pixel, as a segmentation folder's masks hold it).

Where the processor does something odd, it is done here too, so that the
results are the processor's: the semantic maps of a padded image are
resized from the whole padded square (not its image part), while the
panoptic and instance ones are cut to the image part first.
"""

import numpy as np
from keras import ops

from keras_vit.layers.resize import resize_bilinear
from keras_vit.preprocessing.dense import _shorter_side
from keras_vit.tasks.dense_data import IGNORE_INDEX
from keras_vit.tasks.rle import mask_to_rle

SUBTASKS = ("semantic", "panoptic", "instance")


def _resize(maps, size):
    """`(n, h, w)` NumPy maps resized to `size`, torch's bilinear (half-pixel)."""
    maps = np.asarray(maps, "float32")
    if tuple(maps.shape[1:]) == tuple(size):
        return maps
    x = ops.convert_to_tensor(np.transpose(maps, (1, 2, 0))[None])
    return np.transpose(ops.convert_to_numpy(resize_bilinear(x, tuple(int(s) for s in size)))[0], (2, 0, 1))


# The bytes of float32 maps at the image's size made at a time.
MAP_GROUP_BYTES = 2 ** 28


def _resized_groups(maps, size):
    """`(slice, resized)` pairs: `(n, h, w)` maps resized to `size`, a group
    of maps at a time (each group within `MAP_GROUP_BYTES`)."""
    step = max(1, MAP_GROUP_BYTES // (4 * int(size[0]) * int(size[1])))
    for start in range(0, len(maps), step):
        group = slice(start, start + step)
        yield group, _resize(maps[group], size)


def _argmax_of_groups(groups):
    """The index of the largest value per pixel over groups `(slice, values)`
    of `(k, H, W)` maps, the first where values tie (`np.argmax` of them all).

    Example:

    >>> maps = np.array([[[1.0, 5.0]], [[3.0, 5.0]], [[2.0, 6.0]]])
    >>> _argmax_of_groups((slice(i, i + 2), maps[i:i + 2]) for i in (0, 2)).tolist()
    [[1, 2]]
    """
    index = best = None
    for group, values in groups:
        top = np.argmax(values, axis=0)
        value = np.take_along_axis(values, top[None], axis=0)[0]
        if index is None:
            index, best = (top + group.start).astype("int32"), value
            continue
        better = value > best
        index[better] = top[better] + group.start
        best[better] = value[better]
    return index


def _softmax(x):
    x = np.asarray(x, "float64")
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype("float32")


def _sigmoid(x):
    return (1.0 / (1.0 + np.exp(-np.asarray(x, "float64")))).astype("float32")


def target_size(record):
    """The processor's `get_target_size`: the masks' common size `(h, w)`."""
    shorter, longer = record.size
    return (shorter, longer or shorter)


def _resized_size(image_size, record):
    return _shorter_side(image_size[0], image_size[1], record.size[0], record.size[1])


def semantic_scores(class_logits, mask_logits, prepared, record):
    """Per-class scores `(classes, h, w)` of EoMT's outputs, which `semantic`
    resizes to the image's size.

    The masks are resized to `target_size`, weighed by the classes'
    probabilities (without "no object") and summed over the queries; a
    split image's squares are put back where they were cut and averaged
    where they overlap (a padded image's scores are the whole padded
    square's, as the processor resizes them).
    """
    masks = [_resize(m, target_size(record)) for m in mask_logits]
    scores = np.stack([np.einsum("qc,qhw->chw", _softmax(c)[..., :-1], _sigmoid(m))
                       for c, m in zip(class_logits, masks)])
    if prepared.offsets is None:
        return scores[0]
    height, width = _resized_size(prepared.image_size, record)
    total = np.zeros((scores.shape[1], height, width), "float32")
    count = np.zeros((1, height, width), "float32")
    tall = prepared.image_size[0] > prepared.image_size[1]
    for square, (start, end) in zip(scores, prepared.offsets):
        if tall:
            total[:, start:end] += square
            count[:, start:end] += 1
        else:
            total[:, :, start:end] += square
            count[:, :, start:end] += 1
    return total / np.maximum(count, 1)


def linear_scores(logits):
    """The linear head's logits `(1, h, w, classes)` as the scores `(classes,
    h, w)` that `semantic` resizes to the image's size."""
    logits = np.asarray(logits)
    if logits.shape[0] != 1:
        raise ValueError("The linear head's post-processing takes unsplit images.")
    return np.transpose(logits[0], (2, 0, 1))


def semantic(scores, size):
    """`(segmentation, segments)` of per-class scores `(classes, h, w)`
    resized to `size`: the best class per pixel (the first where classes
    tie) and one segment per class present (no score)."""
    segmentation = _argmax_of_groups(_resized_groups(scores, size))
    segments = [{"id": int(c), "label_id": int(c), "score": None} for c in np.unique(segmentation)]
    return segmentation, segments


def _unpadded_masks(mask_logits, prepared, record):
    """The masks resized to `target_size` and cut to the image part, which
    `_resized_groups` resizes to the image's size."""
    masks = _resize(mask_logits[0], target_size(record))
    height, width = _resized_size(prepared.image_size, record)
    return masks[:, :height, :width]


def panoptic(class_logits, mask_logits, prepared, record, threshold=0.9, mask_threshold=0.5,
             overlap_mask_area_threshold=0.5, stuff_classes=None):
    """`(segmentation, segments)` of one image's EoMT outputs, panoptic.

    Queries whose best class (with "no object") is a real class with
    probability above `threshold` compete for each pixel by that probability
    times their mask's; a query keeps the pixels it wins where its mask is
    above `mask_threshold`, if they are more than `overlap_mask_area_threshold`
    of its mask. Queries of a class in `stuff_classes` share one segment.
    """
    probabilities = _softmax(class_logits[0])
    scores, labels = probabilities.max(-1), probabilities.argmax(-1)
    keep = (labels != probabilities.shape[-1] - 1) & (scores > threshold)
    masks = _unpadded_masks(mask_logits, prepared, record)[keep]
    scores, labels = scores[keep], labels[keep]
    segmentation = np.full(prepared.image_size, -1, "int32")
    if not len(masks):
        return segmentation, []
    # Two passes over the masks at the image's size: the query winning each
    # pixel, then each query's segment.
    winner = _argmax_of_groups((group, scores[group, None, None] * _sigmoid(resized))
                               for group, resized in _resized_groups(masks, prepared.image_size))
    segments, stuff = [], {}
    for group, resized in _resized_groups(masks, prepared.image_size):
        for i, k in enumerate(range(group.start, group.start + len(resized))):
            label = int(labels[k])
            mine = winner == k
            original = _sigmoid(resized[i]) >= mask_threshold
            final = mine & original
            area, original_area, final_area = mine.sum(), original.sum(), final.sum()
            if not (area > 0 and original_area > 0 and final_area > 0
                    and area / original_area > overlap_mask_area_threshold):
                continue
            if stuff_classes and label in stuff_classes:
                if label in stuff:
                    segmentation[final] = stuff[label]
                    continue
                stuff[label] = len(segments)
            segmentation[final] = len(segments)
            segments.append({"id": len(segments), "label_id": label, "score": round(float(scores[k]), 6)})
    return segmentation, segments


def instance(class_logits, mask_logits, prepared, record, threshold=0.9):
    """`(segmentation, segments)` of one image's EoMT outputs, instances.

    Each query's score is its best real class's probability times the mean
    probability of its mask over the mask (logit > 0); queries above
    `threshold` with a non-empty mask are painted in query order, later
    ones over earlier ones.
    """
    probabilities = _softmax(class_logits[0])[..., :-1]
    scores, labels = probabilities.max(-1), probabilities.argmax(-1)
    segmentation = np.full(prepared.image_size, -1, "int32")
    segments = []
    for group, masks in _resized_groups(_unpadded_masks(mask_logits, prepared, record), prepared.image_size):
        binary = masks > 0
        area = binary.reshape(len(binary), -1).sum(1)
        mask_scores = (_sigmoid(masks) * binary).reshape(len(binary), -1).sum(1) / (area + 1e-6)
        final = scores[group] * mask_scores
        for i, j in enumerate(range(group.start, group.start + len(masks))):
            if area[i] > 0 and final[i] >= threshold:
                segmentation[binary[i]] = len(segments)
                segments.append({"id": len(segments), "label_id": int(labels[j]), "score": round(float(final[i]), 6)})
    return segmentation, segments


def segments_with_masks(segmentation, segments, compressed=True):
    """The segments, each with its pixels as COCO's run-length encoding.

    What `keras-vit segment` writes in its JSON: each segment's dict with
    "mask" added, the pixels the segment holds in `segmentation` (the
    pixels whose id is its "id"; an instance that a later one covers keeps
    what is left of it), encoded by `keras_vit.tasks.rle.mask_to_rle`.

    Args:
        segmentation: `(H, W)` ids (a `segment` result's "segmentation").
        segments: its "segments" (dicts with "id").
        compressed: bool, default True: COCO's compressed string (as
            `pycocotools.mask.encode` writes it); False: a list of counts.

    Returns:
        A list of new dicts, in the order of `segments`.

    Example:

    >>> segmentation = np.array([[0, 0, 1], [0, 1, 1]])
    >>> segments_with_masks(segmentation, [{"id": 1, "label_id": 4}], compressed=False)
    [{'id': 1, 'label_id': 4, 'mask': {'size': [2, 3], 'counts': [3, 3]}}]
    """
    segmentation = np.asarray(segmentation)
    return [dict(item, mask=mask_to_rle(segmentation == item["id"], compressed=compressed)) for item in segments]


def label_map(segmentation, segments, classes=None):
    """The class of every pixel: what `keras-vit segment` writes as a PNG.

    Each pixel holds the "label_id" of the segment it belongs to and
    `IGNORE_INDEX` (255) where it belongs to none: the masks that
    `keras_vit.tasks.dense_data.load_segmentation_folder` reads, so that
    a run's results can be corrected and trained on. A model of more than
    255 classes gets a 16-bit map, 65535 where no segment is.

    Args:
        segmentation: `(H, W)` ids (a `segment` result's "segmentation";
            -1: none).
        segments: its "segments" (dicts with "id" and "label_id").
        classes: None or the model's number of classes: the map is uint8
            when it is at most 255 (None: when the labels present fit).

    Returns:
        A `(H, W)` uint8 or uint16 array.

    Example:

    >>> label_map(np.array([[0, 1], [-1, 1]]), [{"id": 0, "label_id": 7}, {"id": 1, "label_id": 2}]).tolist()
    [[7, 2], [255, 2]]
    """
    segmentation = np.asarray(segmentation)
    largest = max([item["label_id"] for item in segments] + [0]) + 1 if classes is None else int(classes)
    dtype = "uint8" if largest <= IGNORE_INDEX else "uint16"
    out = np.full(segmentation.shape, np.iinfo(dtype).max, dtype)
    for item in segments:
        out[segmentation == item["id"]] = item["label_id"]
    return out


__all__ = ["SUBTASKS", "instance", "label_map", "linear_scores", "panoptic", "segments_with_masks", "semantic",
           "semantic_scores", "target_size"]
