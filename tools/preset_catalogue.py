"""Writes keras_vit's catalogue of published checkpoints
(`keras_vit/presets/catalogue_data.py`) from the installed timm,
transformers and keras-hub.

Every checkpoint keras_vit loads by name, one row each: its name, its handle
(what `keras_vit.from_preset` downloads), the source library, the family,
the task, the parameter count, the image size, the licence its model card
declares and the card's address.

- timm: every pretrained tag of the ViT-family architectures keras_vit
  builds (`keras_vit.families.timm_zoo.list_models(pretrained=True)`),
  named `architecture.tag` as timm names them; the handle is
  `hf://` + the tag's `pretrained_cfg.hf_hub_id` (some tags share another
  architecture's repository: `architecture` then records what to build), the
  image size its `input_size`, the licence its `license`, the parameter
  count that of `timm.create_model(name)` built on torch's meta device (no
  memory, no weights). A tag timm publishes outside the Hub (a `url` only)
  keeps that URL as its handle, which `from_preset` refuses with the reason.
- transformers: the checkpoints of `TRANSFORMERS_CHECKPOINTS`, named by their
  Hub repository (`org/name`, as `from_pretrained` takes them). The names
  come from transformers' own sources (its docstrings, conversion scripts
  and tests) and, for the rest of a release they name part of, from the
  same release as keras-hub or timm convert it: the comment above each group
  says which. The sizes come from the conversion scripts (or the timm and
  keras-hub conversions), and the parameter count is that of the
  transformers class built from them on the meta device.
- keras-hub: the presets of the families keras_vit reads from keras-hub
  (`KERAS_HUB_PRESETS`), as keras-hub's `presets` tables name them, with
  their `kaggle://` handles and keras-hub's own parameter counts; a name a
  short name of `keras_vit.presets.named` already holds is prefixed
  `keras_hub_`.

Usage:
    python tools/preset_catalogue.py          # rewrites the table
    python tools/preset_catalogue.py --check  # exits 1 when it differs from the installed libraries
"""

import argparse
import contextlib
import importlib
import pathlib
import re
import sys

if __package__:
    from .torchvision_stub import import_timm
else:  # `python tools/preset_catalogue.py`: this file's folder is on the path
    from torchvision_stub import import_timm

ROOT = pathlib.Path(__file__).resolve().parents[1]
TABLE = ROOT / "keras_vit" / "presets" / "catalogue_data.py"
HF = "https://huggingface.co/"
KAGGLE = "https://www.kaggle.com/models/"

# keras_vit's timm families (`timm_zoo.FAMILIES`) -> the catalogue's family names.
TIMM_FAMILIES = {
    "AIMv2": "aimv2", "DeiT III": "deit3", "DeiT": "deit", "EVA02": "eva02", "EVA": "eva",
    "FlexiViT": "flexivit", "SAM": "sam", "DINOv3": "dinov3", "DINOv2": "dinov2", "Perception Encoder": "pe",
    "SigLIP": "siglip", "CLIP": "clip", "RADIO": "radio", "TIPSv2": "tipsv2", "Sapiens2": "sapiens2",
    "LingBot-Vision": "lingbot", "InternViT": "internvit", "MobileCLIP": "mobileclip",
    "Relative-position ViT": "vit_relpos", "RoPE-ViT": "vit_rope", "Hybrid ViT": "vit_hybrid", "ViT": "vit",
}
# The class counts of labelled heads (timm's `num_classes`): a tag with one
# is a classifier; a tag with none (0) gives features; any other width is an
# image-text tower's projection (CLIP, SigLIP, ...), which gives features too.
LABEL_SETS = {1000: "ImageNet-1k", 11221: "ImageNet-21k-P", 11821: "ImageNet-12k", 21841: "ImageNet-22k",
              21843: "ImageNet-21k", 115217: "Bamboo"}
PROJECTION_WIDTHS = (512, 640, 768, 1024, 1280)


