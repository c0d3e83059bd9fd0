"""The table of published ViT checkpoints: one `WeightsRecord` per file.

Every difference between checkpoints (resolution, classes, pre-logits layer,
input range, GELU flavour, licence, expected parameter count) is a field of a
record, so loaders and models read the table instead of branching on names.
Records are keyed by `(architecture, name)`, with architecture strings as in
`keras_vit.architectures.ARCHITECTURE_CONFIGS` ("B/16", "R50+B/16", ...).

Weights names:

- "imagenet21k": ImageNet-21k pre-training of the ViT paper (with pre-logits).
- "imagenet21k+imagenet2012": the same, fine-tuned on ImageNet-1k at 384 px;
  "imagenet21k+imagenet2012-224": fine-tuned at 224 px.
- "augreg-i21k": the recommended ImageNet-21k checkpoint of "How to train your
  ViT?" (AugReg); "augreg-i21k+imagenet2012" (384 px) and
  "augreg-i21k+imagenet2012-224" (224 px): its ImageNet-1k fine-tunes.
- "sam-imagenet2012": trained on ImageNet-1k with the SAM optimizer.

A "-224" suffix always means a 224 px fine-tune; the other fine-tunes are at
384 px.
"""

from urllib.parse import quote

from keras_vit.architectures import ARCHITECTURE_CONFIGS

# PREPROCESSING_MODES and CLASSIFIERS are public here too.
from keras_vit.weights.record import CLASSIFIERS, PREPROCESSING_MODES, WeightsRecord  # noqa: F401

_GCS = "https://storage.googleapis.com/vit_models/"
_VIT_KERAS = "https://github.com/faustomorales/vit-keras/releases/download/dl/"

# No checksum is published for any GCS file (docs/checkpoints.md §1), so
# every record below has sha256=None: downloads are checked against the size
# the server reports, and the loader checks every tensor's shape.
_GOOGLE = dict(
    preprocessing_mode="inception",
    gelu_approximate=True,
    license="Apache-2.0",
    sha256=None,
    classifier="token",
)


def _official(architecture):
    # The official file spelling: "B/16" -> "ViT-B_16", "R50+B/16" ->
    # "R50+ViT-B_16".
    resnet, plus, vit = architecture.rpartition("+")
    return f"{resnet}{plus}ViT-{vit.replace('/', '_')}"


# Original ViT paper files (arXiv:2010.11929), docs/checkpoints.md §1.
# The GCS folder is the weights name without "-224"; the "-224" files carry
# that suffix too.
# (architecture, weights name, image_size, classes, representation_size,
#  params)
_ORIGINAL = (
    ("B/16", "imagenet21k", 224, 21843, 768, 103_186_515),
    ("B/32", "imagenet21k", 224, 21843, 768, 104_843_091),
    ("B/8", "imagenet21k", 224, 21843, 768, 103_195_731),
    ("L/16", "imagenet21k", 224, 21843, 1024, 326_740_307),
    ("L/32", "imagenet21k", 224, 21843, 1024, 328_949_075),
    ("H/14", "imagenet21k", 224, 21843, 1280, 660_385_363),
    ("R50+B/16", "imagenet21k", 224, 21843, 768, 115_277_971),
    ("R26+B/32", "imagenet21k", 224, 21843, 768, 118_002_835),
    ("R50+L/32", "imagenet21k", 224, 21843, 1024, 351_408_531),
    ("B/16", "imagenet21k+imagenet2012", 384, 1000, None, 86_859_496),
    ("B/32", "imagenet21k+imagenet2012", 384, 1000, None, 88_297_192),
    ("B/8", "imagenet21k+imagenet2012", 384, 1000, None, 87_744_232),
    ("L/16", "imagenet21k+imagenet2012", 384, 1000, None, 304_715_752),
    ("L/32", "imagenet21k+imagenet2012", 384, 1000, None, 306_632_680),
    ("R50+B/16", "imagenet21k+imagenet2012", 384, 1000, None, 98_950_952),
    ("B/16", "imagenet21k+imagenet2012-224", 224, 1000, None, 86_567_656),
    ("L/16", "imagenet21k+imagenet2012-224", 224, 1000, None, 304_326_632),
)
# vit-keras re-hosts these as `<official>_<name>.npz`.
_VIT_KERAS_FILES = {
    (arch, name)
    for arch in ("B/16", "B/32", "L/16", "L/32")
    for name in ("imagenet21k", "imagenet21k+imagenet2012")
}

