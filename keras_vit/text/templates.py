"""Prompt templates for zero-shot classification.

`IMAGENET_TEMPLATES`: the 80 prompts of the CLIP paper's ImageNet
zero-shot classifier (Radford et al. 2021, arXiv:2103.00020, §3.1.4; the
list of OpenAI's `Prompt_Engineering_for_ImageNet` notebook), read from
the package data file `imagenet_templates.txt`, one template a line, `{}`
standing for the class name. A class's embedding is then the mean of its
prompts' (normalised) embeddings, normalised again
(`keras_vit.ImageTextModel.zero_shot_classifier`).
"""

import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def _read_templates(name):
    with open(os.path.join(_HERE, name), encoding="utf-8") as f:
        return tuple(line.rstrip("\n") for line in f if line.strip())


IMAGENET_TEMPLATES = _read_templates("imagenet_templates.txt")


def prompts(class_name, templates):
    """The texts of one class: each template with `{}` replaced by the name.

    Args:
        class_name: str.
        templates: a sequence of strings, each holding `{}` once.

    Returns:
        A list of strings.

    Raises:
        ValueError: for a template without exactly one `{}`.

    Example:

    >>> prompts("cat", ("a photo of a {}.", "art of the {}."))
    ['a photo of a cat.', 'art of the cat.']
    >>> len(IMAGENET_TEMPLATES)
    80
    """
    out = []
    for template in templates:
        if not isinstance(template, str) or template.count("{}") != 1:
            raise ValueError(
                "Each template must be a string holding `{}` once (where the class name goes). "
                f"Received: template={template!r}"
            )
        out.append(template.replace("{}", class_name))
    return out
