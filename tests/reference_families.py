"""NumPy forward passes of the 2025-26 ViT families, for tests.

Written from the equations of the sources (timm's `eva.py`,
`pos_embed_sincos.py`, `attention.py`, `attention_pool.py`, `mlp.py`;
transformers' `modeling_dinov3_vit.py` and `modeling_aimv2.py`), in
float64, importing neither Keras nor keras_vit: the yardstick for the
rotary tables, the blocks and the timm Hub layouts that cannot be run here
(timm is not importable). The only library call is torch's `interpolate`
for timm's position-table resize (`resample_abs_pos_embed`: bicubic,
antialiased, in float32), the operation timm itself calls.

- Rotary tables: `dinov3_rope` (transformers' and timm's DINOv3),
  `timm_cat_rope` (timm's `RotaryEmbeddingCat`: EVA02, PE, RoPE-ViT axial,
  SBB), `timm_mixed_rope` (RoPE-ViT mixed), `apply_rope` (both layouts),
  `aimv2_sincos` (AIMv2's fixed table, no rotary embedding).
- `eva_forward`: timm's `Eva` on a timm state dict (EVA02, Perception
  Encoder, RoPE-ViT, DINOv3) and timm's `VisionTransformer` for AIMv2
  (RMSNorm, SwiGLU, no biases), driven by a resolved architecture dict.
- `aimv2_attention_pool`: transformers' `Aimv2AttentionPoolingHead`.

Tensors `x` of attention are `(batch, heads, tokens, head_dim)` here, as in
timm and transformers.
"""

import math

import numpy as np

import reference


def silu(x):
    return x / (1.0 + np.exp(-x))


def rms_norm(x, scale, epsilon=1e-6):
    """`x / sqrt(mean(x^2) + eps) * scale` over the last axis (no centring)."""
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + epsilon) * scale


# --- rotary tables -------------------------------------------------------


