"""timm's hybrid ViTs (`vit_base_r50_s16_*`, `vit_large_r50_s32_*`,
`vit_small_r26_s32_*`, `vit_tiny_r_s16_p8_*`, and MobileCLIP's
`vit_base_mci_224`: `timm/models/vision_transformer_hybrid.py`) from timm
Hub directories.

timm's hybrid is its `VisionTransformer` with a `HybridEmbed` patch
embedding: a ResNet-v2 (BiT, not pre-activated: `ResNetV2(preact=False)`
with `StdConv2dSame` and `GroupNormAct`), or its stem alone, then the patch
convolution `patch_embed.proj` on its feature map. That is keras_vit's
`ViTHybrid` with timm's numerics (`resnet_numerics="timm"`: GroupNorm
epsilon 1e-5, kernels standardised by `sqrt(var + 1e-8)`). The ResNet's
tensors, under `patch_embed.backbone.`:

- `stem.conv` (the 7x7/2 root; `conv` for the stem alone), `stem.norm`;
- `stages.{s}.blocks.{b}.conv1`/`norm1`, `conv2`/`norm2`, `conv3`/`norm3`
  and, in a stage's first block, `downsample.conv`/`downsample.norm`:
  keras_vit's (and the official) `block{s + 1}/unit{b + 1}/conv1`, `gn1`,
  ..., `conv_proj`, `gn_proj`.

MobileCLIP's image tower embeds patches with timm's `ConvStem` (patchify
convolutions, each with BatchNorm and GELU, the last with a bias and no
norm, `HybridEmbed(proj=False)`): keras_vit's `ViTConvStem`, the last
convolution its patch embedding (`patch_embed.backbone.{i}.conv`, `.bn`
with its running statistics -> `stem_conv_{i}`, `stem_norm_{i}`).

The rest is read as timm's ViT (`keras_vit.weights.formats.timm`).

Example:

>>> args, _ = model_arguments({"architecture": "vit_small_r26_s32_224", "pretrained_cfg": {}})
>>> args["resnet_layers"], args["patch_size"], args["resnet_numerics"]
([2, 2, 2, 2], (1, 1), 'timm')
"""

import os

from keras_vit.weights.formats import timm
from keras_vit.weights.formats.conventions import torch_linear, torch_norm
from keras_vit.weights.rules import RuleTable

# What keras_vit's ViTHybrid builds of timm's ResNet description
# (`tools/timm_table.py`): its convolutions, norms and max-pool.
_RESNET = {"conv": "StdConv2dSame", "conv_eps": 1e-8, "norm": "GroupNormAct", "norm_eps": 1e-5, "groups": 32,
           "pool": "MaxPool2dSame", "stem_chs": 64}


def is_hybrid(entry):
    """Whether a table entry is a ViT on a backbone (`HybridEmbed`)."""
    layer = entry["args"].get("embed_layer")
    return isinstance(layer, dict) and layer.get("fn") == "HybridEmbed"


def _conv_stem(layer):
    """`(channels, strides, epsilon, patch)` of timm's `ConvStem` as keras_vit's
    `ViTConvStem` builds it (patchify convolutions with BatchNorm and GELU,
    the last one, with its bias, the patch embedding), or None."""
    stages = (layer.get("backbone") or {}).get("stages") or []
    if layer.get("backbone", {}).get("fn") != "ConvStem" or layer.get("proj", True) or len(stages) < 2:
        return None
    *stem, last = stages
    square = all(s["kernel"] == s["stride"] and s["kernel"][0] == s["kernel"][1] and s["padding"] == [0, 0]
                 for s in stages)
    plain = all(not s["bias"] and s.get("norm") == "BatchNormAct2d" and s.get("act") == "GELU" for s in stem)
    epsilons = {s["norm_eps"] for s in stem}
    if not (square and plain and last["bias"] and "norm" not in last and len(epsilons) == 1):
        return None
    return [s["out"] for s in stem], [s["stride"][0] for s in stem], epsilons.pop(), last["stride"][0]


def _backbone(name, args):
    """The ResNet description of timm's `HybridEmbed`, checked."""
    layer = args["embed_layer"]
    backbone = layer.get("backbone") or {}
    other = {k: v for k, v in layer.items() if k not in ("fn", "backbone")}
    settings = {k: v for k, v in backbone.items() if k not in ("fn", "layers")}
    if backbone.get("fn") != "ResNetV2" or settings != _RESNET or other:
        raise ValueError(
            f"Cannot build timm model {name!r}: keras_vit's hybrids hold a ResNet-v2 of {_RESNET}; "
            f"this one's patch embedding is {layer!r}."
        )
    return backbone["layers"]


