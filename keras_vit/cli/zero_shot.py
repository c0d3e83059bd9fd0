"""The work of `keras-vit zero-shot` (parsed in `keras_vit_tools.commands`).

`keras-vit zero-shot MODEL IMAGE [IMAGE ...] --classes NAME [NAME ...]` (or
`--classes-file FILE`, one name a line) loads a two-tower checkpoint (`keras_vit.ImageTextModel`), builds
its zero-shot classifier for the named classes (one prompt, or the CLIP
paper's 80 ImageNet prompts with `--templates imagenet`), and prints each
image's classes ranked, with their probabilities: a softmax over the classes
for CLIP and MetaCLIP 2, a sigmoid per class for SigLIP and SigLIP 2. An
image that cannot be read is named and passed over; the command exits with
status 1 (`keras_vit.cli.files.Failures`).
"""

import contextlib
import os
import sys

from keras_vit.cli.files import Failures, readable_chunks
from keras_vit.tasks.classification import classify
from keras_vit.tasks.zero_shot import DEFAULT_TEMPLATES, ImageTextModel
from keras_vit.text.templates import IMAGENET_TEMPLATES


def class_names_file(path):
    """The class names of a text file: one per line, stripped; blank lines
    and lines starting with "#" skipped.

    Example:

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "classes.txt")
    >>> _ = open(path, "w").write(os.linesep.join(["# pets", "cat", "", "  golden retriever "]))
    >>> class_names_file(path)
    ['cat', 'golden retriever']
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No class names file at --classes-file {path!r} "
                                f"(resolved to {os.path.abspath(path)!r}).")
    try:
        with open(path, encoding="utf-8-sig") as handle:
            lines = [line.strip() for line in handle]
    except UnicodeDecodeError as error:
        raise ValueError(f"--classes-file {path!r} is not UTF-8 text ({error.reason} at byte {error.start}).")
    names = [line for line in lines if line and not line.startswith("#")]
    if not names:
        raise ValueError(f"--classes-file {path!r} names no class: give one class name per line.")
    return names


def prompt_templates(values):
    """The prompts `--templates` names: the default one, the CLIP paper's 80
    ImageNet prompts ("imagenet"), or the given ones.

    Example:

    >>> prompt_templates(None), len(prompt_templates(["imagenet"]))
    (('a photo of a {}.',), 80)
    >>> prompt_templates(["a {} in the wild."])
    ('a {} in the wild.',)
    """
    if not values:
        return DEFAULT_TEMPLATES
    if list(values) == ["imagenet"]:
        return IMAGENET_TEMPLATES
    return tuple(values)


def zero_shot_command(args):
    """Runs `keras-vit zero-shot`; returns the exit status (1 when some
    images could not be read, 2 on unusable input).

    The images are read, prepared and ranked by `keras_vit.classify`, as
    `keras-vit classify` does for any classifier.
    """
    failures = Failures("zero-shot")
    try:
        classes = args.classes or class_names_file(args.classes_file)
        model = ImageTextModel.from_preset(args.model)
        # The prompts' progress bar (many classes, --templates imagenet) goes
        # to the terminal's error stream: standard output holds the results.
        with contextlib.redirect_stdout(sys.stderr):
            classifier = model.zero_shot_classifier(classes, templates=prompt_templates(args.templates))
        for chunk in readable_chunks(args.images, 32, failures):
            results = classify(classifier, [image for _, _, image in chunk], top=args.top or len(classes), verbose=0)
            for (path, _, _), predictions in zip(chunk, results):
                print(path)
                for prediction in predictions:
                    print(f"  {prediction.probability:.4f}  {prediction.name}")
            sys.stdout.flush()
    except (ValueError, OSError, ImportError) as error:
        print(f"keras-vit zero-shot: error: {error}", file=sys.stderr)
        return 2
    return failures.status(len(args.images))
