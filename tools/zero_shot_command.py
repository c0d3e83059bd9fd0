"""The parser of `keras-vit zero-shot` (the work is `keras_vit.cli.zero_shot`).

Imports nothing of keras_vit, as `keras_vit_tools.commands` (see there).

Example:

>>> import argparse
>>> commands = argparse.ArgumentParser().add_subparsers(dest="command")
>>> parser = zero_shot_parser(commands)
>>> args = parser.parse_args(["cat.png", "--preset", "hf://org/clip", "--classes", "cat", "dog"])
>>> args.images, args.classes, args.templates, args.top
(['cat.png'], ['cat', 'dog'], None, None)
"""


def zero_shot_parser(commands):
    """Adds `zero-shot` to the `keras-vit` subcommands; returns its parser."""
    parser = commands.add_parser(
        "zero-shot",
        help="classify images into classes named in words (CLIP, SigLIP, ...)",
        description=(
            "Ranks class names for each image with a two-tower image-text checkpoint "
            "(transformers' CLIP, MetaCLIP 2, SigLIP or SigLIP 2), printing each class's "
            "probability: a softmax over the classes (CLIP, MetaCLIP 2) or a sigmoid "
            "per class (SigLIP, SigLIP 2)."
        ),
    )
    parser.add_argument("images", nargs="+", help="image files")
    parser.add_argument(
        "--preset", required=True,
        help="the checkpoint: a directory or hf://org/name (keras_vit.ImageTextModel.from_preset)",
    )
    parser.add_argument("--classes", nargs="+", required=True, help="class names, e.g. cat dog")
    parser.add_argument(
        "--templates", nargs="+", default=None,
        help="prompt templates with {} for the class name (default: 'a photo of a {}.'); "
        "'imagenet' for the CLIP paper's 80 ImageNet prompts",
    )
    parser.add_argument("--top", type=int, default=None, help="print the N most probable classes")
    parser.set_defaults(command="zero-shot")
    return parser