def _row(name, handle, source, family, task, parameters, resolution, licence, card, gated=False,
         architecture=None):
    return (name, handle, source, family, task, parameters, resolution, licence, card, gated, architecture)


def _meta_parameters(build):
    """The parameter count of the torch module `build()` makes, on the meta device."""
    import torch

    with torch.device("meta"):
        module = build()
    return int(sum(p.numel() for p in module.parameters()))


# timm.


def _timm_task(name, classes):
    if classes in LABEL_SETS:
        return "classification"
    if classes == 0 or classes in PROJECTION_WIDTHS:
        return "features"
    raise ValueError(f"{name}: num_classes={classes} is neither a known label set nor a projection width")


def timm_rows(timm):
    """The rows of every pretrained tag of the timm architectures keras_vit builds."""
    from keras_vit.families import timm_zoo

    rows = []
    for full in timm_zoo.list_models(pretrained=True):
        architecture, tag = full.split(".", 1)
        cfg = timm.models.get_pretrained_cfg(full)
        family = TIMM_FAMILIES[timm_zoo.family_of(architecture)]
        if family == "siglip" and tag.startswith("v2"):
            family = "siglip2"
        if cfg.hf_hub_id:
            handle, card = "hf://" + cfg.hf_hub_id, HF + cfg.hf_hub_id
            shared = cfg.hf_hub_id.split("/", 1)[1].split(".", 1)[0]
            # A tag whose weights sit in another architecture's repository
            # (the QuickGELU CLIPs): its config.json names that architecture.
            built = architecture if cfg.hf_hub_id.startswith("timm/") and shared != architecture else None
        else:
            handle, card, built = cfg.url, cfg.url, None
        parameters = _meta_parameters(lambda: timm.create_model(full, pretrained=False))
        size = tuple(int(s) for s in cfg.input_size[1:])
        rows.append(_row(full, handle, "timm", family, _timm_task(full, cfg.num_classes), parameters, size,
                         cfg.license, card, architecture=built))
    return rows


# transformers.

# Sizes: (hidden_size, num_hidden_layers, num_attention_heads, intermediate_size).
VIT_SIZES = {"tiny": (192, 12, 3, 768), "small": (384, 12, 6, 1536), "base": (768, 12, 12, 3072),
             "large": (1024, 24, 16, 4096), "huge": (1280, 32, 16, 5120), "giant": (1536, 40, 24, 6144)}
# DINOv3 (transformers' convert_dinov3_vit_to_hf.py): the gated MLPs' widths
# are the original SwiGLU's (2/3 of mlp_ratio x hidden_size).
DINOV3_SIZES = {"vits16": (384, 12, 6, 1536, False), "vits16plus": (384, 12, 6, 1536, True),
                "vitb16": (768, 12, 12, 3072, False), "vitl16": (1024, 24, 16, 4096, False),
                "vith16plus": (1280, 32, 20, 5120, True), "vit7b16": (4096, 40, 32, 8192, True)}
# AIMv2's vision towers (apple/ml-aim; the timm table's `aimv2_*` arguments).
AIMV2_SIZES = {"large": (1024, 24, 8, 2816), "huge": (1536, 24, 12, 4096), "1B": (2048, 24, 16, 5632),
               "3B": (3072, 24, 24, 8192)}
SIGLIP_SIZES = {"base": (768, 12, 12, 3072), "large": (1024, 24, 16, 4096), "so400m": (1152, 27, 16, 4304),
                "giant-opt": (1536, 40, 16, 6144)}


def _sizes(table, size):
    hidden, layers, heads, mlp = table[size][:4]
    return dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=mlp)


def _vit(t, size, image, patch, head):
    config = t.ViTConfig(image_size=image, patch_size=patch, num_labels=1000, **_sizes(VIT_SIZES, size))
    return {"classifier": lambda: t.ViTForImageClassification(config),
            "features": lambda: t.ViTModel(config)}[head]


