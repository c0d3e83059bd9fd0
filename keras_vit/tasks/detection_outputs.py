"""Open-vocabulary detection's post-processing: from a detector's raw
outputs to each image's boxes in pixels, labelled and scored, as
transformers' OWL-ViT / OWLv2 image processors and its
`zero-shot-object-detection` pipeline compute them (`postprocess`), with
the box helpers it uses (`corners`, `box_scale`, `clip`, `nms`; `nms` also
serves SAM's automatic masks). Boxes are cut to the image by default
(`clip_boxes`), which transformers does not do: an OWLv2 image is padded to
a square, and a box can reach into the padding past the image.
"""

import collections

import numpy as np

Detection = collections.namedtuple("Detection", ["label", "score", "box"])
Detection.__doc__ = """One detected object: `(label, score, box)`.

`label` is the query that found it (its text, or the name of an example
image), `score` the sigmoid of its class logit, `box` `(x0, y0, x1, y1)` in
the image's pixels (floats)."""


def corners(boxes):
    """`(cx, cy, w, h)` boxes to `(x0, y0, x1, y1)` (any leading shape).

    Example:

    >>> corners(np.array([[0.5, 0.5, 0.2, 0.4]])).round(3).tolist()
    [[0.4, 0.3, 0.6, 0.7]]
    """
    cx, cy, w, h = np.moveaxis(np.asarray(boxes, "float64"), -1, 0)
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)


def box_scale(size, pad_to_square):
    """`(4,)` multipliers from `[0, 1]` boxes to an image's pixels: its
    width and height, or (padded to a square) its longer side twice."""
    height, width = size
    if pad_to_square:
        return np.full(4, max(height, width), "float64")
    return np.array([width, height, width, height], "float64")


def nms(boxes, scores, iou_threshold):
    """Greedy non-maximum suppression: the indices kept, best first.

    Args:
        boxes: `(n, 4)` corner boxes.
        scores: `(n,)`.
        iou_threshold: a box overlapping a kept one by more than this
            (intersection over union) is dropped.

    Example:

    >>> nms(np.array([[0, 0, 2, 2], [0, 0, 2, 1.9], [3, 3, 4, 4]]), np.array([0.9, 0.8, 0.7]), 0.5).tolist()
    [0, 2]
    """
    boxes = np.asarray(boxes, "float64")
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    order, keep = list(np.argsort(-np.asarray(scores), kind="stable")), []
    while order:
        best, order = order[0], np.asarray(order[1:], int)
        keep.append(best)
        if not len(order):
            break
        lo = np.maximum(boxes[best, :2], boxes[order, :2])
        hi = np.minimum(boxes[best, 2:], boxes[order, 2:])
        inter = np.prod(np.clip(hi - lo, 0, None), axis=-1)
        union = areas[best] + areas[order] - inter
        # Boxes of no area (empty masks) overlap nothing.
        iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        order = list(order[iou <= iou_threshold])
    return np.asarray(keep, int)


def clip(boxes, size):
    """`(..., 4)` corner boxes in pixels cut to an image of `size` `(height, width)`.

    Example:

    >>> clip(np.array([[-5.0, 10.0, 70.0, 90.0]]), (80, 60)).tolist()
    [[0.0, 10.0, 60.0, 80.0]]
    """
    height, width = size
    return np.clip(boxes, 0, np.array([width, height, width, height], "float64"))


def postprocess(outputs, sizes, labels, threshold=0.1, nms_threshold=None, top_k=None, pad_to_square=False,
                clip_boxes=True):
    """Detections per image from a detector's outputs.

    For each query, every patch whose score `sigmoid(logit)` is above
    `threshold` (after non-maximum suppression among that query's boxes,
    with `nms_threshold`), its box in pixels (cut to the image with
    `clip_boxes`); per image sorted by score, the best `top_k`.

    Args:
        outputs: `{"logits": (n, patches, queries), "pred_boxes": (n,
            patches, 4)}` (NumPy).
        sizes: `(height, width)` of each original image.
        labels: one label per query.
        threshold: float in [0, 1], default 0.1.
        nms_threshold: None (default: no suppression, as the pipeline) or a
            float in [0, 1].
        top_k: None or an int: the most detections per image.
        pad_to_square: whether the images were padded to a square.
        clip_boxes: bool, default True: boxes cut to the image (`clip`);
            False: as the model gives them (transformers' post-processing),
            which may reach past the image, into an OWLv2 image's padding.

    Returns:
        A list with, per image, a list of `Detection`s.
    """
    logits = np.asarray(outputs["logits"], "float64")
    scores = 1.0 / (1.0 + np.exp(-logits))
    boxes = corners(outputs["pred_boxes"])
    results = []
    for image_scores, image_boxes, size in zip(scores, boxes, sizes):
        pixels = image_boxes * box_scale(size, pad_to_square)
        if clip_boxes:
            pixels = clip(pixels, size)
        found = []
        for query, label in enumerate(labels):
            column = image_scores[:, query]
            candidates = np.arange(len(column)) if nms_threshold is None else nms(image_boxes, column, nms_threshold)
            found += [Detection(label, float(column[i]), tuple(float(v) for v in pixels[i]))
                      for i in candidates if column[i] > threshold]
        found.sort(key=lambda d: -d.score)
        results.append(found[:top_k] if top_k else found)
    return results
