"""timm's hybrid ViTs (`vit_base_r50_s16_*`, `vit_large_r50_s32_*`,
`vit_small_r26_s32_*`, `vit_tiny_r_s16_p8_*`:
`timm/models/vision_transformer_hybrid.py`) from timm Hub directories.

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

The rest is read as timm's ViT (`keras_vit.weights.formats.timm`).

Example:

>>> args, _ = model_arguments({"architecture": "vit_small_r26_s32_224", "pretrained_cfg": {}})
>>> args["resnet_layers"], args["patch_size"], args["resnet_numerics"]
([2, 2, 2, 2], (1, 1), 'timm')
"""

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
    """keras_vit `ViTHybrid` arguments for a timm Hub `config.json` dict of a hybrid.

    Returns:
        `(arguments, layout)`, as `keras_vit.weights.formats.timm.model_arguments`.
    """
    name, _, args = timm.resolve(config)
    layers = _backbone(name, args)
    plain = dict(config, model_args={**(config.get("model_args") or {}), "embed_layer": "PatchEmbed"})
    out, layout = timm.model_arguments(plain)
    out.update(resnet_layers=list(layers), resnet_width=1.0, resnet_numerics="timm")
    return out, dict(layout, resnet_layers=list(layers))


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


def read(state, path, config, args, layout):
    """A timm hybrid's state dict as a `Checkpoint`."""
    resnet = resnet_rules(layout["resnet_layers"])
    params, rest = resnet.to_canonical(state)
    checkpoint = timm.read({k: state[k] for k in rest}, layout["heads"], path, layout["no_embed_class"],
                           layout["table"])
    checkpoint.params.update(params)
    return checkpoint


def preset_source(directory):
    """A `PresetSource` (`ViTHybrid`) for a timm Hub directory of a hybrid."""
    return timm.hub_source(directory, model_arguments, read, model_class="ViTHybrid")


