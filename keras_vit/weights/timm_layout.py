"""timm ViT state-dict names and layouts -> the canonical checkpoint layout.

timm keeps PyTorch conventions: `Linear` weights are `(out, in)`, the patch
embedding is an OIHW convolution, and the attention's query, key and value
projections are fused into one `qkv` Linear whose output splits as
`(3, heads, head_dim)`. The rules below rename each key and name the
transform that brings its tensor to the official layout.

Prefix tokens: timm orders them class token, distillation token (DeiT) or
register tokens (`reg_token`, `(1, R, D)`), then the patches. Its position
embedding has a row for each prefix token, or for none of them
(`no_embed_class=True`: added to the patches before the prefix tokens are
prepended). keras_vit gives the class and distillation tokens a row and the
register tokens none; `fold_prefix_rows` converts exactly (a zero row adds
nothing; a register token's row is a constant that folds into the token).
"""

import re

import numpy as np

_BLOCK = r"Transformer/encoderblock_\1"

# (timm key pattern, canonical key template, transform)
RULES = (
    (r"cls_token", "cls", None),
    (r"dist_token", "dist", None),
    (r"reg_token", "reg", None),
    (r"pos_embed", "Transformer/posembed_input/pos_embedding", None),
    (r"patch_embed\.proj\.weight", "embedding/kernel", "conv"),
    (r"patch_embed\.proj\.bias", "embedding/bias", None),
    (r"blocks\.(\d+)\.norm1\.weight", _BLOCK + "/LayerNorm_0/scale", None),
    (r"blocks\.(\d+)\.norm1\.bias", _BLOCK + "/LayerNorm_0/bias", None),
    (r"blocks\.(\d+)\.attn\.qkv\.weight", _BLOCK + "/MultiHeadDotProductAttention_1/{}/kernel", "qkv_kernel"),
    (r"blocks\.(\d+)\.attn\.qkv\.bias", _BLOCK + "/MultiHeadDotProductAttention_1/{}/bias", "qkv_bias"),
    (r"blocks\.(\d+)\.attn\.proj\.weight", _BLOCK + "/MultiHeadDotProductAttention_1/out/kernel", "out_kernel"),
    (r"blocks\.(\d+)\.attn\.proj\.bias", _BLOCK + "/MultiHeadDotProductAttention_1/out/bias", None),
    (r"blocks\.(\d+)\.norm2\.weight", _BLOCK + "/LayerNorm_2/scale", None),
    (r"blocks\.(\d+)\.norm2\.bias", _BLOCK + "/LayerNorm_2/bias", None),
    (r"blocks\.(\d+)\.mlp\.fc1\.weight", _BLOCK + "/MlpBlock_3/Dense_0/kernel", "linear"),
    (r"blocks\.(\d+)\.mlp\.fc1\.bias", _BLOCK + "/MlpBlock_3/Dense_0/bias", None),
    (r"blocks\.(\d+)\.mlp\.fc2\.weight", _BLOCK + "/MlpBlock_3/Dense_1/kernel", "linear"),
    (r"blocks\.(\d+)\.mlp\.fc2\.bias", _BLOCK + "/MlpBlock_3/Dense_1/bias", None),
    (r"blocks\.(\d+)\.ls1\.gamma", _BLOCK + "/attention_scale", None),
    (r"blocks\.(\d+)\.ls2\.gamma", _BLOCK + "/mlp_scale", None),
    (r"norm\.weight", "Transformer/encoder_norm/scale", None),
    (r"norm\.bias", "Transformer/encoder_norm/bias", None),
    (r"pre_logits\.fc\.weight", "pre_logits/kernel", "linear"),
    (r"pre_logits\.fc\.bias", "pre_logits/bias", None),
    (r"fc_norm\.weight", "fc_norm/scale", None),
    (r"fc_norm\.bias", "fc_norm/bias", None),
    (r"head\.weight", "head/kernel", "linear"),
    (r"head\.bias", "head/bias", None),
    (r"head_dist\.weight", "head_dist/kernel", "linear"),
    (r"head_dist\.bias", "head_dist/bias", None),
)

_COMPILED = tuple((re.compile(p + "$"), t, f) for p, t, f in RULES)
_QKV = ("query", "key", "value")


