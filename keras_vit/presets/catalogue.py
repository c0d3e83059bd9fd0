"""Every checkpoint keras_vit loads, by name: the catalogue.

`keras_vit.from_preset(name)`, `keras_vit.load_model(name)`,
`keras_vit.ImageTextModel.from_preset(name)` and every `keras-vit` command
take any name of `PRESETS` in place of a folder or handle: the name stands
for its handle, which is then downloaded and read as any other. The names
are those each source library gives its checkpoints:

| source | names | e.g. | handle |
| --- | --- | --- | --- |
| timm | `architecture.tag` (`timm.list_pretrained()`) | `vit_base_patch16_224.augreg2_in21k_ft_in1k` | `hf://timm/...` |
| transformers | the Hub repository (`from_pretrained`'s) | `facebook/dinov2-small` | `hf://facebook/dinov2-small` |
| keras-hub | the preset's name (`from_preset`'s) | `sam_base_sa1b` | `kaggle://keras/sam/keras/sam_base_sa1b/5` |
| keras_vit | the short names of `keras_vit.presets.named` | `dinov3_vits16` | its checkpoint's |

A name is looked up as written, then regardless of case (Hub repositories
are). A folder of the same name in the working directory wins over a name.

The rows are generated (`keras_vit.presets.catalogue_data`, written by
`tools/preset_catalogue.py` from the installed timm, transformers and
keras-hub, which keras_vit does not need at run time): each has the name,
the handle, the source, the family, the task, the parameter count, the image
size, the licence its model card declares (None: none declared) and the
card's address. A keras-hub preset whose name a short name already holds is
listed as `keras_hub_<name>`.

Example:

>>> row = get_preset("vit_base_patch16_224.augreg2_in21k_ft_in1k")
>>> row.handle, row.task, row.resolution
('hf://timm/vit_base_patch16_224.augreg2_in21k_ft_in1k', 'classification', (224, 224))
>>> list_presets("facebook/sam-*")
['facebook/sam-vit-base', 'facebook/sam-vit-large', 'facebook/sam-vit-huge']
"""

import difflib
import fnmatch
from typing import NamedTuple, Optional

from keras_vit.presets import catalogue_data
from keras_vit.presets.named import NAMED_PRESETS
from keras_vit.validation import check_choice

# What a checkpoint does, as keras_vit builds it: a classifier (logits over
# named classes), an image encoder (features), both towers of an image-text
# model (`ImageTextModel`, zero-shot), and the task models of
# `keras_vit.tasks` (depth, segmentation, open-vocabulary detection, SAM's
# promptable masks).
TASKS = ("classification", "features", "zero-shot", "depth", "segmentation", "detection", "promptable-masks")
# The libraries whose names the catalogue holds, and keras_vit's own short names.
SOURCES = ("keras_vit", "transformers", "keras_hub", "timm")
# Handles `from_preset` downloads; any other (a file outside the Hub) is listed, not loaded.
DOWNLOADABLE = ("hf://", "kaggle://")


class Preset(NamedTuple):
    """One checkpoint of the catalogue.

    Attributes:
        name: the name `from_preset` takes.
        handle: what it stands for: `"hf://org/name"`,
            `"kaggle://owner/model/framework/variation/version"`, or (a few
            timm tags published outside the Hub) the file's URL.
        source: the library that names it (`SOURCES`).
        family: the model family ("dinov2", "siglip2", "eomt", ...).
        task: what it does (`TASKS`).
        parameters: its parameter count, as its source library builds it.
        resolution: `(height, width)` of the images it was made for, or
            None (no fixed size, or not recorded).
        licence: the licence its model card declares ("apache-2.0", ...),
            or None when the card declares none.
        card: the model card's address.
        gated: whether the Hub asks to accept the licence before download.
        architecture: the timm architecture to build where it is not the one
            the repository's `config.json` names (None: that one).
        alias_of: for a short name, the catalogue name it stands for.
    """

    name: str
    handle: str
    source: str
    family: str
    task: str
    parameters: int
    resolution: Optional[tuple]
    licence: Optional[str]
    card: str
    gated: bool = False
    architecture: Optional[str] = None
    alias_of: Optional[str] = None

    @property
    def downloadable(self):
        """Whether `from_preset` can fetch the handle (`hf://` or `kaggle://`)."""
        return self.handle.startswith(DOWNLOADABLE)

    @property
    def repo_id(self):
        """The Hub repository ("org/name") of an `hf://` handle, else None."""
        return self.handle[len("hf://"):].split("@")[0] if self.handle.startswith("hf://") else None


def _presets():
    rows = {row[0]: Preset(*row) for row in catalogue_data.PRESETS}
    by_handle = {}
    for row in rows.values():
        by_handle.setdefault(row.handle, row)
    # The short names first, each the row of its handle under its own name.
    aliases = {}
    for name, short in NAMED_PRESETS.items():
        target = by_handle[short.handle]
        aliases[name] = target._replace(name=name, source="keras_vit", alias_of=target.name)
    return {**aliases, **rows}