def _deit(t, size, image, distilled):
    cls = t.DeiTForImageClassificationWithTeacher if distilled else t.ViTForImageClassification
    config = (t.DeiTConfig if distilled else t.ViTConfig)(image_size=image, patch_size=16, num_labels=1000,
                                                          **_sizes(VIT_SIZES, size))
    return lambda: cls(config)


def _dinov2(t, size, registers, classifier):
    hidden, layers, heads, _ = VIT_SIZES[size]
    kwargs = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, image_size=518,
                  patch_size=14, use_swiglu_ffn=size == "giant", num_labels=1000)
    if registers:
        config = t.Dinov2WithRegistersConfig(num_register_tokens=4, **kwargs)
        cls = t.Dinov2WithRegistersForImageClassification if classifier else t.Dinov2WithRegistersModel
    else:
        config = t.Dinov2Config(**kwargs)
        cls = t.Dinov2ForImageClassification if classifier else t.Dinov2Model
    return lambda: cls(config)


def _dinov3_config(t, size, **extra):
    gated = DINOV3_SIZES[size][4]
    return t.DINOv3ViTConfig(patch_size=16, num_register_tokens=4, use_gated_mlp=gated, image_size=224,
                             query_bias=size != "vit7b16", key_bias=False, value_bias=size != "vit7b16",
                             proj_bias=True, mlp_bias=True, **_sizes(DINOV3_SIZES, size), **extra)


def _dinov3(t, size):
    return lambda: t.DINOv3ViTModel(_dinov3_config(t, size))


def _clip(t, size, patch, image):
    vision = dict(image_size=image, patch_size=patch, **_sizes(VIT_SIZES, size))
    text = dict(hidden_size=512, num_hidden_layers=12, num_attention_heads=8, intermediate_size=2048)
    if size == "large":
        text = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
    config = t.CLIPConfig(vision_config=vision, text_config=text, projection_dim=text["hidden_size"])
    return lambda: t.CLIPModel(config)


def _siglip(t, size, patch, image, vocab=32000, positions=64):
    vision = dict(image_size=image, patch_size=patch, **_sizes(SIGLIP_SIZES, size))
    text = dict(vocab_size=vocab, max_position_embeddings=positions, **_sizes(SIGLIP_SIZES, size))
    return lambda: t.SiglipModel(t.SiglipConfig(vision_config=vision, text_config=text))


def _siglip2(t, size, patch, image):
    patches = 256 if image is None else (image // patch) ** 2
    vision = dict(patch_size=patch, num_patches=patches, **_sizes(SIGLIP_SIZES, size))
    # The giant's text tower is So400m's, projected to the image tower's width.
    text = dict(vocab_size=256000, max_position_embeddings=64, projection_size=SIGLIP_SIZES[size][0],
                **_sizes(SIGLIP_SIZES, "so400m" if size == "giant-opt" else size))
    return lambda: t.Siglip2Model(t.Siglip2Config(vision_config=vision, text_config=text))


def _aimv2(t, size, image):
    config = t.Aimv2VisionConfig(image_size=image, patch_size=14, use_head=False, **_sizes(AIMV2_SIZES, size))
    return lambda: t.Aimv2VisionModel(config)


def _owl(t, version, size, patch, image):
    vision = dict(image_size=image, patch_size=patch, **_sizes(VIT_SIZES, size))
    text = dict(hidden_size=512, num_hidden_layers=12, num_attention_heads=8, intermediate_size=2048)
    if size == "large":
        text = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
    config_class, cls = ((t.OwlViTConfig, t.OwlViTForObjectDetection) if version == 1
                         else (t.Owlv2Config, t.Owlv2ForObjectDetection))
    config = config_class(vision_config=vision, text_config=text, projection_dim=text["hidden_size"])
    return lambda: cls(config)


# SAM (transformers' convert_sam_to_hf.py): the image encoders' global-attention blocks.
SAM_GLOBAL = {"base": [2, 5, 8, 11], "large": [5, 11, 17, 23], "huge": [7, 15, 23, 31]}


def _sam(t, size):
    hidden, layers, heads, mlp = VIT_SIZES[size]
    vision = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, mlp_dim=mlp,
                  global_attn_indexes=SAM_GLOBAL[size])
    return lambda: t.SamModel(t.SamConfig(vision_config=vision))