def dinov3_rope(grid, head_dim, base=100.0, normalize="separate", min_period=None, max_period=None):
    """DINOv3's tables `(h * w, head_dim)`, half layout: patch centres in
    [-1, 1] (row first), angle `2 pi * coordinate / period`, the
    `head_dim / 2` angles tiled twice."""
    h, w = grid
    quarter = head_dim // 4
    denominators = {"separate": (h, w), "max": (max(h, w),) * 2, "min": (min(h, w),) * 2}[normalize]
    ys = (np.arange(h) + 0.5) / denominators[0]
    xs = (np.arange(w) + 0.5) / denominators[1]
    coords = 2.0 * np.stack(np.meshgrid(ys, xs, indexing="ij"), axis=-1).reshape(-1, 2) - 1.0
    if min_period is not None:
        periods = min_period * (max_period / min_period) ** np.linspace(0.0, 1.0, quarter)
    else:
        periods = base ** (2.0 * np.arange(quarter) / (head_dim // 2))
    angles = (2.0 * math.pi * coords[:, :, None] / periods).reshape(len(coords), -1)
    angles = np.tile(angles, 2)
    return np.sin(angles), np.cos(angles)


def timm_cat_rope(grid, head_dim, temperature=10000.0, ref_feat_shape=None, grid_offset=0.0, indexing="ij"):
    """timm's `build_rotary_pos_embed(in_pixels=False)` `(h * w, head_dim)`,
    interleaved: index (plus offset) per axis, rescaled by `ref / grid`,
    bands `temperature ** (-j / (head_dim / 4))`, each angle repeated twice."""
    shape, ref = list(grid), None if ref_feat_shape is None else list(ref_feat_shape)
    if indexing == "xy":
        shape = shape[::-1]
        ref = None if ref is None else ref[::-1]
    quarter = head_dim // 4
    bands = 1.0 / temperature ** (np.arange(quarter) / quarter)
    t = [np.arange(s) + grid_offset for s in shape]
    if ref is not None:
        t = [v / s * r for v, s, r in zip(t, shape, ref)]
    positions = np.stack(np.meshgrid(*t, indexing=indexing), axis=-1)  # (h, w, 2)
    angles = (positions[..., None] * bands).reshape(grid[0] * grid[1], -1)
    return np.repeat(np.sin(angles), 2, axis=-1), np.repeat(np.cos(angles), 2, axis=-1)


def timm_mixed_rope(grid, freqs, indexing="xy"):
    """timm's `RotaryEmbeddingMixed` `(depth, heads, h * w, head_dim)`:
    `t_x * freqs[0] + t_y * freqs[1]`, interleaved."""
    h, w = grid
    shape = (w, h) if indexing == "xy" else (h, w)
    t_x, t_y = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing=indexing)
    t_x, t_y = t_x.reshape(-1), t_y.reshape(-1)
    freqs = np.asarray(freqs, np.float64)
    angles = t_x[:, None] * freqs[0][..., None, :] + t_y[:, None] * freqs[1][..., None, :]
    return np.repeat(np.sin(angles), 2, axis=-1), np.repeat(np.cos(angles), 2, axis=-1)


def rotate(x, half):
    """The signed partner of each channel: `[-x2, x1]` (half) or, pair by
    pair, `[-x1, x0, -x3, x2, ...]` (interleaved)."""
    if half:
        first, second = np.split(x, 2, axis=-1)
        return np.concatenate([-second, first], axis=-1)
    out = np.empty_like(x)
    out[..., 0::2] = -x[..., 1::2]
    out[..., 1::2] = x[..., 0::2]
    return out


def apply_rope(x, sin, cos, num_prefix_tokens=0, half=True):
    """Rotates the patch tokens of `x` `(batch, heads, tokens, head_dim)`."""
    prefix, patches = x[..., :num_prefix_tokens, :], x[..., num_prefix_tokens:, :]
    return np.concatenate([prefix, patches * cos + rotate(patches, half) * sin], axis=-2)


def aimv2_sincos(grid, dim, temperature=10000.0):
    """AIMv2's fixed table `(h * w, dim)`: `[sin x | cos x | sin y | cos y]`,
    frequencies `temperature ** (-j / (dim / 4))`."""
    h, w = grid
    omega = 1.0 / temperature ** (np.arange(dim // 4) / (dim // 4))
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    y, x = np.outer(rows.reshape(-1), omega), np.outer(cols.reshape(-1), omega)
    return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)


# --- blocks ----------------------------------------------------------------


def _linear(x, s, name):
    return x @ s[name + ".weight"].T + s.get(name + ".bias", 0.0)


def _norm(x, s, name, arch):
    if arch.get("norm", "layer") == "rms":
        return rms_norm(x, s[name + ".weight"], arch["eps"])
    return reference.layer_norm(x, s[name + ".weight"], s[name + ".bias"], arch["eps"])


def softmax_attention(q, k, v):
    """`softmax(q k^T / sqrt(d)) v` on `(batch, heads, tokens, d)`."""
    logits = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    return (probs / probs.sum(-1, keepdims=True)) @ v


def _split_heads(t, heads):
    b, n, d = t.shape
    return t.reshape(b, n, heads, d // heads).transpose(0, 2, 1, 3)


def _qkv(y, s, b):
    """Queries, keys, values from timm's fused `qkv` (bias `qkv.bias`, or
    EVA's `q_bias`/`v_bias` with a zero key bias) or split projections."""
    if b + "qkv.weight" in s:
        bias = s.get(b + "qkv.bias")
        if bias is None and b + "q_bias" in s:
            bias = np.concatenate([s[b + "q_bias"], np.zeros_like(s[b + "q_bias"]), s[b + "v_bias"]])
        qkv = y @ s[b + "qkv.weight"].T + (0.0 if bias is None else bias)
        return np.split(qkv, 3, axis=-1)
    return [_linear(y, s, b + f"{p}_proj") for p in ("q", "k", "v")]


def eva_attention(y, s, b, arch, rope):
    """timm's `EvaAttention` / `AttentionRope` (and `Attention`): rotary
    tables `rope = (sin, cos)` on the patch tokens, inner norm `attn.norm`."""
    heads = arch["num_heads"]
    q, k, v = (_split_heads(t, heads) for t in _qkv(y, s, b + "attn."))
    if rope is not None:
        half, prefix = arch["rope_rotate_half"], arch["num_prefix_tokens"]
        q, k = (apply_rope(t, rope[0], rope[1], prefix, half) for t in (q, k))
    out = softmax_attention(q, k, v).transpose(0, 2, 1, 3).reshape(y.shape)
    if b + "attn.norm.weight" in s:
        out = _norm(out, s, b + "attn.norm", arch)
    return _linear(out, s, b + "attn.proj")


def eva_mlp(y, s, b, arch):
    """Plain GELU MLP, timm's packed `GluMlp` (SiLU on the first half) or
    split `SwiGLU` (`fc1_g`, `fc1_x`), each with an optional inner norm."""
    m = b + "mlp."
    if m + "fc1_g.weight" in s:
        h = silu(_linear(y, s, m + "fc1_g")) * _linear(y, s, m + "fc1_x")
    elif s[m + "fc1.weight"].shape[0] == 2 * s[m + "fc2.weight"].shape[1]:
        gate, up = np.split(_linear(y, s, m + "fc1"), 2, axis=-1)
        h = silu(gate) * up
    else:
        h = reference.gelu(_linear(y, s, m + "fc1"), approximate=False)
    if m + "norm.weight" in s:
        h = _norm(h, s, m + "norm", arch)
    return _linear(h, s, m + "fc2")


def attention_pool_latent(x, s, arch, p="attn_pool."):
    """timm's `AttentionPoolLatent` (the MAP head): a learned query attends
    to every token, then `x + mlp(norm(x))`; the first latent."""
    heads = arch["attn_pool_num_heads"]
    latent = np.broadcast_to(s[p + "latent"], (x.shape[0],) + s[p + "latent"].shape[1:])
    q = _split_heads(_linear(latent, s, p + "q"), heads)
    k, v = (_split_heads(t, heads) for t in np.split(_linear(x, s, p + "kv"), 2, axis=-1))
    out = softmax_attention(q, k, v).transpose(0, 2, 1, 3).reshape(latent.shape)
    out = _linear(out, s, p + "proj")
    hidden = reference.gelu(_linear(_norm(out, s, p + "norm", arch), s, p + "mlp.fc1"), approximate=False)
    return (out + _linear(hidden, s, p + "mlp.fc2"))[:, 0]


def aimv2_attention_pool(x, s, heads, p="head."):
    """transformers' `Aimv2AttentionPoolingHead`: the learned `cls_token`
    (not projected) queries keys and values of every token; `output_proj`."""
    query = np.broadcast_to(s[p + "cls_token"], (x.shape[0], 1, x.shape[-1]))
    q = _split_heads(query, heads)
    k, v = (_split_heads(_linear(x, s, p + name), heads) for name in ("k_proj", "v_proj"))
    out = softmax_attention(q, k, v).transpose(0, 2, 1, 3).reshape(x.shape[0], -1)
    return _linear(out, s, p + "output_proj")


# --- timm's Eva / VisionTransformer ----------------------------------------


def timm_resample_pos_embed(pos, new_grid, old_grid, num_prefix_tokens):
    """timm's `resample_abs_pos_embed`: the patch rows resized with torch's
    antialiased bicubic `interpolate` in float32, prefix rows kept."""
    import torch

    if tuple(new_grid) == tuple(old_grid):
        return pos
    prefix, rows = pos[:, :num_prefix_tokens], pos[:, num_prefix_tokens:]
    grid = torch.from_numpy(rows.reshape(1, *old_grid, -1).astype(np.float32)).permute(0, 3, 1, 2)
    grid = torch.nn.functional.interpolate(grid, size=tuple(new_grid), mode="bicubic", antialias=True)
    rows = grid.permute(0, 2, 3, 1).reshape(1, -1, pos.shape[-1]).numpy().astype(np.float64)
    return np.concatenate([prefix, rows], axis=1)


def _rope_tables(arch, grid, s):
    kind = arch.get("rope")
    head_dim = arch["embed_dim"] // arch["num_heads"]
    if kind == "dinov3":
        return dinov3_rope(grid, head_dim, arch["rope_temperature"])
    if kind == "cat":
        return timm_cat_rope(grid, head_dim, arch["rope_temperature"], arch.get("ref_feat_shape"),
                             arch.get("rope_grid_offset", 0.0), arch["rope_grid_indexing"])
    if kind == "mixed":
        return timm_mixed_rope(grid, s["rope.freqs"], arch["rope_grid_indexing"])
    return None


def _embed(s, images, arch):
    """Patch embedding, prefix tokens and the (resized) position table."""
    w = s["patch_embed.proj.weight"]
    x = reference.embed_patches(images, w.transpose(2, 3, 1, 0), s.get("patch_embed.proj.bias", 0.0))
    grid = (images.shape[1] // w.shape[2], images.shape[2] // w.shape[3])
    if "patch_embed.norm.weight" in s:
        x = _norm(x, s, "patch_embed.norm", arch)
    prefix = [s[k] for k in ("cls_token", "reg_token") if k in s]
    prefix = [np.broadcast_to(t, (x.shape[0],) + t.shape[1:]) for t in prefix]
    pos = s.get("pos_embed")
    with_prefix = 0 if arch.get("no_embed_class") else arch["num_prefix_tokens"]
    if pos is not None:
        pos = timm_resample_pos_embed(pos, grid, arch["pos_grid"], with_prefix)
    if pos is not None and not with_prefix:
        x = x + pos
    x = np.concatenate(prefix + [x], axis=1)
    if pos is not None and with_prefix:
        x = x + pos
    return x, grid


def eva_forward(state, images, arch):
    """timm's forward (`forward_features`, `forward_head`) in float64.

    Args:
        state: a timm state dict (NumPy arrays).
        images: `(batch, H, W, C)`, preprocessed.
        arch: the resolved architecture (`families_2025.resolve_timm`):
            `num_heads`, `embed_dim`, `eps`, `norm` ("layer"/"rms"),
            `num_prefix_tokens`, `no_embed_class`, `pos_grid`, `rope`
            (None, "dinov3", "cat", "mixed") and its settings,
            `rope_rotate_half`, `global_pool`, `attn_pool_num_heads`.

    Returns:
        A dict: `tokens` (after the final norm, before pooling), `pooled`
        (after `fc_norm`, before the head) and `logits` (or None).
    """
    s = {k: np.asarray(v, np.float64) for k, v in state.items()}
    x, grid = _embed(s, np.asarray(images, np.float64), arch)
    rope = _rope_tables(arch, grid, s)
    if "norm_pre.weight" in s:
        x = _norm(x, s, "norm_pre", arch)
    blocks = sorted({int(k.split(".")[1]) for k in s if k.startswith("blocks.")})
    for i in blocks:
        b = f"blocks.{i}."
        table = None if rope is None else (rope if arch["rope"] != "mixed" else (rope[0][i], rope[1][i]))
        gamma1 = s.get(b + "gamma_1", s.get(b + "ls1.gamma", 1.0))
        gamma2 = s.get(b + "gamma_2", s.get(b + "ls2.gamma", 1.0))
        x = x + gamma1 * eva_attention(_norm(x, s, b + "norm1", arch), s, b, arch, table)
        x = x + gamma2 * eva_mlp(_norm(x, s, b + "norm2", arch), s, b, arch)
    if "norm.weight" in s:
        x = _norm(x, s, "norm", arch)
    pool = arch["global_pool"]
    if pool == "map":
        pooled = attention_pool_latent(x, s, arch)
    elif pool == "avg":
        pooled = x[:, arch["num_prefix_tokens"]:].mean(axis=1)
    else:
        pooled = x[:, 0]
    if "fc_norm.weight" in s:
        pooled = _norm(pooled, s, "fc_norm", arch)
    logits = _linear(pooled, s, "head") if "head.weight" in s else None
    return {"tokens": x, "pooled": pooled, "logits": logits}
