"""ImageNet class lists shipped with keras_vit, readable offline.

Files (package data):

- `imagenet1k_synsets.txt`: the 1,000 ImageNet-1k (ILSVRC-2012) synsets in
  the order of the 1000-way heads.
- `imagenet21k_synsets.txt.gz`: the 21,843 ImageNet-21k synsets in the order
  of the Google 21843-way heads (list published with timm, Apache-2.0).
- `synset_lemmas.txt.gz`: `synset<TAB>lemma, lemma, ...` (WordNet lemmas)
  for every synset of both lists.
"""

import functools
import gzip
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_SYNSET_FILES = {
    1000: "imagenet1k_synsets.txt",
    21843: "imagenet21k_synsets.txt.gz",
}
NUM_CLASSES = tuple(_SYNSET_FILES)
# Named class lists, as a model's `class_names` may refer to them.
LISTS = {"imagenet1k": 1000, "imagenet21k": 21843}


def list_name(classes):
    """The name in `LISTS` of the ImageNet list of a head of `classes` classes.

    Example:

    >>> list_name(21843)
    'imagenet21k'
    """
    _check_classes(classes)
    return {size: name for name, size in LISTS.items()}[classes]


def _read_lines(file_name):
    path = os.path.join(_HERE, file_name)
    opener = gzip.open if file_name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def _check_classes(classes):
    if classes not in _SYNSET_FILES:
        raise ValueError(
            f"`classes` must be one of {NUM_CLASSES} (ImageNet-1k or the "
            f"ImageNet-21k heads). Received: classes={classes!r}"
        )


@functools.lru_cache(maxsize=None)
def synsets(classes):
    """WordNet ids of the classes of an ImageNet head, in head order.

    Args:
        classes: 1000 (ImageNet-1k) or 21843 (ImageNet-21k).

    Returns:
        Tuple of strings such as "n01440764".

    Example:

    >>> synsets(1000)[0]
    'n01440764'
    """
    _check_classes(classes)
    return tuple(_read_lines(_SYNSET_FILES[classes]))


@functools.lru_cache(maxsize=None)
def lemmas():
    """All lemmas of every synset: a dict `synset -> "lemma, lemma, ..."`."""
    return dict(line.split("\t", 1) for line in _read_lines("synset_lemmas.txt.gz"))


@functools.lru_cache(maxsize=None)
def class_names(classes):
    """Short class names in head order: the first lemma, spaces as `_`.

    This is the naming of `keras.applications` `decode_predictions`
    (e.g. "tabby", "great_white_shark").

    Args:
        classes: 1000 (ImageNet-1k) or 21843 (ImageNet-21k).

    Returns:
        Tuple of strings.

    Example:

    >>> class_names(1000)[281]
    'tabby'
    """
    table = lemmas()
    return tuple(
        table[s].split(",")[0].strip().replace(" ", "_") for s in synsets(classes)
    )
