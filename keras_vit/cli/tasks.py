"""The work of `keras-vit detect` and `keras-vit masks` (parsed in
`keras_vit_tools.tasks_command`, run by `keras_vit.cli.commands.run`).

`keras-vit detect MODEL IMAGE... --queries TEXT... --out DIR` runs
`keras_vit.detect` and writes, per image, the image with its labelled
boxes (`<image>_detections.png`, `keras_vit.tasks.pictures.detections_picture`)
and its detections (`<image>_detections.json`), the boxes cut to the image
unless `--no-clip-boxes`, the same boxes in both; `keras-vit masks MODEL
IMAGE... (--points X,Y... [--labels L...] [--box X0 Y0 X1 Y1] | --automatic)
--out DIR` runs `keras_vit.segment_prompts` (or `keras_vit.generate_masks`)
on each image in turn and writes `<image>_masks.png` (every mask and the
prompts, `keras_vit.tasks.pictures.masks_picture`) and `<image>_masks.json`,
the masks run-length encoded (COCO's uncompressed RLE, column by column, as
transformers' mask-generation pipeline encodes them:
`keras_vit.tasks.rle`). A prompt that fits no image is an error before
the model loads; an image that cannot be read (or, for `masks`, that its
prompt does not fit) is named and passed over; the command writes
the others' results and exits with status 1
(`keras_vit.cli.files.Failures`).
"""

import contextlib
import json
import os
import sys

import numpy as np

from keras_vit.cli.files import Failures, readable_chunks
from keras_vit.tasks import detection, mask_generation, pictures, prompt_masks
from keras_vit.tasks.rle import mask_to_rle
from keras_vit.presets import from_preset


def _write_json(path, data):
    with open(path, "w") as handle:
        json.dump(data, handle, indent=1)
    return path


# Images read, detected and written at a time.
CHUNK = 32


def detect_command(args):
    """Runs `keras-vit detect`; returns the exit status (1 when some images
    could not be read, 2 on unusable input).

    Each image's files are written as soon as its chunk is done, so what was
    found before a failure is kept.
    """
    failures = Failures("detect")
    try:
        if not args.queries and not args.query_images:
            raise ValueError("Give what to find: --queries (texts), --query-images (example images) or both.")
        model = from_preset(args.model)
        if not isinstance(model, detection.OpenVocabularyDetector):
            raise ValueError(f"The model {args.model!r} is not a detector (OWL-ViT, OWLv2): "
                             f"its class is {type(model).__name__}")
        model = model.with_queries(args.queries, query_images=args.query_images)  # embedded once
        for chunk in readable_chunks(args.images, CHUNK, failures):
            results = detection.detect(model, [image for _, _, image in chunk], threshold=args.threshold,
                                       nms_threshold=args.nms, top_k=args.top_k, clip_boxes=args.clip_boxes,
                                       verbose=0)
            os.makedirs(args.out, exist_ok=True)
            for (path, stem, image), found in zip(chunk, results):
                base = os.path.join(args.out, stem + "_detections")
                picture = pictures.save_png(pictures.detections_picture(image, found), base + ".png")
                written = _write_json(base + ".json", {
                    "image": path, "size": list(image.shape[:2]),
                    "detections": [{"label": d.label, "score": d.score, "box": list(d.box)} for d in found]})
                print(f"{path}: {len(found)} detections; wrote {picture}, {written}")
                for d in found[:10]:
                    print(f"  {d.score:.3f}  {d.label}  ({', '.join(f'{v:.0f}' for v in d.box)})")
            sys.stdout.flush()
    except (ValueError, OSError, ImportError) as error:
        print(f"keras-vit detect: error: {error}", file=sys.stderr)
        return 2
    return failures.status(len(args.images))


def _check_prompt(args):
    if args.automatic and (args.points or args.box):
        raise ValueError("--automatic segments everything: it takes no --points or --box.")
    if not (args.automatic or args.points or args.box):
        raise ValueError("Give a prompt: --points (with --labels), --box, both, or --automatic for every object.")
    if not args.automatic:
        # A mistake that no image's size changes is the command's, not each image's.
        prompt_masks.check_prompt(points=args.points, labels=args.labels, boxes=args.box)


def _segment(args, model, image):
    if args.automatic:
        with contextlib.redirect_stdout(sys.stderr):  # the clicks' progress; the results on stdout
            out = mask_generation.generate_masks(model, image, points_per_side=args.points_per_side)
        return out["masks"], out["scores"], out["boxes"]
    out = prompt_masks.segment_prompts(model, image, points=args.points, labels=args.labels, boxes=args.box,
                                       multimask_output=not args.single)
    masks, scores = out["masks"][0], out["iou_scores"][0]
    order = np.argsort(-scores)
    masks, scores = masks[order], scores[order]
    return masks, scores, mask_generation.mask_boxes(masks)


def masks_command(args):
    """Runs `keras-vit masks`; returns the exit status (1 when some images
    could not be read or their prompt does not fit them, 2 on unusable
    input).

    The images are segmented one at a time, each written before the next is
    read, so what was done before a failure is kept.
    """
    failures = Failures("masks")
    try:
        _check_prompt(args)
        model = from_preset(args.model)
        if not isinstance(model, prompt_masks.PromptableSegmenter):
            raise ValueError(f"The model {args.model!r} is not a SAM model: its class is {type(model).__name__}")
        for ((path, stem, image),) in readable_chunks(args.images, 1, failures):
            try:  # the prompt's pixels may lie outside this image
                masks, scores, boxes = _segment(args, model, image)
            except ValueError as error:
                failures.add(path, error)
                continue
            os.makedirs(args.out, exist_ok=True)
            base = os.path.join(args.out, stem + "_masks")
            drawn = pictures.masks_picture(image, masks, points=args.points, labels=args.labels, boxes=args.box)
            picture = pictures.save_png(drawn, base + ".png")
            records = [{"score": float(s), "box": [int(v) for v in b], "area": int(m.sum()), "mask": mask_to_rle(m)}
                       for m, s, b in zip(masks, scores, boxes)]
            data = {"image": path, "size": list(image.shape[:2]), "masks": records}
            written = _write_json(base + ".json", data)
            print(f"{path}: {len(records)} masks; wrote {picture}, {written}" + "".join(
                f"\n  {r['score']:.3f}  area {r['area']}  box {r['box']}" for r in records[:10]), flush=True)
    except (ValueError, OSError, ImportError) as error:
        print(f"keras-vit masks: error: {error}", file=sys.stderr)
        return 2
    return failures.status(len(args.images))
