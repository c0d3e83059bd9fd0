"""The work of `keras-vit zero-shot` (parsed in `keras_vit_tools.commands`).

`keras-vit zero-shot MODEL IMAGE [IMAGE ...] --classes NAME [NAME ...]`
loads a two-tower checkpoint (`keras_vit.ImageTextModel`), builds
its zero-shot classifier for the named classes (one prompt, or the CLIP
paper's 80 ImageNet prompts with `--templates imagenet`), and prints each
image's classes ranked, with their probabilities: a softmax over the classes
for CLIP and MetaCLIP 2, a sigmoid per class for SigLIP and SigLIP 2.
"""

import sys

from keras_vit.cli.files import in_chunks
from keras_vit.tasks.classification import classify
from keras_vit.tasks.zero_shot import DEFAULT_TEMPLATES, ImageTextModel
from keras_vit.text.templates import IMAGENET_TEMPLATES


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
    """Runs `keras-vit zero-shot`; returns the exit status (2 on unusable input).

    The images are read, prepared and ranked by `keras_vit.classify`, as
    `keras-vit classify` does for any classifier.
    """
    try:
        model = ImageTextModel.from_preset(args.model)
        classifier = model.zero_shot_classifier(args.classes, templates=prompt_templates(args.templates))
        for chunk in in_chunks(args.images, 32):
            results = classify(classifier, chunk, top=args.top or len(args.classes), verbose=0)
            for path, predictions in zip(chunk, results):
                print(path)
                for prediction in predictions:
                    print(f"  {prediction.probability:.4f}  {prediction.name}")
            sys.stdout.flush()
    except (ValueError, OSError, ImportError) as error:
        print(f"keras-vit zero-shot: error: {error}", file=sys.stderr)
        return 2
    return 0
