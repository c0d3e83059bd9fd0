"""Automatic mask generation (SAM): every object of an image from a grid of
clicks, as transformers' `mask-generation` pipeline on the whole image.

`generate_masks(model, image)` embeds the image once (the segmenter's
`image_embedder`), decodes a grid of single positive clicks in batches
(`prompt_decoder`), three masks per click, keeps the masks whose predicted
IoU and stability score pass their thresholds, and among overlapping ones
(the IoU of their boxes) the best. The candidates are judged at the
image's size a group at a time (`mask_outputs.MASK_GROUP_BYTES`) and only
the survivors are made again at that size, so memory does not grow with
the number of clicks.

Kirillov et al., "Segment Anything", ICCV 2023, arXiv:2304.02643.
"""

import numpy as np

from keras_vit.tasks.detection_outputs import nms
from keras_vit.tasks.mask_outputs import full_size_masks, mask_groups, mask_resizer
from keras_vit.tasks.progress import Progress
from keras_vit.tasks.prompt_masks import decode_prompts, embed_image, prompt_points
from keras_vit.validation import check_float, check_positive_int, check_verbose


def point_grid(per_side):
    """`(per_side ** 2, 2)` points evenly spread over `[0, 1]^2`, row by row
    (the centres of a `per_side` x `per_side` grid of cells).

    Example:

    >>> point_grid(2).tolist()
    [[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]]
    """
    side = np.linspace(1 / (2 * per_side), 1 - 1 / (2 * per_side), per_side)
    x, y = np.meshgrid(side, side)
    return np.stack([x, y], axis=-1).reshape(-1, 2)


def stability_scores(logits, threshold=0.0, offset=1.0):
    """The IoU between a mask cut at `threshold + offset` and at
    `threshold - offset` (SAM's stability score).

    Example:

    >>> stability_scores(np.array([[[2.0, 0.5], [-0.5, -3.0]]])).tolist()
    [0.3333333333333333]
    """
    inside = np.count_nonzero(logits > threshold + offset, axis=(-2, -1))
    around = np.count_nonzero(logits > threshold - offset, axis=(-2, -1))
    return inside / np.maximum(around, 1)


def mask_boxes(masks):
    """`(n, 4)` `(x0, y0, x1, y1)` boxes of boolean masks (inclusive pixel
    indices; zeros for an empty mask).

    Example:

    >>> masks = np.zeros((2, 4, 5), bool)
    >>> masks[0, 1:3, 2:5] = True
    >>> mask_boxes(masks).tolist()
    [[2, 1, 4, 2], [0, 0, 0, 0]]
    """
    rows, columns = masks.any(axis=-1), masks.any(axis=-2)
    boxes = np.zeros(masks.shape[:-2] + (4,), "int64")
    for i, (r, c) in enumerate(zip(rows, columns)):
        if r.any():
            ys, xs = np.nonzero(r)[0], np.nonzero(c)[0]
            boxes[i] = (xs[0], ys[0], xs[-1], ys[-1])
    return boxes


def generate_masks(model, image, points_per_side=32, points_per_batch=64, pred_iou_threshold=0.88,
                   stability_score_threshold=0.95, stability_score_offset=1.0, mask_threshold=0.0,
                   nms_threshold=0.7, verbose="auto"):
    """Every object in an image: SAM's automatic mask generation (the
    `mask-generation` pipeline on the whole image).

    A grid of single positive clicks is decoded in batches, three masks per
    click; masks whose predicted IoU and stability score pass their
    thresholds are kept, and among overlapping ones (IoU of their boxes
    above `nms_threshold`) the best.

    Args:
        model: a `PromptableSegmenter` or a `SamModel` directory.
        image: one image (as `segment_prompts`).
        points_per_side: int >= 1, default 32: the grid's points a side.
        points_per_batch: int >= 1, default 64: clicks per decoder call.
        pred_iou_threshold: float in [0, 1], default 0.88.
        stability_score_threshold: float in [0, 1], default 0.95.
        stability_score_offset: float >= 0, default 1: the logits' margin
            around `mask_threshold` of the stability score.
        mask_threshold: float, default 0: the logit above which a pixel is in.
        nms_threshold: float in [0, 1], default 0.7.
        verbose: "auto" (default: progress over the clicks when they make
            more than one batch), 0 (silent), 1 (progress: a bar on a
            terminal, plain lines in a log) or 2 (one line at the end).

    Returns:
        A dict: "masks" `(n, height, width)` booleans, "scores" `(n,)`
        predicted IoUs, "boxes" `(n, 4)` `(x0, y0, x1, y1)`, best first.

    Raises:
        ValueError: an argument out of its range or of the wrong type,
            named before the image is read.
    """
    per_side = check_positive_int(points_per_side, "points_per_side")
    batch = check_positive_int(points_per_batch, "points_per_batch")
    iou_threshold = check_float(pred_iou_threshold, "pred_iou_threshold", minimum=0.0, maximum=1.0)
    stability = check_float(stability_score_threshold, "stability_score_threshold", minimum=0.0, maximum=1.0)
    stability_score_offset = check_float(stability_score_offset, "stability_score_offset", minimum=0.0)
    mask_threshold = check_float(mask_threshold, "mask_threshold")
    nms_threshold = check_float(nms_threshold, "nms_threshold", minimum=0.0, maximum=1.0)
    verbose = check_verbose(verbose, -(-per_side ** 2 // batch))
    model, embedding, size, shape = embed_image(model, image)
    clicks = point_grid(per_side) * np.array([size[1], size[0]])
    points, labels = prompt_points(size, shape, clicks[:, None])
    low_res = tuple(4 * int(side) for side in model.image_encoder.grid_size)
    resizer = mask_resizer(low_res, model.image_size, shape, size)
    # Candidates are kept as their low-resolution logits: at the image's size
    # they are judged a group at a time and dropped, and only the masks that
    # survive the suppression are made again, as booleans.
    kept = {"logits": [np.zeros((0,) + low_res, "float32")], "scores": [np.zeros(0, "float32")],
            "boxes": [np.zeros((0, 4), "int64")]}
    progress = Progress(len(points), verbose, "click")
    for start in range(0, len(points), batch):
        out = decode_prompts(model, embedding, points[start:start + batch], labels[start:start + batch], batch)
        logits = out["pred_masks"][:, 1:].reshape((-1,) + out["pred_masks"].shape[-2:])
        scores = out["iou_scores"][:, 1:].reshape(-1)
        keep = scores > iou_threshold if iou_threshold > 0 else np.ones(len(scores), bool)
        logits, scores = logits[keep], scores[keep]
        for group, maps in mask_groups(logits, resizer):
            good = np.ones(len(maps), bool)
            if stability > 0:
                good = stability_scores(maps, mask_threshold, stability_score_offset) > stability
            kept["logits"].append(logits[group][good])
            kept["scores"].append(scores[group][good])
            kept["boxes"].append(mask_boxes((maps > mask_threshold)[good]))
        progress.update(min(start + batch, len(points)))
    logits, scores, boxes = (np.concatenate(kept[key]) for key in ("logits", "scores", "boxes"))
    order = nms(boxes.astype("float64"), scores, nms_threshold) if len(logits) else np.zeros(0, int)
    masks = full_size_masks(logits[order], resizer, mask_threshold)
    return {"masks": masks, "scores": scores[order].astype("float32"), "boxes": boxes[order]}
