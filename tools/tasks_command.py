"""The parsers of `keras-vit detect` and `keras-vit masks` (the work is
`keras_vit.cli.tasks`).

Imports nothing of keras_vit, as `keras_vit_tools.commands` (see there).

Example:

>>> commands = ArgumentParser().add_subparsers(dest="command")
>>> detect = detect_parser(commands)
>>> args = detect.parse_args(["hf://org/owlv2", "cats.jpg", "--queries", "a cat", "--out", "found"])
>>> args.model, args.images, args.queries, args.threshold, args.clip_boxes
('hf://org/owlv2', ['cats.jpg'], ['a cat'], 0.1, True)
>>> masks = masks_parser(commands)
>>> args = masks.parse_args(["sam", "cat.jpg", "--points", "120,80", "300,200", "--labels", "1", "0",
...                          "--out", "masks"])
>>> args.model, args.images, args.points, args.labels, args.box
('sam', ['cat.jpg'], [(120.0, 80.0), (300.0, 200.0)], [1, 0], None)
"""

import argparse

try:
    from keras_vit_tools.front_end import COUNT, FRACTION, NON_NEGATIVE, ArgumentParser
except ImportError:  # run from a checkout as a script: tools/ is sys.path[0]
    from front_end import COUNT, FRACTION, NON_NEGATIVE, ArgumentParser


def parse_point(text):
    """`x,y` as a point `(x, y)` of floats (pixels: finite, not negative)."""
    try:
        x, y = (NON_NEGATIVE(v) for v in text.split(","))
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"must be x,y in pixels (numbers >= 0); got {text!r}") from None
    return x, y


def detect_parser(commands):
    """Adds `detect` to the `keras-vit` subcommands; returns its parser."""
    parser = commands.add_parser(
        "detect",
        help="find objects named in words or shown by example images (OWL-ViT, OWLv2)",
        description=(
            "Detects the objects that text queries name (or example images show) with an "
            "open-vocabulary detector (transformers' OWL-ViT or OWLv2), as transformers' "
            "zero-shot-object-detection pipeline: every box whose score passes --threshold. "
            "Writes, per image, the image with its labelled boxes (<image>_detections.png) "
            "and <image>_detections.json (labels, scores, boxes in pixels, cut to the image "
            "unless --no-clip-boxes) to --out."
        ),
    )
    parser.model_then_images("model", "the detector: a preset folder (transformers' OWL-ViT, OWLv2) or hf://org/name")
    parser.add_argument("--queries", nargs="+", default=None, help="what to look for, e.g. 'a cat' 'a remote'")
    parser.add_argument("--query-images", nargs="+", default=None,
                        help="example images of what to look for (one-shot detection)")
    parser.add_argument("--threshold", type=FRACTION, default=0.1, help="the least score kept, in [0, 1] (default 0.1)")
    parser.add_argument("--nms", type=FRACTION, default=None,
                        help="non-maximum suppression at this IoU among each query's boxes (default: none)")
    parser.add_argument("--top-k", type=COUNT, default=None, help="the most detections per image")
    parser.add_argument(
        "--clip-boxes", action=argparse.BooleanOptionalAction, default=True,
        help="cut the boxes to the image, in the JSON and the picture alike (default); --no-clip-boxes "
        "keeps them as the model gives them, which can reach past the image (OWLv2 pads it to a square)",
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.set_defaults(command="detect")
    return parser


def masks_parser(commands):
    """Adds `masks` to the `keras-vit` subcommands; returns its parser."""
    parser = commands.add_parser(
        "masks",
        help="segment what clicks or a box point at, or everything (SAM)",
        description=(
            "Segments images with a Segment Anything model (transformers' SamModel, "
            "keras-hub's SAM): the object that --points (with --labels) and --box point at, "
            "the same prompt in each image, or with --automatic every object (a grid of "
            "clicks, as transformers' mask-generation pipeline). Writes, per image, the "
            "image with every mask and the prompts (<image>_masks.png: clicks green on the "
            "object, red off it; the box) and <image>_masks.json (scores, boxes, masks as "
            "COCO run-length encodings) to --out."
        ),
    )
    parser.model_then_images(
        "model", "the SAM model: a preset folder (transformers' SamModel, keras-hub's SAM) or hf://org/name"
    )
    parser.add_argument("--points", nargs="+", type=parse_point, default=None, help="clicks as x,y pixels (of each image)")
    parser.add_argument("--labels", nargs="+", type=int, choices=(0, 1), default=None,
                        help="1 (on the object) or 0 (off it) per click (default: all 1)")
    parser.add_argument("--box", nargs=4, type=NON_NEGATIVE, default=None, metavar=("X0", "Y0", "X1", "Y1"),
                        help="a box around the object, in pixels")
    parser.add_argument("--single", action="store_true", help="SAM's single mask instead of three")
    parser.add_argument("--automatic", action="store_true", help="every object: automatic mask generation")
    parser.add_argument("--points-per-side", type=COUNT, default=32,
                        help="with --automatic, the grid's clicks per side (default 32)")
    parser.add_argument("--out", required=True, help="output directory")
    parser.set_defaults(command="masks")
    return parser
