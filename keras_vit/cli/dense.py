"""The work of `keras-vit depth` and `keras-vit segment` (parsed in
`keras_vit_tools.dense_command`).

`keras-vit depth MODEL IMAGE [IMAGE ...] --out DIR` runs
`keras_vit.estimate_depth` and writes, per image, `<name>_depth.png` (the
depth map in colour, `keras_vit.tasks.pictures.depth_picture`) and
`<name>_depth.npy` (the depths, float32, at the image's size).
`keras-vit segment MODEL IMAGE [IMAGE ...] --task semantic|panoptic|instance
--out DIR` runs `keras_vit.segment` and writes `<name>_segments.png` (the
segments over the photo with a legend), `<name>_segments.json` (the image,
its size and each segment's id, class, score and pixels as COCO's compressed
run-length encoding, `keras_vit.tasks.segmentation_outputs.segments_with_masks`)
and `<name>_labels.png` (the class of every pixel, 255 where no segment is:
`keras_vit.tasks.segmentation_outputs.label_map`, the masks a segmentation
folder holds), and prints the segments. MODEL is anything
`keras_vit.load_model` takes that holds a depth or segmentation model: a
preset folder (transformers, keras-hub, keras_vit) or an `hf://` handle.
An image that cannot be read is named and passed over; the command writes
the others' results and exits with status 1 (`keras_vit.cli.files.Failures`).
"""

import json
import os
import sys

from keras_vit.cli.files import Failures, readable_chunks
from keras_vit.presets.resolver import load_model
from keras_vit.tasks import pictures
from keras_vit.tasks.segmentation_outputs import label_map, segments_with_masks
from keras_vit.tasks.depth import estimate_depth
from keras_vit.tasks.segmentation import segment

# Images read, run and written at a time.
CHUNK = 8


def depth_command(args):
    """Runs `keras-vit depth`; returns the exit status (1 when some images
    could not be read, 2 on unusable input)."""
    import numpy as np

    failures = Failures("depth")
    try:
        model = load_model(args.model)
        for chunk in readable_chunks(args.images, CHUNK, failures):
            results = estimate_depth(model, [image for _, _, image in chunk], verbose=0)
            os.makedirs(args.out, exist_ok=True)
            for (path, stem, _), result in zip(chunk, results):
                base = os.path.join(args.out, stem + "_depth")
                pictures.save_png(pictures.depth_picture(result["predicted_depth"]), base + ".png")
                np.save(base + ".npy", result["predicted_depth"])
                depth = result["predicted_depth"]
                print(f"{path}: {depth.shape[0]}x{depth.shape[1]}, depth {depth.min():.4g} to {depth.max():.4g}; "
                      f"wrote {base}.png, {base}.npy", flush=True)
    except (ValueError, OSError, ImportError) as error:
        print(f"keras-vit depth: error: {error}", file=sys.stderr)
        return 2
    return failures.status(len(args.images))


def segment_command(args):
    """Runs `keras-vit segment`; returns the exit status (1 when some images
    could not be read, 2 on unusable input)."""
    failures = Failures("segment")
    try:
        model = load_model(args.model)
        options = {} if args.threshold is None else {"threshold": args.threshold}
        for chunk in readable_chunks(args.images, CHUNK, failures):
            results = segment(model, [image for _, _, image in chunk], task=args.task, verbose=0, **options)
            os.makedirs(args.out, exist_ok=True)
            for (path, stem, image), result in zip(chunk, results):
                base = os.path.join(args.out, stem + "_segments")
                labels = pictures.save_png(label_map(result["segmentation"], result["segments"],
                                                     getattr(model, "classes", None)),
                                           os.path.join(args.out, stem + "_labels.png"))
                picture = pictures.segments_picture(image, result["segmentation"], result["segments"])
                pictures.save_png(picture, base + ".png")
                with open(base + ".json", "w") as handle:
                    json.dump({"image": path, "size": list(image.shape[:2]), "task": args.task,
                               "segments": segments_with_masks(result["segmentation"], result["segments"])},
                              handle, indent=1)
                print(f"{path}: {len(result['segments'])} segments ({args.task}); "
                      f"wrote {base}.png, {base}.json, {labels}")
                for item in result["segments"]:
                    score = "" if item["score"] is None else f"  {item['score']:.3f}"
                    name = item["label"] if item["label"] is not None else f"class {item['label_id']}"
                    print(f"  {item['id']:3d}  {name}{score}")
                sys.stdout.flush()
    except (ValueError, OSError, ImportError) as error:
        print(f"keras-vit segment: error: {error}", file=sys.stderr)
        return 2
    return failures.status(len(args.images))
