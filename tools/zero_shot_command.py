"""The parser of `keras-vit zero-shot` (the work is `keras_vit.cli.zero_shot`).

Imports nothing of keras_vit, as `keras_vit_tools.commands` (see there).

Example:

>>> commands = ArgumentParser().add_subparsers(dest="command")
>>> parser = zero_shot_parser(commands)
>>> args = parser.parse_args(["hf://org/clip", "cat.png", "--classes", "cat", "dog"])
>>> args.model, args.images, args.classes, args.classes_file, args.templates, args.top
('hf://org/clip', ['cat.png'], ['cat', 'dog'], None, None, None)
"""

try:
    from keras_vit_tools.front_end import COUNT, ArgumentParser
except ImportError:  # run from a checkout as a script: tools/ is sys.path[0]
    from front_end import COUNT, ArgumentParser


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
    parser.model_then_images(
        "model", "the image-text checkpoint: a preset folder or hf://org/name (keras_vit.ImageTextModel.from_preset)"
    )
    classes = parser.add_mutually_exclusive_group(required=True)
    classes.add_argument("--classes", nargs="+", help="class names, e.g. cat dog")
    classes.add_argument(
        "--classes-file",
        help="a UTF-8 text file of class names, one per line (blank lines and lines starting with # skipped)",
    )
    parser.add_argument(
        "--templates", nargs="+", default=None,
        help="prompt templates with {} for the class name (default: 'a photo of a {}.'); "
        "'imagenet' for the CLIP paper's 80 ImageNet prompts",
    )
    parser.add_argument("--top", type=COUNT, default=None, help="print the N most probable classes")
    parser.set_defaults(command="zero-shot")
    return parser