# Depth Anything (transformers' convert_depth_anything_to_hf.py): the
# DINOv2 backbone's taps, the neck and fusion widths per size.
DEPTH_ANYTHING = {"small": ([9, 10, 11, 12], [48, 96, 192, 384], 64),
                  "base": ([9, 10, 11, 12], [96, 192, 384, 768], 128),
                  "large": ([21, 22, 23, 24], [256, 512, 1024, 1024], 256)}


def _depth_anything(t, size, metric=None):
    taps, neck, fusion = DEPTH_ANYTHING[size]
    hidden, layers, heads, _ = VIT_SIZES[size]
    backbone = t.Dinov2Config(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                              image_size=518, patch_size=14, out_indices=taps, apply_layernorm=True,
                              reshape_hidden_states=False)
    extra = dict(depth_estimation_type="metric", max_depth=metric) if metric else {}
    config = t.DepthAnythingConfig(backbone_config=backbone, reassemble_hidden_size=hidden, patch_size=14,
                                   neck_hidden_sizes=neck, fusion_hidden_size=fusion, **extra)
    return lambda: t.DepthAnythingForDepthEstimation(config)


def _dpt(t, hybrid):
    if hybrid:
        # transformers' convert_dpt_hybrid_to_pytorch.py: ViT-B/16 on BiT's first stages.
        config = t.DPTConfig(is_hybrid=True, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                             intermediate_size=3072, image_size=384, backbone_out_indices=[2, 5, 8, 11],
                             neck_hidden_sizes=[256, 512, 768, 768], backbone_featmap_shape=[1, 1024, 24, 24],
                             neck_ignore_stages=[0, 1], readout_type="project")
    else:
        # transformers' convert_dpt_to_pytorch.py: ViT-L/16 at 384.
        config = t.DPTConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                             intermediate_size=4096, image_size=384, backbone_out_indices=[5, 11, 17, 23],
                             neck_hidden_sizes=[256, 512, 1024, 1024], readout_type="project")
    return lambda: t.DPTForDepthEstimation(config)


def _chmv2(t):
    # CHMv2Config's defaults are the published DPT head on DINOv3-L/16 at 416.
    return lambda: t.CHMv2ForDepthEstimation(t.CHMv2Config())


# EoMT: the classes of each dataset's head.
EOMT_CLASSES = {"coco_panoptic": 133, "ade20k_panoptic": 150, "cityscapes_semantic": 19,
                "ade20k_semantic": 150, "coco_instance": 80}


def _eomt(t, dataset, size, image):
    hidden, layers, heads, _ = VIT_SIZES[size]
    # transformers' default number of queries (200).
    config = t.EomtConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, image_size=image,
                          patch_size=16, use_swiglu_ffn=size == "giant", num_labels=EOMT_CLASSES[dataset])
    return lambda: t.EomtForUniversalSegmentation(config)


def _eomt_dinov3(t, size, image):
    config = t.EomtDinov3Config(image_size=image, patch_size=16, num_labels=EOMT_CLASSES["coco_panoptic"],
                                **_sizes(DINOV3_SIZES, size))
    return lambda: t.EomtDinov3ForUniversalSegmentation(config)


def _hf(repo, family, task, build, image, licence, gated=False):
    """A transformers checkpoint: `build(transformers)` gives a function making
    its model; `image` its image size (None: no fixed size)."""
    return repo, family, task, build, image, licence, gated


def _sizes_of(names, sizes):
    return [(n, s) for n in names for s in sizes]


