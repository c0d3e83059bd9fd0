"""The work of `keras-vit zero-shot` (parsed in `keras_vit_tools.zero_shot_command`).

`keras-vit zero-shot IMAGE [IMAGE ...] --preset HANDLE --classes NAME
[NAME ...]` loads a two-tower checkpoint (`keras_vit.ImageTextModel`), builds
its zero-shot classifier for the named classes (one prompt, or the CLIP
paper's 80 ImageNet prompts with `--templates imagenet`), and prints each
image's classes ranked, with their probabilities: a softmax over the classes
for CLIP and MetaCLIP 2, a sigmoid per class for SigLIP and SigLIP 2.
"""

import sys

import numpy as np

from keras_vit.image_text import DEFAULT_TEMPLATES, ImageTextModel
from keras_vit.preprocessing import INTERPOLATIONS, center_crop, preprocess_input
from keras_vit.text.templates import IMAGENET_TEMPLATES


def _templates(values):
    if not values:
        return DEFAULT_TEMPLATES
    if list(values) == ["imagenet"]:
        return IMAGENET_TEMPLATES
    return tuple(values)


def load_pixels(path, model):
    """An image file as `model` takes it: its preprocessing record's resize
    and centre crop (`keras_vit.preprocessing.center_crop`), then its
    scaling (`keras_vit.preprocess_input`)."""
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError("Reading images needs Pillow: pip install pillow") from error

    image = np.asarray(Image.open(path).convert("RGB"))
    record = model.preprocessing
    fraction = record.crop_fraction if record is not None else 0.875
    filter = record.interpolation if record is not None and record.interpolation in INTERPOLATIONS else "bicubic"
    return preprocess_input(center_crop(image, model.image_size, fraction, filter), model=model)


def rank(probabilities, class_names, top=None):
    """`[(name, probability), ...]` of one image, most probable first.

    Example:

    >>> rank(np.array([0.1, 0.7, 0.2]), ["cat", "dog", "bird"], top=2)
    [('dog', 0.7), ('bird', 0.2)]
    """
    order = np.argsort(-np.asarray(probabilities), kind="stable")[:top]
    return [(class_names[i], float(probabilities[i])) for i in order]


def zero_shot_command(args):
    """Runs `keras-vit zero-shot`; returns the exit status (2 on unusable input)."""
    try:
        model = ImageTextModel.from_preset(args.preset)
        classifier = model.zero_shot_classifier(args.classes, templates=_templates(args.templates))
        pixels = np.stack([load_pixels(path, classifier) for path in args.images])
    except (ValueError, OSError, ImportError) as error:
        print(f"keras-vit zero-shot: error: {error}", file=sys.stderr)
        return 2
    probabilities = classifier.predict(pixels, verbose=0)
    for path, row in zip(args.images, probabilities):
        print(path)
        for name, probability in rank(row, args.classes, args.top):
            print(f"  {probability:.4f}  {name}")
    return 0
