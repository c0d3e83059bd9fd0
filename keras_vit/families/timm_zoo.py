"""timm's ViT zoo in keras_vit: which architectures build, from which
reader, in which family, and the names that do not build, with why.

The architectures are timm's (`keras_vit.weights.formats.timm_architectures`, the
table `tools/timm_table.py` writes from timm's model functions). A timm Hub
directory (`config.json` + `model.safetensors`, local or `hf://timm/...`)
is read by the module of its model class (`READERS`): `VisionTransformer`
(and DeiT's distilled one) by `keras_vit.weights.formats.timm`, `Eva` by
`keras_vit.families.eva`, the relative-position ViTs by `keras_vit.families.vit_relpos`,
the hybrids (a `HybridEmbed` patch embedding on a ResNet or a convolution stem) by
`keras_vit.families.vit_hybrid`, SAM's image encoder (`VisionTransformerSAM`)
by `keras_vit.families.sam`. `NOT_BUILT` is the one list of the names
that do not build, each with its reason, which the error for them gives.

Example:

>>> "vit_base_patch16_dinov3" in list_models("vit_*dinov3*")
True
>>> list_models("deit3_small*", pretrained=True)[:2]
['deit3_small_patch16_224.fb_in1k', 'deit3_small_patch16_224.fb_in22k_ft_in1k']
>>> model_info("deit3_small_patch16_224").family
'DeiT III'
"""

import fnmatch
import functools
import os
import types
from typing import NamedTuple

from keras_vit.families import eva, sam, vit_hybrid, vit_relpos
from keras_vit.weights.files import read_json
from keras_vit.weights.formats import timm
from keras_vit.weights.formats.timm_architectures import ARCHITECTURES, TIMM_VERSION

# The names keras_vit does not build (timm's patterns), each with its
# status and reason: `{pattern: ("pending" or "refused", reason)}`;
# "pending" ones are being built elsewhere in keras_vit. None at present:
# every architecture that does not build is refused by its reader, naming
# the arguments keras_vit has no equivalent of.
NOT_BUILT = {}
# Families, first match wins: (family, timm name patterns).
FAMILIES = (
    ("AIMv2", ("aimv2_*",)),
    ("DeiT III", ("deit3_*",)),
    ("DeiT", ("deit_*",)),
    ("EVA02", ("eva02_*",)),
    ("EVA", ("eva_*",)),
    ("FlexiViT", ("flexivit_*",)),
    ("SAM", ("samvit_*",)),
    ("DINOv3", ("vit_*_dinov3*",)),
    ("DINOv2", ("vit_*_dinov2",)),
    ("Perception Encoder", ("vit_pe_*",)),
    ("SigLIP", ("vit_*_siglip_*",)),
    ("CLIP", ("vit_*_clip_*",)),
    ("RADIO", ("vit_*_radio_v*",)),
    ("TIPSv2", ("vit_*_tipsv2",)),
    ("Sapiens2", ("vit_*_sapiens2",)),
    ("LingBot-Vision", ("vit_*_lingbot",)),
    ("InternViT", ("vit_intern*",)),
    ("MobileCLIP", ("vit_*_mci_*",)),
    ("Relative-position ViT", ("vit_relpos_*", "vit_srelpos_*")),
    ("RoPE-ViT", ("vit_*_rope_*",)),
    ("Hybrid ViT", ("vit_*_r50_*", "vit_*_r26_*", "vit_*_r_s16_*", "vit_*_resnet*")),
    ("ViT", ("vit_*",)),
)
# timm's model class -> the module reading its Hub directories.
READERS = {"VisionTransformer": timm, "VisionTransformerDistilled": timm, "Eva": eva,
           "VisionTransformerRelPos": vit_relpos,
           # SAM's image encoder (`samvit_*`): the SAM family's timm reader.
           "VisionTransformerSAM": types.SimpleNamespace(model_arguments=sam.timm_arguments,
                                                         preset_source=sam.timm_preset_source)}


class ModelInfo(NamedTuple):
    """One timm architecture as keras_vit sees it.

    Attributes:
        name: timm's name.
        family: keras_vit's family name (`FAMILIES`).
        timm_class: timm's model class.
        tags: the pretrained tags (`name.tag` loads from `hf://timm/name.tag`).
        builds: whether keras_vit builds it.
        reason: why not (None when it builds).
    """

    name: str
    family: str
    timm_class: str
    tags: tuple
    builds: bool
    reason: object


def family_of(name):
    """keras_vit's family of a timm architecture name (`FAMILIES`)."""
    return next(f for f, patterns in FAMILIES if any(fnmatch.fnmatchcase(name, p) for p in patterns))