def model_arguments(config):
    """keras_vit `ViTHybrid` (or `ViTConvStem`) arguments for a timm Hub
    `config.json` dict of a hybrid.

    Returns:
        `(arguments, layout)`, as `keras_vit.weights.formats.timm.model_arguments`.
    """
    name, _, args = timm.resolve(config)
    model_args = {**(config.get("model_args") or {}), "embed_layer": "PatchEmbed"}
    stem = _conv_stem(args["embed_layer"])
    if stem is not None:
        channels, strides, epsilon, patch = stem
        out, layout = timm.model_arguments(dict(config, model_args=dict(model_args, patch_size=patch)))
        out.update(stem_channels=channels, stem_strides=strides, stem_norm_epsilon=epsilon)
        return out, dict(layout, model_class="ViTConvStem", conv_stem=len(channels))
    layers = _backbone(name, args)
    out, layout = timm.model_arguments(dict(config, model_args=model_args))
    out.update(resnet_layers=list(layers), resnet_width=1.0, resnet_numerics="timm")
    return out, dict(layout, model_class="ViTHybrid", resnet_layers=list(layers))


def resnet_rules(layers, prefix="patch_embed.backbone."):
    """The rules of timm's ResNet-v2 with `layers` units per stage (`()`:
    the stem alone, whose modules sit at the top of the backbone)."""
    stem = prefix + ("stem." if layers else "")
    rules = [*torch_linear(stem + "conv", "conv_root/", "conv"), *torch_norm(stem + "norm", "gn_root/")]
    for s, units in enumerate(layers):
        for b in range(units):
            source, target = f"{prefix}stages.{s}.blocks.{b}.", f"block{s + 1}/unit{b + 1}/"
            for n in (1, 2, 3):
                rules += [*torch_linear(source + f"conv{n}", target + f"conv{n}/", "conv"),
                          *torch_norm(source + f"norm{n}", target + f"gn{n}/")]
            rules += [*torch_linear(source + "downsample.conv", target + "conv_proj/", "conv"),
                      *torch_norm(source + "downsample.norm", target + "gn_proj/")]
    # timm's convolutions have no biases: only the weights are rules.
    return RuleTable([rule for rule in rules if not rule[0].endswith(".bias") or "norm" in rule[0]])


def conv_stem_rules(count, prefix="patch_embed.backbone."):
    """The rules of timm's `ConvStem` with `count` convolutions before the
    last (`{i}.conv`, `{i}.bn` -> `stem_conv_{i}`, `stem_norm_{i}` with
    their running statistics), whose last is the patch embedding."""
    rules = []
    for i in range(count):
        source, norm = f"{prefix}{i}.", f"stem_norm_{i}/"
        rules += [(source + "conv.weight", f"stem_conv_{i}/kernel", "conv"), *torch_norm(source + "bn", norm),
                  (source + "bn.running_mean", norm + "moving_mean"),
                  (source + "bn.running_var", norm + "moving_variance")]
    return RuleTable(rules + list(torch_linear(f"{prefix}{count}.conv", "embedding/", "conv")))


def read(state, path, config, args, layout):
    """A timm hybrid's state dict as a `Checkpoint`."""
    if "conv_stem" in layout:
        stem = conv_stem_rules(layout["conv_stem"])
        # BatchNorm's count of training steps is no weight.
        ignored = {k: "BatchNorm's training step count" for k in state if k.endswith("num_batches_tracked")}
    else:
        stem, ignored = resnet_rules(layout["resnet_layers"]), {}
    params, rest = stem.to_canonical({k: v for k, v in state.items() if k not in ignored})
    checkpoint = timm.read({k: state[k] for k in rest}, layout["heads"], path, layout["no_embed_class"],
                           layout["table"])
    checkpoint.params.update(params)
    checkpoint.ignored.update(ignored)
    return checkpoint


def preset_source(directory, config=None):
    """A `PresetSource` (`ViTHybrid`, or `ViTConvStem`) for a timm Hub directory
    of a hybrid (`config`: its `config.json` dict, None: read here)."""
    config = timm.read_json(os.path.join(directory, "config.json")) if config is None else config
    _, layout = model_arguments(config)
    return timm.hub_source(directory, model_arguments, read, model_class=layout["model_class"], config=config)