# `{name: Preset}`: the short names, then transformers', keras-hub's and timm's.
PRESETS = _presets()
# The families of the rows, sorted.
FAMILIES = tuple(sorted({row.family for row in PRESETS.values()}))
_LOWER = {name.lower(): name for name in PRESETS}


def find_preset(name):
    """The `Preset` of `name` (as written, else regardless of case), or None.

    Example:

    >>> find_preset("Facebook/DINOv2-Small").name
    'facebook/dinov2-small'
    >>> find_preset("no-such-model") is None
    True
    """
    if not isinstance(name, str):
        return None
    row = PRESETS.get(name)
    if row is None and name.lower() in _LOWER:
        row = PRESETS[_LOWER[name.lower()]]
    return row


def closest_names(text, n=3):
    """The names nearest to `text` (spelling, regardless of case), best first.

    Example:

    >>> closest_names("dinov3_vit16")[0]
    'dinov3_vits16'
    """
    matches = difflib.get_close_matches(str(text).lower(), list(_LOWER), n=n, cutoff=0.6)
    return [_LOWER[m] for m in matches]


def unknown_name_hint(text):
    """The sentence an error for an unknown `text` ends with: the closest
    names, and where the names are listed."""
    close = closest_names(text)
    hint = f" Closest names: {', '.join(close)}." if close else ""
    return f"{hint} keras_vit.list_presets() (keras-vit presets) lists the names."


def get_preset(name):
    """The `Preset` of a name `from_preset` takes.

    Args:
        name: a name of `list_presets()`.

    Returns:
        Its `Preset`: handle, source, family, task, parameters, resolution,
        licence and card.

    Raises:
        ValueError: for an unknown name, naming it and the closest names.

    Example:

    >>> row = get_preset("facebook/sam-vit-base")
    >>> row.handle, row.task, row.licence
    ('hf://facebook/sam-vit-base', 'promptable-masks', 'apache-2.0')
    """
    row = find_preset(name)
    if row is None:
        raise ValueError(f"Unknown preset name {name!r}.{unknown_name_hint(name)}")
    return row


def _patterns(pattern):
    if pattern is None:
        return None
    patterns = [pattern] if isinstance(pattern, str) else list(pattern) if isinstance(pattern, (list, tuple)) else []
    if not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise ValueError(f"`pattern` must be None, a pattern or a list of patterns. Received: pattern={pattern!r}")
    # A pattern without wildcards matches the names that contain it.
    return [p.lower() if any(c in p for c in "*?[") else f"*{p.lower()}*" for p in patterns]


def list_presets(pattern=None, task=None, family=None):
    """The names `keras_vit.from_preset` takes: every checkpoint keras_vit loads.

    Args:
        pattern: None (default: every name), a shell-style pattern
            ("vit_base_*.augreg*", "facebook/*") or a list of them, matched
            regardless of case; a pattern without wildcards matches the
            names that contain it ("dinov3").
        task: None (default) or one of `TASKS`: "classification",
            "features", "zero-shot", "depth", "segmentation", "detection",
            "promptable-masks".
        family: None (default) or one of `FAMILIES` ("dinov2", "siglip2",
            "depth_anything", "eomt", ...).

    Returns:
        A list of names: keras_vit's short names first, then transformers',
        keras-hub's and timm's. `get_preset(name)` gives each one's handle,
        parameters, resolution, licence and card.

    Raises:
        ValueError: for a `task` or `family` outside the allowed values
            (named), or a `pattern` that is not a string or list of strings.

    Example:

    >>> import keras_vit
    >>> keras_vit.list_presets("dinov3_vit?16")
    ['dinov3_vits16', 'dinov3_vitb16', 'dinov3_vitl16']
    >>> keras_vit.list_presets(task="detection", family="owlvit")
    ['google/owlvit-base-patch32', 'google/owlvit-base-patch16', 'google/owlvit-large-patch14']
    """
    if task is not None:
        check_choice(task, TASKS, "task")
    if family is not None:
        check_choice(family, FAMILIES, "family")
    patterns = _patterns(pattern)
    return [
        name for name, row in PRESETS.items()
        if task in (None, row.task) and family in (None, row.family)
        and (patterns is None or any(fnmatch.fnmatchcase(name.lower(), p) for p in patterns))
    ]


def counts():
    """`{source: number of names}` of the catalogue, and its total.

    Example:

    >>> counts()["keras_vit"]
    11
    """
    out = {source: sum(row.source == source for row in PRESETS.values()) for source in SOURCES}
    out["total"] = len(PRESETS)
    return out


__all__ = ["DOWNLOADABLE", "FAMILIES", "PRESETS", "SOURCES", "TASKS", "Preset", "closest_names", "counts",
           "find_preset", "get_preset", "list_presets", "unknown_name_hint"]