TRANSFORMERS_CHECKPOINTS = (
    # ViT (google/vit-*): transformers' docstrings name google/vit-base-patch16-224
    # and -in21k; the other nine are the same release at the sizes and
    # resolutions of keras-hub's eleven `vit` presets, converted from it.
    *[_hf(f"google/vit-{size}-patch{patch}-{image}", "vit", "classification",
          lambda t, s=size, p=patch, i=image: _vit(t, s, i, p, "classifier"), image, "apache-2.0")
      for size, patch, image in (("base", 16, 224), ("base", 16, 384), ("base", 32, 384), ("large", 16, 224),
                                 ("large", 16, 384), ("large", 32, 384))],
    *[_hf(f"google/vit-{size}-patch{patch}-224-in21k", "vit", "features",
          lambda t, s=size, p=patch: _vit(t, s, 224, p, "features"), 224, "apache-2.0")
      for size, patch in (("base", 16), ("base", 32), ("large", 16), ("large", 32), ("huge", 14))],
    # DeiT (facebook/deit-*): transformers' docstrings name
    # facebook/deit-base-distilled-patch16-224, keras_vit's short name deit_tiny
    # the tiny one; the rest of the release as timm's `deit_*` tags have it.
    *[_hf(f"facebook/deit-{size}-{'distilled-' if distilled else ''}patch16-{image}", "deit", "classification",
          lambda t, s=size, i=image, d=distilled: _deit(t, s, i, d), image, "apache-2.0")
      for size, image, distilled in (("tiny", 224, False), ("small", 224, False), ("base", 224, False),
                                     ("base", 384, False), ("tiny", 224, True), ("small", 224, True),
                                     ("base", 224, True), ("base", 384, True))],
    # DINOv2 (transformers' convert_dinov2_to_hf.py and
    # convert_dinov2_with_registers_to_hf.py: facebook/dinov2-*).
    *[_hf(f"facebook/dinov2-{'with-registers-' if registers else ''}{size}{'-imagenet1k-1-layer' if cls else ''}",
          "dinov2", "classification" if cls else "features",
          lambda t, s=size, r=registers, c=cls: _dinov2(t, s, r, c), 518, "apache-2.0")
      for registers in (False, True) for cls in (False, True) for size in ("small", "base", "large", "giant")],
    # DINOv3 (transformers' convert_dinov3_vit_to_hf.py, HUB_MODELS): gated.
    *[_hf(f"facebook/dinov3-{size}-pretrain-lvd1689m", "dinov3", "features",
          lambda t, s=size: _dinov3(t, s), 224, "dinov3-license", gated=True) for size in DINOV3_SIZES],
    # CLIP (openai/clip-*): transformers' docstrings name base-patch32; the other
    # three as keras-hub's OpenAI `clip_*` presets, converted from them. Both towers.
    *[_hf(f"openai/clip-vit-{size}-patch{patch}{suffix}", "clip", "zero-shot",
          lambda t, s=size, p=patch, i=image: _clip(t, s, p, i), image, None)
      for size, patch, suffix, image in (("base", 32, "", 224), ("base", 16, "", 224), ("large", 14, "", 224),
                                         ("large", 14, "-336", 336))],
    # SigLIP (transformers' convert_siglip_to_hf.py, model_name_to_checkpoint:
    # google/siglip-*; the i18n base one is published as -multilingual).
    *[_hf(f"google/siglip-{size}-patch{patch}-{image}{suffix}", "siglip", "zero-shot",
          lambda t, s=size, p=patch, i=image, v=vocab, n=positions: _siglip(t, s, p, i, v, n), image, "apache-2.0")
      for size, patch, image, suffix, vocab, positions in (
          ("base", 16, 224, "", 32000, 64), ("base", 16, 256, "", 32000, 64), ("base", 16, 384, "", 32000, 64),
          ("base", 16, 512, "", 32000, 64), ("large", 16, 256, "", 32000, 64), ("large", 16, 384, "", 32000, 64),
          ("base", 16, 256, "-multilingual", 250000, 64), ("so400m", 14, 224, "", 32000, 16),
          ("so400m", 14, 384, "", 32000, 64), ("so400m", 16, 256, "-i18n", 250000, 64))],
    # SigLIP 2 (google/siglip2-*): transformers' docstrings name
    # google/siglip2-base-patch16-224 and -naflex; the fixed-size ones as
    # keras-hub's `siglip2_*` presets, converted from them; so400m NaFlex as
    # Google's release.
    *[_hf(f"google/siglip2-{size}-patch{patch}-{image}", "siglip2", "zero-shot",
          lambda t, s=size, p=patch, i=image: _siglip2(t, s, p, i), image, "apache-2.0")
      for size, patch, image in (("base", 16, 224), ("base", 16, 256), ("base", 16, 384), ("base", 16, 512),
                                 ("base", 32, 256), ("large", 16, 256), ("large", 16, 384), ("large", 16, 512),
                                 ("so400m", 14, 224), ("so400m", 14, 384), ("so400m", 16, 256),
                                 ("so400m", 16, 384), ("so400m", 16, 512), ("giant-opt", 16, 256),
                                 ("giant-opt", 16, 384))],
    *[_hf(f"google/siglip2-{size}-patch16-naflex", "siglip2", "zero-shot",
          lambda t, s=size: _siglip2(t, s, 16, None), None, "apache-2.0") for size in ("base", "so400m")],
    # AIMv2 image encoders (apple/aimv2-*): transformers' docstrings name
    # apple/aimv2-large-patch14-224-lit (two towers, which keras_vit does not
    # read); the image encoders at the sizes and resolutions of timm's
    # `aimv2_*` tags, and Apple's two distilled ones.
    *[_hf(f"apple/aimv2-{size}-patch14-{image}", "aimv2", "features",
          lambda t, s=size, i=image: _aimv2(t, s, i), image, "apple-amlr")
      for size in AIMV2_SIZES for image in (224, 336, 448)],
    *[_hf(f"apple/aimv2-large-patch14-{image}-distilled", "aimv2", "features",
          lambda t, i=image: _aimv2(t, "large", i), image, "apple-amlr") for image in (224, 336)],
    # Depth Anything (transformers' convert_depth_anything_to_hf.py lists the
    # sizes, V2 relative and metric; its docstrings and tests name
    # LiheYoung/depth-anything-small-hf and the V2 -hf repositories; the
    # metric models' max_depth 20 indoors, 80 outdoors).
    *[_hf(f"LiheYoung/depth-anything-{size}-hf", "depth_anything", "depth",
          lambda t, s=size: _depth_anything(t, s), 518, "apache-2.0") for size in DEPTH_ANYTHING],
    *[_hf(f"depth-anything/Depth-Anything-V2-{size.title()}-hf", "depth_anything", "depth",
          lambda t, s=size: _depth_anything(t, s), 518, "apache-2.0" if size == "small" else "cc-by-nc-4.0")
      for size in DEPTH_ANYTHING],
    *[_hf(f"depth-anything/Depth-Anything-V2-Metric-{place}-{size.title()}-hf", "depth_anything", "depth",
          lambda t, s=size, m=depth: _depth_anything(t, s, m), 518,
          "apache-2.0" if size == "small" else "cc-by-nc-4.0")
      for place, depth in (("Indoor", 20), ("Outdoor", 80)) for size in DEPTH_ANYTHING],
    # DPT (Intel/dpt-large: transformers' docstrings; Intel/dpt-hybrid-midas:
    # the hybrid of the same release, transformers' convert_dpt_hybrid_to_pytorch.py).
    _hf("Intel/dpt-large", "dpt", "depth", lambda t: _dpt(t, False), 384, "apache-2.0"),
    _hf("Intel/dpt-hybrid-midas", "dpt", "depth", lambda t: _dpt(t, True), 384, "apache-2.0"),
    # CHMv2 (transformers' docstrings).
    _hf("facebook/dinov3-vitl16-chmv2-dpt-head", "chmv2", "depth", _chmv2, 416, "dinov3-license", gated=True),
    # EoMT (transformers' EoMT tests, CHECKPOINT_IDS: tue-mps/*).
    *[_hf(f"tue-mps/{dataset}_eomt_{size}_{image}", "eomt", "segmentation",
          lambda t, d=dataset, s=size, i=image: _eomt(t, d, s, i), image, "mit")
      for dataset, size, image in (
          ("coco_panoptic", "large", 640), ("coco_panoptic", "large", 1280), ("coco_panoptic", "giant", 640),
          ("coco_panoptic", "giant", 1280), ("ade20k_panoptic", "large", 640), ("ade20k_panoptic", "large", 1280),
          ("ade20k_panoptic", "giant", 640), ("ade20k_panoptic", "giant", 1280),
          ("cityscapes_semantic", "large", 1024), ("ade20k_semantic", "large", 512),
          ("coco_instance", "large", 640), ("coco_instance", "large", 1280))],
    # EoMT on DINOv3 (transformers' docstrings and eomt_dinov3/convert.sh).
    *[_hf(f"tue-mps/coco_panoptic_eomt_{size}_640_dinov3", "eomt", "segmentation",
          lambda t, s=dinov3: _eomt_dinov3(t, s, 640), 640, "mit")
      for size, dinov3 in (("small", "vits16"), ("large", "vitl16"))],
    # OWL-ViT and OWLv2 (google/owlvit-*, google/owlv2-*): transformers'
    # docstrings name owlvit-base-patch32/16 and owlv2-base-patch16(-ensemble);
    # the large and fine-tuned ones are the rest of Google's release.
    *[_hf(f"google/owlvit-{size}-patch{patch}", "owlvit", "detection",
          lambda t, s=size, p=patch, i=image: _owl(t, 1, s, p, i), image, "apache-2.0")
      for size, patch, image in (("base", 32, 768), ("base", 16, 768), ("large", 14, 840))],
    *[_hf(f"google/owlv2-{size}-patch{patch}{suffix}", "owlv2", "detection",
          lambda t, s=size, p=patch, i=image: _owl(t, 2, s, p, i), image, "apache-2.0")
      for size, patch, image in (("base", 16, 960), ("large", 14, 1008))
      for suffix in ("", "-ensemble", "-finetuned")],
    # SAM (facebook/sam-vit-*): transformers' docstrings name base and huge; large
    # is the third size of the release (keras-hub's `sam_*_sa1b` presets).
    *[_hf(f"facebook/sam-vit-{size}", "sam", "promptable-masks", lambda t, s=size: _sam(t, s), 1024, "apache-2.0")
      for size in SAM_GLOBAL],
)