# AugReg ("How to train your ViT?", arXiv:2106.10270), docs/checkpoints.md §1:
# the README's recommended ImageNet-21k checkpoint per architecture; the
# file names spell the model as `name.replace("+", "_")`.
# (architecture, upstream file stem, params with the 21843-way head)
_AUGREG_I21K = (
    ("Ti/16", "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", 9_740_115),
    ("S/16", "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", 30_075_219),
    ("S/32", "S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0", 30_903_507),
    ("B/16", "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", 102_595_923),
    ("B/32", "B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", 104_252_499),
    ("L/16", "L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0", 325_690_707),
    ("B/8", "B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0", 102_605_139),
    ("R50+L/32", "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1", 350_358_931),
    ("R26+S/32", "R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", 44_456_467),
    ("R+Ti/16", "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", 10_360_403),
)
# ImageNet-1k fine-tunes of the upstream files above.
# (architecture, image_size, fine-tune learning rate, params, ImageNet top-1)
_AUGREG_I1K = (
    ("Ti/16", 384, "0.03", 5_790_376, "78.22%"),
    ("S/16", 384, "0.03", 22_196_584, "83.73%"),
    ("S/32", 384, "0.01", 22_915_432, "79.58%"),
    ("B/16", 384, "0.03", 86_859_496, "85.49%"),
    ("B/32", 384, "0.01", 88_297_192, "83.59%"),
    ("L/16", 384, "0.01", 304_715_752, "85.59%"),
    ("R50+L/32", 384, "0.01", 329_092_136, "85.99%"),
    ("R26+S/32", 384, "0.01", 36_468_392, "83.85%"),
    ("R+Ti/16", 384, "0.03", 6_355_944, "75.40%"),
    # B/8 was released with 224 px adaptations only.
    ("B/8", 224, "0.03", 86_576_872, None),
    # 224 px fine-tunes of the same upstream files, as used by timm's
    # `vit_{tiny,small,base}_patch16_224.augreg_in21k_ft_in1k`. (timm's 224 px
    # S/32, B/32 and L/16 start from other upstream files, so they are not
    # listed under these names.)
    ("Ti/16", 224, "0.03", 5_717_416, None),
    ("S/16", 224, "0.03", 22_050_664, None),
    ("B/16", 224, "0.01", 86_567_656, None),
)

# SAM-trained ImageNet-1k models (arXiv:2106.01548), docs/checkpoints.md §1.
# sam/ViT-S_16.npz is left out: it is 3x the size of the S/16 parameters, so
# it holds more than the weights and its key layout is unknown.
# (architecture, params)
_SAM = (
    ("B/16", 86_567_656),
    ("B/32", 88_224_232),
    ("L/16", 304_326_632),
    ("L/32", 306_535_400),
)

# What each family is; the "-224" names share the text of their family.
_ABOUT = {
    "imagenet21k": (
        "pre-trained on ImageNet-21k at {size} px (arXiv:2010.11929). The "
        "file has the Dense+tanh pre-logits layer, but its 21843-way head is "
        "zeroed in the original release: it is not a usable classifier, use "
        "the model for features or fine-tuning."
    ),
    "imagenet21k+imagenet2012": (
        "pre-trained on ImageNet-21k, fine-tuned on ImageNet-1k at {size} px "
        "(arXiv:2010.11929). No pre-logits layer."
    ),
    "augreg-i21k": (
        "pre-trained on ImageNet-21k with AugReg (arXiv:2106.10270), the "
        "recommended checkpoint (best upstream validation). Valid 21843-way "
        "head, no pre-logits layer."
    ),
    "augreg-i21k+imagenet2012": (
        "AugReg ImageNet-21k checkpoint fine-tuned on ImageNet-1k at {size} "
        "px (arXiv:2106.10270)."
    ),
    "sam-imagenet2012": (
        "trained from scratch on ImageNet-1k at {size} px with the SAM "
        "optimizer (arXiv:2106.01548). No pre-logits layer."
    ),
}
# Facts about single files.
_NOTES = {
    ("H/14", "imagenet21k"): (
        "The README dropped H/14 in 2021: it does worse than B/16 and L/16 "
        "on ImageNet-21k."
    ),
    ("B/8", "imagenet21k+imagenet2012"): (
        "The 384 px resolution is inferred from the file size."
    ),
    ("B/16", "imagenet21k+imagenet2012-224"): "Expected top-1: 81.2%.",
    ("L/16", "imagenet21k+imagenet2012-224"): "Expected top-1: 82.7%.",
}


def _make(arch, name, urls, file_name, size, classes, width, params, note=None):
    about = _ABOUT[name.removesuffix("-224")].format(size=size)
    note = note or _NOTES.get((arch, name))
    return WeightsRecord(
        name=name, architecture=arch, urls=urls, file_name=file_name, image_size=size,
        classes=classes, representation_size=width, params=params,
        description=f"ViT-{arch} {about}" + (f" {note}" if note else ""), **_GOOGLE,
    )


