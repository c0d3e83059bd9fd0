"""Short names for the families' published checkpoints: one table.

`keras_vit.from_preset("dinov3_vits16")` (and `load_model`,
`ImageTextModel.from_preset`, every command) turns a short name of
`NAMED_PRESETS` into its Hub handle, then loads that handle as any other:
the checkpoint's own files record its configuration, preprocessing and class
names, which `from_preset` reads into the model. The table adds what a user
must know before downloading: the family, the scaling the checkpoint's files
record, and the licence its model card declares (`licence=None`: the card
declares none). The catalogue (`keras_vit.presets.catalogue`) lists each
short name beside the checkpoint it stands for.

`keras_vit.list_presets()` lists them with every other name of the catalogue;
`tools/docs_pages.py` writes a model card per short name
(`docs/model-cards/presets/`).
"""

import difflib
from typing import NamedTuple, Optional


class NamedPreset(NamedTuple):
    """One short name and what it stands for.

    Attributes:
        name: the short name ("dinov3_vits16").
        handle: the Hub handle it loads ("hf://org/name").
        family: the model family (as the catalogue names it).
        description: what the checkpoint is, in a sentence.
        preprocessing: the scaling and image size its preprocessor files
            record (read by `from_preset` into `model.preprocessing`).
        licence: the licence its model card declares, or None when the card
            declares none.
        card: the model card it was taken from.
        gated: whether the Hub asks to accept the licence before download.
    """

    name: str
    handle: str
    family: str
    description: str
    preprocessing: str
    licence: Optional[str]
    card: str
    gated: bool = False

    @property
    def repo_id(self):
        """The Hub repository ("org/name") of the handle."""
        return self.handle[len("hf://"):].split("@")[0]


_IMAGENET = "ImageNet mean/std, 224 x 224"
_CLIP = "CLIP mean/std (OpenAI's statistics)"
_HALF = "[-1, 1] (mean 0.5, std 0.5)"
_DINOV3_LICENCE = "DINOv3 License (Meta)"
_HF = "https://huggingface.co/"


def _row(name, repo, family, description, preprocessing, licence, gated=False):
    return NamedPreset(name, f"hf://{repo}", family, description, preprocessing, licence, _HF + repo, gated)


NAMED_PRESETS = {row.name: row for row in (
    _row("vit_b16", "google/vit-base-patch16-224", "vit",
         "ViT-B/16 pre-trained on ImageNet-21k, fine-tuned on ImageNet-1k (transformers layout).",
         _HALF + ", 224 x 224", "Apache-2.0"),
    _row("deit_tiny", "facebook/deit-tiny-patch16-224", "deit",
         "DeiT-Tiny/16 trained on ImageNet-1k (transformers layout).", _IMAGENET, "Apache-2.0"),
    _row("dinov2_small", "facebook/dinov2-small", "dinov2",
         "DINOv2 ViT-S/14 backbone, self-supervised (transformers layout).", _IMAGENET, "Apache-2.0"),
    _row("dinov3_vits16", "facebook/dinov3-vits16-pretrain-lvd1689m", "dinov3",
         "DINOv3 ViT-S/16 backbone pre-trained on LVD-1689M (transformers layout).",
         _IMAGENET, _DINOV3_LICENCE, gated=True),
    _row("dinov3_vitb16", "facebook/dinov3-vitb16-pretrain-lvd1689m", "dinov3",
         "DINOv3 ViT-B/16 backbone pre-trained on LVD-1689M (transformers layout).",
         _IMAGENET, _DINOV3_LICENCE, gated=True),
    _row("dinov3_vitl16", "facebook/dinov3-vitl16-pretrain-lvd1689m", "dinov3",
         "DINOv3 ViT-L/16 backbone pre-trained on LVD-1689M (transformers layout).",
         _IMAGENET, _DINOV3_LICENCE, gated=True),
    _row("clip_vit_b32", "openai/clip-vit-base-patch32", "clip",
         "OpenAI CLIP ViT-B/32, both towers (transformers layout): the image tower with "
         "`from_preset`, both with `ImageTextModel.from_preset`.", _CLIP + ", 224 x 224", None),
    _row("siglip_b16_224", "google/siglip-base-patch16-224", "siglip",
         "SigLIP ViT-B/16 at 224 px, both towers (transformers layout).", _HALF + ", 224 x 224",
         "Apache-2.0"),
    _row("siglip2_b16_naflex", "google/siglip2-base-patch16-naflex", "siglip2",
         "SigLIP 2 ViT-B/16 NaFlex (native aspect ratio), both towers (transformers layout).",
         _HALF + ", a patch budget instead of a fixed size", "Apache-2.0"),
    _row("eva02_b14_448", "timm/eva02_base_patch14_448.mim_in22k_ft_in22k_in1k", "eva02",
         "EVA02-B/14 (MIM on ImageNet-22k, fine-tuned on 22k then 1k) classifier (timm Hub layout).",
         _CLIP + ", 448 x 448", "MIT"),
    _row("aimv2_l14_224", "timm/aimv2_large_patch14_224.apple_pt", "aimv2",
         "AIMv2-L/14 image encoder at 224 px (timm Hub layout).", _CLIP + ", 224 x 224",
         "Apple Sample Code License (apple-ascl)"),
)}


def get_named_preset(name):
    """The `NamedPreset` of a short name (`NAMED_PRESETS`).

    `keras_vit.presets.get_preset` gives the catalogue's row of any name
    (handle, task, parameters, licence); this gives a short name's
    description and preprocessing.

    Raises:
        ValueError: for a name that is not a short name, naming the closest ones.

    Example:

    >>> get_named_preset("deit_tiny").handle
    'hf://facebook/deit-tiny-patch16-224'
    """
    row = NAMED_PRESETS.get(name)
    if row is None:
        close = difflib.get_close_matches(str(name).lower(), list(NAMED_PRESETS), n=3, cutoff=0.5)
        hint = f" Closest: {', '.join(close)}." if close else ""
        raise ValueError(f"{name!r} is not a short name ({', '.join(NAMED_PRESETS)}).{hint}")
    return row