def transformers_rows(transformers):
    """The rows of `TRANSFORMERS_CHECKPOINTS`, their parameters counted."""
    rows = []
    for repo, family, task, build, image, licence, gated in TRANSFORMERS_CHECKPOINTS:
        parameters = _meta_parameters(build(transformers))
        size = None if image is None else (image, image)
        rows.append(_row(repo, "hf://" + repo, "transformers", family, task, parameters, size, licence, HF + repo,
                         gated))
    return rows


# keras-hub: `{module of keras_hub.src.models: (family, task, licence)}` of the
# families keras_vit reads from keras-hub (`keras_vit.families.keras_hub_source`,
# `keras_vit.presets.tasks`); the licence is that of the checkpoints they
# were converted from.
KERAS_HUB_PRESETS = {
    "vit": ("vit", None, "apache-2.0"),
    "dinov2": ("dinov2", "features", "apache-2.0"),
    "dinov3": ("dinov3", "features", "dinov3-license"),
    "clip": ("clip", "zero-shot", None),
    "siglip": ("siglip", "zero-shot", "apache-2.0"),
    "depth_anything": ("depth_anything", "depth", None),
    "sam": ("sam", "promptable-masks", "apache-2.0"),
}


def _keras_hub_size(name, description):
    match = re.search(r"_(\d{3})(?:_|$)", name) or re.search(r"(?:image size|resolution of) (\d{3})", description)
    return None if match is None else (int(match.group(1)), int(match.group(1)))


