"""transformers' BiT backbone (`BitModel`, `model_type` "bit"), the stem of DPT-Hybrid.

A DPT-Hybrid checkpoint (`keras_vit.families.dpt`) holds a BiT ResNet
without pre-activation under `dpt.embeddings.backbone.bit.`: `embedder.convolution` (the
7x7/2 root, weight-standardised) and `embedder.norm`, then
`encoder.stages.{s}.layers.{u}` with `conv1`-`conv3`, `norm1`-`norm3` and,
in a stage's first unit, `downsample.conv`/`downsample.norm`. They are
keras_vit's (and the official) hybrid ResNet keys, `conv_root`, `gn_root`,
`block{s + 1}/unit{u + 1}/conv1`, `gn1`, ..., `conv_proj`, `gn_proj`.
"""

from keras_vit.weights.formats.conventions import torch_linear

# transformers' `BitConfig` defaults that a DPT-Hybrid config may leave out.
BIT_DEFAULTS = dict(layer_type="bottleneck", global_padding="SAME", embedding_dynamic_padding=True, num_groups=32,
                    embedding_size=64, hidden_sizes=[256, 512, 1024], depths=[3, 4, 9], hidden_act="relu")


def bit_rules(depths):
    """The rules of transformers' BiT stem (non-pre-activation bottlenecks)
    -> the canonical ResNet keys of the hybrids.

    Example:

    >>> rules = bit_rules([1])
    >>> rules[0][:2]
    ('embedder.convolution.weight', 'conv_root/kernel')
    >>> rules[3][:2]
    ('encoder.stages.0.layers.0.conv1.weight', 'block1/unit1/conv1/kernel')
    """
    rules = list(torch_linear("embedder.convolution", "conv_root/", "conv"))[:1]
    rules += [("embedder.norm.weight", "gn_root/scale"), ("embedder.norm.bias", "gn_root/bias")]
    for s, units in enumerate(depths):
        for u in range(units):
            source, target = f"encoder.stages.{s}.layers.{u}.", f"block{s + 1}/unit{u + 1}/"
            for c in (1, 2, 3):
                rules.append((f"{source}conv{c}.weight", f"{target}conv{c}/kernel", "conv"))
                rules += [(f"{source}norm{c}.weight", f"{target}gn{c}/scale"),
                          (f"{source}norm{c}.bias", f"{target}gn{c}/bias")]
            rules.append((f"{source}downsample.conv.weight", f"{target}conv_proj/kernel", "conv"))
            rules += [(f"{source}downsample.norm.weight", f"{target}gn_proj/scale"),
                      (f"{source}downsample.norm.bias", f"{target}gn_proj/bias")]
    return tuple(rules)