def _records():
    for arch, name, size, classes, width, params in _ORIGINAL:
        folder, dash, suffix = name.partition("-")
        official = _official(arch) + dash + suffix
        # quote() writes "+" as %2B: literal in a URL path by the standard,
        # but some HTTP stacks still decode a bare "+" as a space.
        urls = (f"{_GCS}{quote(folder)}/{quote(official)}.npz",)
        if (arch, name) in _VIT_KERAS_FILES:
            urls += (f"{_VIT_KERAS}{official}_{name}.npz",)
        file_name = f"{official}_{folder}.npz"
        yield _make(arch, name, urls, file_name, size, classes, width, params)
    upstream = {}
    for arch, stem, params in _AUGREG_I21K:
        upstream[arch] = stem
        urls = (f"{_GCS}augreg/{stem}.npz",)
        name = "augreg-i21k"
        yield _make(arch, name, urls, f"{stem}.npz", 224, 21843, None, params)
    for arch, size, lr, params, top1 in _AUGREG_I1K:
        stem = f"{upstream[arch]}--imagenet2012-steps_20k-lr_{lr}-res_{size}"
        name = "augreg-i21k+imagenet2012" + ("-224" if size == 224 else "")
        note = f"ImageNet top-1 {top1}." if top1 else None
        urls = (f"{_GCS}augreg/{stem}.npz",)
        yield _make(arch, name, urls, f"{stem}.npz", size, 1000, None, params, note)
    for arch, params in _SAM:
        urls = (f"{_GCS}sam/{_official(arch)}.npz",)
        file_name = f"{_official(arch)}_sam.npz"
        yield _make(
            arch, "sam-imagenet2012", urls, file_name, 224, 1000, None, params
        )


WEIGHTS = {}


def register(record):
    """Adds a record to `WEIGHTS`.

    Args:
        record: a `WeightsRecord` whose key and `file_name` are not taken.

    Returns:
        The record.

    Raises:
        ValueError: on a duplicate key or cache file name.
    """
    if not isinstance(record, WeightsRecord):
        raise ValueError(
            "`record` must be a WeightsRecord. "
            f"Received: record={type(record).__name__}"
        )
    if record.key in WEIGHTS:
        raise ValueError(f"Weights {record.key} are already registered.")
    taken = {r.file_name: r.key for r in WEIGHTS.values()}
    if record.file_name in taken:
        raise ValueError(
            f"Cache file name {record.file_name!r} of {record.key} is already "
            f"used by {taken[record.file_name]}."
        )
    WEIGHTS[record.key] = record
    return record


for _record in _records():
    register(_record)
del _record


class UnknownWeightsError(KeyError, ValueError):
    """No record for an `(architecture, name)` pair.

    A `KeyError` and a `ValueError`, so either catches it.
    """

    def __str__(self):
        return str(self.args[0]) if self.args else ""


def weights_names(architecture):
    """Registered weights names for an architecture such as "B/16".

    Args:
        architecture: architecture string.

    Returns:
        Sorted list of names; empty for an architecture without weights.
    """
    return sorted(name for arch, name in WEIGHTS if arch == architecture)


def list_records(architecture=None):
    """All records, or those of one architecture, in table order.

    Args:
        architecture: None (default, all records) or an architecture string.

    Returns:
        List of `WeightsRecord`.
    """
    return [
        r for r in WEIGHTS.values()
        if architecture is None or r.architecture == architecture
    ]


def get_record(architecture, name):
    """The record of the weights `name` for `architecture`.

    Args:
        architecture: architecture string, e.g. "B/16".
        name: weights name, e.g. "imagenet21k+imagenet2012".

    Returns:
        A `WeightsRecord`.

    Raises:
        UnknownWeightsError: (a `KeyError` and `ValueError`) when there is no
            such record; the message lists the names registered for the
            architecture and the known architectures.

    Example:

    >>> get_record("B/16", "imagenet21k").classes
    21843
    """
    record = WEIGHTS.get((architecture, name))
    if record is not None:
        return record
    known = list(ARCHITECTURE_CONFIGS)
    if architecture in known:
        names = weights_names(architecture)
        available = ", ".join(repr(n) for n in names) if names else "none"
        message = (
            f"No weights named {name!r} for architecture {architecture!r}. "
            f"Available for {architecture!r}: {available}."
        )
    else:
        message = f"Unknown architecture {architecture!r}."
    message += " Architectures: " + ", ".join(repr(a) for a in known) + "."
    raise UnknownWeightsError(message)


def markdown_table():
    """The weights table as Markdown, one row per record, for the README.

    Returns:
        A string: a Markdown table sorted by architecture.
    """
    order = {a: i for i, a in enumerate(list(ARCHITECTURE_CONFIGS))}
    records = sorted(
        WEIGHTS.values(), key=lambda r: order.get(r.architecture, len(order))
    )
    lines = [
        "| Architecture | `weights=` | Resolution | Classes | Pre-logits "
        "| Parameters | Input | File |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in records:
        input_range = "[-1, 1]" if r.preprocessing_mode == "inception" else "mean/std"
        lines.append(
            f"| {r.architecture} | `{r.name}` | {r.image_size} | {r.classes} "
            f"| {r.representation_size or '-'} | {r.params:,} | {input_range} "
            f"| [npz]({r.urls[0]}) |"
        )
    return "\n".join(lines) + "\n"