def _check_heads(name, array, num_heads, key):
    if name == "qkv_bias":
        ok = array.ndim == 1 and array.shape[0] % (3 * num_heads) == 0
    else:
        rows = 3 * array.shape[-1] if name == "qkv_kernel" else array.shape[-1]
        ok = (
            array.ndim == 2
            and array.shape[0] == rows
            and array.shape[-1] % num_heads == 0
        )
    if not ok:
        raise ValueError(
            f"timm tensor {key!r} of shape {array.shape} does not split into "
            f"{num_heads} attention heads."
        )


def _transform(name, array, num_heads, key):
    """Returns `[(template argument, array)]` for one timm tensor."""
    if name is None:
        return [(None, array)]
    if name == "conv":  # (D, C, ph, pw) -> (ph, pw, C, D)
        return [(None, array.transpose(2, 3, 1, 0))]
    if name == "linear":  # (out, in) -> (in, out)
        return [(None, array.T)]
    _check_heads(name, array, num_heads, key)
    if name == "qkv_kernel":  # (3D, D) -> 3 x (D, heads, head_dim)
        dim = array.shape[1]
        parts = array.T.reshape(dim, 3, num_heads, -1)
        return [(n, parts[:, i]) for i, n in enumerate(_QKV)]
    if name == "qkv_bias":  # (3D,) -> 3 x (heads, head_dim)
        parts = array.reshape(3, num_heads, -1)
        return [(n, parts[i]) for i, n in enumerate(_QKV)]
    if name == "out_kernel":  # (D, D) -> (heads, head_dim, D)
        return [(None, array.T.reshape(num_heads, -1, array.shape[0]))]
    raise KeyError(name)


def to_canonical(state, num_heads):
    """Converts a timm ViT state dict to canonical keys and layouts.

    Keys no rule knows (e.g. a distillation token) are kept under their timm
    name, so that strict loading reports them as unexpected.

    Args:
        state: `{timm key: NumPy array}`.
        num_heads: int, number of attention heads.

    Returns:
        `{canonical key: NumPy array}`.

    Example:

    >>> import numpy as np
    >>> qkv = np.zeros((3 * 8, 8), "float32")
    >>> out = to_canonical({"blocks.0.attn.qkv.weight": qkv}, num_heads=2)
    >>> out["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/key/kernel"].shape
    (8, 2, 4)
    """
    out = {}
    for key, array in state.items():
        for pattern, template, transform in _COMPILED:
            match = pattern.match(key)
            if match:
                target = match.expand(template.replace("{}", "{slot}"))
                for slot, value in _transform(transform, array, num_heads, key):
                    out[target.replace("{slot}", slot) if slot else target] = value
                break
        else:
            out[key] = array
    return out


def fold_prefix_rows(params, no_embed_class):
    """Brings the position rows of timm's prefix tokens to keras_vit's layout.

    Args:
        params: canonical dict from `to_canonical` (modified in place).
        no_embed_class: bool, timm's flag: the position embedding has no
            rows for the prefix tokens.

    Returns:
        `params`.

    Example:

    >>> import numpy as np
    >>> p = {"Transformer/posembed_input/pos_embedding": np.ones((1, 4, 2)),
    ...      "reg": np.zeros((1, 2, 2))}
    >>> p = fold_prefix_rows(p, no_embed_class=False)
    >>> p["Transformer/posembed_input/pos_embedding"].shape, p["reg"].tolist()
    ((1, 2, 2), [[[1.0, 1.0], [1.0, 1.0]]])
    """
    key = "Transformer/posembed_input/pos_embedding"
    if key not in params:
        return params
    posemb = params[key]
    rows = int("cls" in params) + int("dist" in params)
    registers = params["reg"].shape[1] if "reg" in params else 0
    if no_embed_class:
        zeros = np.zeros(posemb.shape[:1] + (rows,) + posemb.shape[2:], posemb.dtype)
        params[key] = np.concatenate([zeros, posemb], axis=1)
    elif registers:
        # timm: [class][registers][patches] rows; registers keep no row.
        params["reg"] = params["reg"] + posemb[:, rows : rows + registers]
        params[key] = np.concatenate([posemb[:, :rows], posemb[:, rows + registers :]], axis=1)
    return params


def describe(shapes):
    """`(position rows incl. class token, classes)` from timm tensor shapes."""
    pos = shapes.get("pos_embed")
    head = shapes.get("head.bias")
    return (pos[1] if pos else None), (head[0] if head else None)