def not_built(name):
    """`(status, reason)` of a name of `NOT_BUILT`, or None."""
    return next((NOT_BUILT[p] for p in NOT_BUILT if fnmatch.fnmatchcase(name, p)), None)


def reader(name):
    """The module reading the Hub directories of timm architecture `name`.

    Raises:
        ValueError: for a name keras_vit does not build, with the reason.
    """
    entry = timm.architecture_entry(name)
    refused = not_built(name)
    if refused:
        raise ValueError(f"Cannot build timm model {name!r}: {refused[1]}.")
    if vit_hybrid.is_hybrid(entry):
        return vit_hybrid
    if entry["cls"] not in READERS:
        raise ValueError(f"Cannot build timm model {name!r}: keras_vit has no reader of timm's {entry['cls']}.")
    return READERS[entry["cls"]]


def model_arguments(config):
    """`(keras_vit arguments, layout)` of a timm Hub `config.json` dict."""
    return reader(timm.split_config(config)[0]).model_arguments(config)


def preset_source(directory, architecture=None):
    """A `PresetSource` for a timm Hub directory, read by its class's module.

    `architecture`: None (the one `config.json` names), or the timm
    architecture to build from the directory's weights, as timm does for a
    tag stored in another architecture's repository (the QuickGELU CLIPs).
    """
    config = read_json(os.path.join(directory, "config.json"))
    if architecture is not None:
        config["architecture"] = architecture
    return reader(timm.split_config(config)[0]).preset_source(directory, config)


@functools.lru_cache(maxsize=None)
def _builds(name):
    """`(builds, reason)` of an architecture at its default configuration."""
    try:
        model_arguments({"architecture": name, "pretrained_cfg": {}})
    except ValueError as error:
        return False, str(error)
    return True, None


def model_info(name):
    """The `ModelInfo` of a timm architecture name.

    Raises:
        ValueError: for a name timm's ViT families do not have.
    """
    entry = timm.architecture_entry(name)
    builds, reason = _builds(name)
    return ModelInfo(name, family_of(name), entry["cls"], tuple(entry["tags"]), builds, reason)


def _matches(name, tagged, patterns):
    """Whether `name` (or, for a pattern with a ".", `tagged`) matches a pattern."""
    return patterns is None or any(fnmatch.fnmatchcase(tagged if "." in p else name, p) for p in patterns)


def list_models(pattern=None, pretrained=False, family=None):
    """The timm architectures keras_vit builds, as timm spells them.

    As `timm.list_models` (`timm.list_pretrained` with `pretrained=True`):
    sorted names, filtered by shell-style patterns.

    Args:
        pattern: None (default: all), a pattern such as "vit_*dinov3*" or a
            list of them; a pattern with a "." matches `name.tag`.
        pretrained: bool, default False: list `name.tag` for each
            pretrained tag (`hf://timm/name.tag`), rather than the names.
        family: None (default) or a family name of `FAMILIES` ("DINOv3",
            "EVA02", ...): only that family's.

    Returns:
        A sorted list of strings.

    Raises:
        ValueError: for an unknown family.

    Example:

    >>> list_models("eva_giant*")[:2]
    ['eva_giant_patch14_224', 'eva_giant_patch14_336']
    >>> list_models(family="DINOv3", pretrained=True)[0]
    'vit_7b_patch16_dinov3.lvd1689m'
    """
    if family is not None and family not in dict(FAMILIES):
        raise ValueError(f"`family` must be one of {tuple(dict(FAMILIES))}. Received: family={family!r}")
    patterns = [pattern] if isinstance(pattern, str) else None if pattern is None else list(pattern)
    out = []
    for name, entry in ARCHITECTURES.items():
        if (family is not None and family_of(name) != family) or not _builds(name)[0]:
            continue
        names = [f"{name}.{tag}" for tag in entry["tags"]] if pretrained else [name]
        out += [n for n in names if _matches(name, n, patterns)]
    return sorted(out)


def coverage():
    """`(built, pending, refused, listed)` of timm's pretrained ViT-family
    architectures: the names keras_vit builds, and `{name: reason}` of the
    others (pending: being built elsewhere in keras_vit), of all `listed`."""
    listed = sorted(name for name, entry in ARCHITECTURES.items() if entry["tags"])
    built, pending, refused = [], {}, {}
    for name in listed:
        ok, reason = _builds(name)
        if ok:
            built.append(name)
        else:
            status = (not_built(name) or ("refused",))[0]
            (pending if status == "pending" else refused)[name] = reason
    return built, pending, refused, listed


__all__ = ["FAMILIES", "NOT_BUILT", "TIMM_VERSION", "ModelInfo", "coverage", "family_of", "list_models",
           "model_info", "preset_source"]
