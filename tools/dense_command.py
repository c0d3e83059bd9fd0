"""The parsers of `keras-vit depth` and `keras-vit segment` (the work is `keras_vit.cli.dense`).

Imports nothing of keras_vit, as `keras_vit_tools.commands` (see there).

Example:

>>> commands = ArgumentParser().add_subparsers(dest="command")
>>> parser = dense_parsers(commands)[1]
>>> args = parser.parse_args(["hf://org/eomt", "street.jpg", "--task", "panoptic", "--out", "pictures"])
>>> args.model, args.images, args.task, args.threshold
('hf://org/eomt', ['street.jpg'], 'panoptic', None)
"""

try:
    from keras_vit_tools.front_end import FRACTION, ArgumentParser
except ImportError:  # run from a checkout as a script: tools/ is sys.path[0]
    from front_end import FRACTION, ArgumentParser

SEGMENTATION_TASKS = ("semantic", "panoptic", "instance")  # keras_vit.tasks.segmentation_outputs.SUBTASKS
DENSE_MODEL_HELP = (
    "a depth or segmentation checkpoint: a preset folder (transformers' Depth Anything, DPT, CHMv2, EoMT; "
    "keras-hub's Depth Anything; keras_vit's) or an hf://org/name handle"
)


def dense_parsers(commands):
    """Adds `depth` and `segment` to the `keras-vit` subcommands; returns their parsers."""
    depth = commands.add_parser(
        "depth",
        help="a depth map of each image, as a coloured PNG",
        description=(
            "Estimates depth (keras_vit.estimate_depth): each image is prepared as the checkpoint's "
            "processor does and its depth map, at the image's size, is written as a coloured PNG and a "
            ".npy array of the depths."
        ),
    )
    depth.model_then_images("model", DENSE_MODEL_HELP)
    depth.add_argument("--out", required=True, help="output directory")
    depth.set_defaults(command="depth")
    segment = commands.add_parser(
        "segment",
        help="segments of each image over the photo, with a legend",
        description=(
            "Segments images (keras_vit.segment): semantic (a class per pixel), panoptic or instance "
            "segments, drawn over the photo with a legend of their classes and scores "
            "(<image>_segments.png), with a JSON of the segments, each with its pixels as a COCO "
            "run-length encoding (<image>_segments.json), and a label map (<image>_labels.png: the "
            "class of every pixel, 255 where no segment is, as a segmentation folder's masks)."
        ),
    )
    segment.model_then_images("model", DENSE_MODEL_HELP)
    segment.add_argument("--task", choices=SEGMENTATION_TASKS, default="semantic", help="default: semantic")
    segment.add_argument(
        "--threshold", type=FRACTION, default=None,
        help="smallest score of a panoptic or instance segment, in [0, 1] (default 0.9, the pipeline's)",
    )
    segment.add_argument("--out", required=True, help="output directory")
    segment.set_defaults(command="segment")
    return depth, segment