def _keras_hub_licence(module, name, licence):
    if module == "clip":
        # OpenCLIP's LAION checkpoints (MIT); OpenAI's declare none.
        return "mit" if "laion" in name else None
    if module == "depth_anything":
        return "apache-2.0" if name.endswith("_small") else "cc-by-nc-4.0"
    if name.startswith("medsiglip"):
        return "health-ai-developer-foundations"
    return licence


def keras_hub_rows(short_names):
    """The rows of keras-hub's presets of `KERAS_HUB_PRESETS`' families."""
    rows = []
    for module, (family, task, licence) in KERAS_HUB_PRESETS.items():
        presets = importlib.import_module(f"keras_hub.src.models.{module}.{module}_presets")
        tables = [value for key, value in vars(presets).items() if key.endswith("presets") and isinstance(value, dict)]
        for table in tables:
            for name, preset in table.items():
                handle = preset["kaggle_handle"]
                owner, model, framework, variation = handle[len("kaggle://"):].split("/")[:4]
                meta = preset["metadata"]
                row_family = "siglip2" if name.startswith("siglip2") else family
                row_task = task or ("classification" if name.endswith("_imagenet") else "features")
                listed = f"keras_hub_{name}" if name in short_names else name
                rows.append(_row(listed, handle, "keras_hub", row_family, row_task, int(meta["params"]),
                                 _keras_hub_size(name, meta.get("description", "")),
                                 _keras_hub_licence(module, name, licence),
                                 f"{KAGGLE}{owner}/{model}/{framework}/{variation}",
                                 ))
    return rows


def build_rows():
    """Every row: transformers', keras-hub's, then timm's."""
    import keras_hub
    import transformers

    from keras_vit.presets.named import NAMED_PRESETS

    timm = import_timm()
    with contextlib.redirect_stderr(sys.stdout):
        rows = transformers_rows(transformers) + keras_hub_rows(set(NAMED_PRESETS)) + timm_rows(timm)
    names = [row[0] for row in rows]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"names given twice: {duplicates}")
    versions = dict(timm=timm.__version__, transformers=transformers.__version__, keras_hub=keras_hub.__version__)
    return rows, versions


HEADER = '''"""Every checkpoint keras_vit loads by name: the catalogue's rows.

Generated by `tools/preset_catalogue.py` from the installed timm, transformers
and keras-hub: do not edit; run `python tools/preset_catalogue.py` after a
new release of one of them. `keras_vit.presets.catalogue` reads it.

`PRESETS`: one tuple per checkpoint, `(name, handle, source, family, task,
parameters, resolution, licence, card, gated, architecture)`:
`architecture` is the timm architecture to build where it is not the one the
repository's config.json names (None: that one).
"""

'''


def render(rows, versions):
    lines = [HEADER]
    lines += [f"{key.upper()}_VERSION = {value!r}" for key, value in versions.items()]
    lines += ["", "PRESETS = ("]
    lines += [f"    {row!r}," for row in rows]
    lines += [")", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed table differs")
    args = parser.parse_args(argv)
    text = render(*build_rows())
    if args.check:
        same = TABLE.read_text() == text
        print(f"{TABLE.relative_to(ROOT)} {'matches' if same else 'differs from'} the installed libraries")
        return 0 if same else 1
    TABLE.write_text(text)
    print(f"wrote {TABLE.relative_to(ROOT)}: {text.count(chr(10) + '    (')} checkpoints")
    return 0


if __name__ == "__main__":
    sys.exit(main())
