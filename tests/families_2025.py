"""Reference checkpoints of the 2025-26 ViT families, for the loader tests.

transformers families: a tiny random model made by transformers itself and
saved with `save_pretrained` (`save_dinov3`, `save_aimv2`, `save_siglip2`),
every tensor moved off its initial value (`hub_dirs.randomise_torch`).
transformers has no DINOv3 classification head (only `DINOv3ViTModel` and
`DINOv3ViTBackbone`), no Perception Encoder vision model (its PE models
wrap timm) and no EVA02 or RoPE-ViT.

timm families (timm cannot be imported here): a random state dict in the
key names and shapes timm's `Eva` / `VisionTransformer` hold for the
architecture (`random_timm_state`), written as a timm Hub directory with
`config.json` (`architecture`, `model_args` with the tiny sizes,
`pretrained_cfg`) by `write_timm_family`; the expected outputs come from
`reference_families.eva_forward` with the architecture resolved by
`resolve_timm` from `TIMM_ARCHITECTURES` (timm's registered arguments,
read from `timm/models/eva.py` and `vision_transformer.py`) and the
`model_args`. Two timm layouts are also made from a transformers model
(`transformers_dinov3_to_timm`, `transformers_aimv2_to_timm`), which
checks the NumPy reference against transformers.
"""

import math

import numpy as np

from hub_dirs import randomise_torch, write_timm_hub

# --- transformers -------------------------------------------------------------

DINOV3_TINY = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
    image_size=16, patch_size=4, num_register_tokens=2, layerscale_value=0.5,
)
AIMV2_TINY = dict(
    hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
    image_size=16, patch_size=4,
)
SIGLIP2_TINY = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
    patch_size=4, num_patches=16,
)


def _save(model, directory, seed):
    randomise_torch(model, seed)
    model.save_pretrained(directory)
    return model


def save_dinov3(directory, seed=0, backbone=False, **changes):
    """A random `DINOv3ViTModel` (or `DINOv3ViTBackbone`) saved to `directory`.

    Returns:
        The torch model, in eval mode.
    """
    from transformers import DINOv3ViTBackbone, DINOv3ViTConfig, DINOv3ViTModel

    config = DINOv3ViTConfig(**dict(DINOV3_TINY, **changes))
    model = (DINOv3ViTBackbone if backbone else DINOv3ViTModel)(config)
    return _save(model, directory, seed)


def save_aimv2(directory, seed=0, **changes):
    """A random `Aimv2VisionModel` (attention-pool head by default;
    `is_native=True` for the fixed sin-cos table) saved to `directory`."""
    from transformers import Aimv2VisionConfig, Aimv2VisionModel

    return _save(Aimv2VisionModel(Aimv2VisionConfig(**dict(AIMV2_TINY, **changes))), directory, seed)


def save_siglip2(directory, seed=0, max_num_patches=16, **changes):
    """A random `Siglip2VisionModel` (NaFlex: a `num_patches` position table
    resized per image) and its PIL image processor saved to `directory`."""
    from transformers import Siglip2VisionConfig, Siglip2VisionModel
    from transformers.models.siglip2.image_processing_pil_siglip2 import Siglip2ImageProcessorPil

    config = Siglip2VisionConfig(**dict(SIGLIP2_TINY, **changes))
    model = _save(Siglip2VisionModel(config), directory, seed)
    Siglip2ImageProcessorPil(patch_size=config.patch_size, max_num_patches=max_num_patches).save_pretrained(directory)
    return model


def run_torch(model, images, **kwargs):
    """transformers' outputs for NHWC float images, as NumPy."""
    import torch

    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(np.asarray(images, np.float32).transpose(0, 3, 1, 2)), **kwargs)


# --- timm --------------------------------------------------------------------

_EVA02 = dict(
    mlp_ratio=4 * 2 / 3, swiglu_mlp=True, use_rot_pos_emb=True, ref_feat_shape=(16, 16),
    qkv_fused=True, global_pool="avg",
)
_PE = dict(
    mlp_ratio=4.0, global_pool="map", attn_type="rope", use_pre_transformer_norm=True,
    use_rot_pos_emb=True, ref_feat_shape=(14, 14), rope_grid_offset=1.0, rope_grid_indexing="xy",
    attn_pool_num_heads=8, attn_pool_mlp_ratio=4.0, eps=1e-5,
)
_ROPE_VIT = dict(
    mlp_ratio=4.0, attn_type="rope", qkv_bias=True, init_values=1e-5, class_token=True,
    global_pool="token", use_abs_pos_emb=False, use_rot_pos_emb=True, rope_grid_indexing="xy",
    rope_temperature=100.0,
)
_DINOV3 = dict(
    qkv_bias=False, init_values=1e-5, rope_type="dinov3", rope_temperature=100.0, rope_rotate_half=True,
    use_rot_pos_emb=True, use_abs_pos_emb=False, num_reg_tokens=4, use_fc_norm=False, eps=1e-5,
)
_AIMV2 = dict(
    class_token=False, fc_norm=False, mlp_ratio=2.75, global_pool="avg", qkv_bias=False, proj_bias=False,
    norm="rms", eps=1e-5, embed_norm=True, swiglu_split=True,
)
# timm's registered arguments of the architectures the fixtures use (eps:
# the LayerNorm's, 1e-6 unless `norm_layer=partial(LayerNorm, eps=1e-5)`).
TIMM_ARCHITECTURES = {
    "eva02_tiny_patch14_224": dict(_EVA02, img_size=224, patch_size=14, embed_dim=192, depth=12, num_heads=3),
    "eva02_base_patch14_448": dict(_EVA02, img_size=448, patch_size=14, embed_dim=768, depth=12, num_heads=12,
                                   qkv_fused=False, scale_mlp=True),
    "eva02_base_patch16_clip_224": dict(_EVA02, img_size=224, patch_size=16, embed_dim=768, depth=12,
                                        num_heads=12, qkv_fused=False, scale_mlp=True, scale_attn_inner=True,
                                        global_pool="token"),
    "vit_pe_core_base_patch16_224": dict(_PE, img_size=224, patch_size=16, embed_dim=768, depth=12,
                                         num_heads=12),
    "vit_base_patch16_rope_224": dict(_ROPE_VIT, img_size=224, patch_size=16, embed_dim=768, depth=12,
                                      num_heads=12, use_fc_norm=False),
    "vit_base_patch16_rope_mixed_224": dict(_ROPE_VIT, img_size=224, patch_size=16, embed_dim=768, depth=12,
                                            num_heads=12, rope_temperature=10.0, rope_mixed_mode=True),
    "vit_base_patch16_rope_ape_224": dict(_ROPE_VIT, img_size=224, patch_size=16, embed_dim=768, depth=12,
                                          num_heads=12, no_embed_class=True, use_abs_pos_emb=True),
    "vit_base_patch16_dinov3": dict(_DINOV3, img_size=224, patch_size=16, embed_dim=768, depth=12,
                                    num_heads=12),
    "vit_base_patch16_dinov3_qkvb": dict(_DINOV3, img_size=224, patch_size=16, embed_dim=768, depth=12,
                                         num_heads=12, qkv_bias=True),
    "aimv2_large_patch14_224": dict(_AIMV2, img_size=224, patch_size=14, embed_dim=1024, depth=24, num_heads=8),
}
# The sizes every tiny timm fixture shares (`model_args` in config.json).
TINY_TIMM = dict(img_size=28, patch_size=7, embed_dim=16, depth=2, num_heads=2)


def resolve_timm(architecture, model_args):
    """timm's arguments for `architecture` with `model_args` over them,
    resolved as `Eva.__init__` / `VisionTransformer.__init__` resolve them
    (norms in use, prefix tokens, rope kind, pooling), for `eva_forward`."""
    a = dict(TIMM_ARCHITECTURES[architecture], **model_args)
    a.setdefault("eps", 1e-6)
    a.setdefault("mlp_ratio", 4.0)
    a["img_size"] = tuple(np.broadcast_to(a["img_size"], 2).tolist())
    a["pos_grid"] = (a["img_size"][0] // a["patch_size"], a["img_size"][1] // a["patch_size"])
    a["num_prefix_tokens"] = int(a.get("class_token", True)) + a.get("num_reg_tokens", 0)
    if a.get("use_rot_pos_emb"):
        a["rope"] = "mixed" if a.get("rope_mixed_mode") else a.get("rope_type", "cat")
    a.setdefault("rope_grid_indexing", "ij")
    a.setdefault("rope_temperature", 10000.0)
    a.setdefault("rope_rotate_half", False)
    a.setdefault("global_pool", "avg")
    fc_norm = a.get("use_fc_norm", a.get("fc_norm"))
    a["fc_norm"] = a["global_pool"] == "avg" if fc_norm is None else fc_norm
    post = a.get("use_post_transformer_norm")
    a["post_norm"] = (not a["fc_norm"]) if post is None else post
    return a


def _normal(rng, shape, scale):
    return (scale * rng.standard_normal(shape)).astype("float32")


def _norm_params(rng, s, name, dim, arch):
    s[name + ".weight"] = 1 + _normal(rng, (dim,), 0.1)
    if arch.get("norm", "layer") == "layer":
        s[name + ".bias"] = _normal(rng, (dim,), 0.1)


def _attention_params(rng, s, b, arch):
    d, bias = arch["embed_dim"], arch.get("qkv_bias", True)
    if arch.get("qkv_fused", True):
        s[b + "qkv.weight"] = _normal(rng, (3 * d, d), d**-0.5)
        # timm's `EvaAttention` keeps `q_bias`, `v_bias` (a zero key bias);
        # `AttentionRope` and `VisionTransformer`'s `Attention` a `qkv` bias.
        eva = arch.get("attn_type", "eva") == "eva" and not arch.get("aimv2")
        if bias and eva:
            s[b + "q_bias"], s[b + "v_bias"] = _normal(rng, (d,), 0.1), _normal(rng, (d,), 0.1)
        elif bias:
            s[b + "qkv.bias"] = _normal(rng, (3 * d,), 0.1)
    else:
        for p in ("q", "k", "v"):
            s[b + f"{p}_proj.weight"] = _normal(rng, (d, d), d**-0.5)
            # EvaAttention's key has no bias; AttentionRope's has.
            if bias and (p != "k" or arch.get("attn_type") == "rope"):
                s[b + f"{p}_proj.bias"] = _normal(rng, (d,), 0.1)
    if arch.get("scale_attn_inner"):
        _norm_params(rng, s, b + "norm", d, arch)
    s[b + "proj.weight"] = _normal(rng, (d, d), d**-0.5)
    if arch.get("proj_bias", True):
        s[b + "proj.bias"] = _normal(rng, (d,), 0.1)


def _mlp_params(rng, s, m, arch):
    d, hidden = arch["embed_dim"], int(arch["embed_dim"] * arch["mlp_ratio"])
    bias = arch.get("proj_bias", True)

    def linear(name, out, inp):
        s[m + name + ".weight"] = _normal(rng, (out, inp), inp**-0.5)
        if bias:
            s[m + name + ".bias"] = _normal(rng, (out,), 0.1)

    split = arch.get("swiglu_split") or (arch.get("swiglu_mlp") and arch.get("scale_mlp"))
    if split:
        linear("fc1_g", hidden, d)
        linear("fc1_x", hidden, d)
    else:
        linear("fc1", 2 * hidden if arch.get("swiglu_mlp") else hidden, d)
    if arch.get("scale_mlp"):
        _norm_params(rng, s, m + "norm", hidden, arch)
    linear("fc2", d, hidden)


def _attn_pool_params(rng, s, arch):
    d = arch["embed_dim"]
    hidden = int(d * arch["attn_pool_mlp_ratio"])
    s["attn_pool.latent"] = _normal(rng, (1, 1, d), 0.5)
    for name, out, inp in (("q", d, d), ("kv", 2 * d, d), ("proj", d, d), ("mlp.fc1", hidden, d),
                           ("mlp.fc2", d, hidden)):
        s[f"attn_pool.{name}.weight"] = _normal(rng, (out, inp), inp**-0.5)
        s[f"attn_pool.{name}.bias"] = _normal(rng, (out,), 0.1)
    _norm_params(rng, s, "attn_pool.norm", d, arch)


def _embedding_params(rng, s, arch):
    d, p = arch["embed_dim"], arch["patch_size"]
    s["patch_embed.proj.weight"] = _normal(rng, (d, 3, p, p), (3 * p * p) ** -0.5)
    if not arch.get("use_pre_transformer_norm"):
        s["patch_embed.proj.bias"] = _normal(rng, (d,), 0.1)
    if arch.get("embed_norm"):
        _norm_params(rng, s, "patch_embed.norm", d, arch)
    if arch.get("class_token", True):
        s["cls_token"] = _normal(rng, (1, 1, d), 0.5)
    if arch.get("num_reg_tokens"):
        s["reg_token"] = _normal(rng, (1, arch["num_reg_tokens"], d), 0.5)
    if arch.get("use_abs_pos_emb", True):
        rows = math.prod(arch["pos_grid"]) + (0 if arch.get("no_embed_class") else arch["num_prefix_tokens"])
        s["pos_embed"] = _normal(rng, (1, rows, d), 0.5)
    if arch.get("rope") == "mixed":
        heads = arch["num_heads"]
        s["rope.freqs"] = _normal(rng, (2, arch["depth"], heads, d // heads // 2), 1.0)
    if arch.get("use_pre_transformer_norm"):
        _norm_params(rng, s, "norm_pre", d, arch)


def random_timm_state(rng, architecture, model_args=None, num_classes=0):
    """A random state dict in timm's names for `architecture` with
    `model_args` (default `TINY_TIMM`); returns `(state, resolved arch)`."""
    model_args = dict(TINY_TIMM if model_args is None else model_args)
    arch = resolve_timm(architecture, model_args)
    arch["aimv2"] = architecture.startswith("aimv2")
    s = {}
    _embedding_params(rng, s, arch)
    d = arch["embed_dim"]
    for i in range(arch["depth"]):
        b = f"blocks.{i}."
        _norm_params(rng, s, b + "norm1", d, arch)
        _attention_params(rng, s, b + "attn.", arch)
        _norm_params(rng, s, b + "norm2", d, arch)
        _mlp_params(rng, s, b + "mlp.", arch)
        if arch.get("init_values"):
            names = ("ls1.gamma", "ls2.gamma") if arch["aimv2"] else ("gamma_1", "gamma_2")
            for name in names:
                s[b + name] = _normal(rng, (d,), 0.5)
    if arch["post_norm"]:
        _norm_params(rng, s, "norm", d, arch)
    if arch["global_pool"] == "map":
        _attn_pool_params(rng, s, arch)
    if arch["fc_norm"]:
        _norm_params(rng, s, "fc_norm", d, arch)
    if num_classes:
        s["head.weight"] = _normal(rng, (num_classes, d), d**-0.5)
        s["head.bias"] = _normal(rng, (num_classes,), 0.1)
    return s, arch


def write_timm_family(directory, architecture, state, model_args=None, num_classes=0, **pretrained_cfg):
    """A timm Hub directory for `architecture` with tiny `model_args`."""
    model_args = dict(TINY_TIMM if model_args is None else model_args)
    size = np.broadcast_to(model_args.get("img_size", 224), 2).tolist()
    cfg = dict(input_size=[3] + size, crop_pct=1.0, **pretrained_cfg)
    return write_timm_hub(directory, architecture, state, num_classes, pretrained_cfg=cfg,
                          model_args={k: list(v) if isinstance(v, tuple) else v for k, v in model_args.items()})


def transformers_dinov3_to_timm(state, num_heads=None):
    """A transformers `DINOv3ViTModel` state dict -> timm's
    `vit_*_patch16_dinov3_qkvb` keys (fused `qkv` without bias, `q_bias`,
    `v_bias`; the key bias is timm's zero buffer), `gamma_1`/`gamma_2`,
    `reg_token`, `norm`; the pre-training `mask_token` is dropped."""
    e = "embeddings."
    out = {
        "cls_token": state[e + "cls_token"],
        "reg_token": state[e + "register_tokens"],
        "patch_embed.proj.weight": state[e + "patch_embeddings.weight"],
        "patch_embed.proj.bias": state[e + "patch_embeddings.bias"],
        "norm.weight": state["norm.weight"],
        "norm.bias": state["norm.bias"],
    }
    layers = sorted({int(k.split(".")[2]) for k in state if k.startswith("model.layer.")})
    for i in layers:
        t, b = f"blocks.{i}.", f"model.layer.{i}."
        out[t + "attn.qkv.weight"] = np.concatenate(
            [state[b + f"attention.{p}_proj.weight"] for p in ("q", "k", "v")], axis=0)
        out[t + "attn.q_bias"] = state[b + "attention.q_proj.bias"]
        out[t + "attn.v_bias"] = state[b + "attention.v_proj.bias"]
        pairs = {"attention.o_proj": "attn.proj", "norm1": "norm1", "norm2": "norm2",
                 "mlp.up_proj": "mlp.fc1", "mlp.down_proj": "mlp.fc2"}
        for hf, tm in pairs.items():
            for leaf in ("weight", "bias"):
                out[t + f"{tm}.{leaf}"] = state[b + f"{hf}.{leaf}"]
        out[t + "gamma_1"] = state[b + "layer_scale1.lambda1"]
        out[t + "gamma_2"] = state[b + "layer_scale2.lambda1"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def transformers_aimv2_to_timm(state):
    """A transformers `Aimv2VisionModel` state dict (learned position table,
    no biases) -> timm's `aimv2_*` keys: `patch_embed.norm` (the RMSNorm
    after the patch embedding), fused `qkv`, split SwiGLU `fc1_g`/`fc1_x`;
    the attention-pool head has no timm counterpart (timm averages)."""
    e = "embeddings."
    out = {
        "patch_embed.proj.weight": state[e + "patch_embed.weight"],
        "patch_embed.proj.bias": state[e + "patch_embed.bias"],
        "patch_embed.norm.weight": state[e + "rms_norm.weight"],
        "pos_embed": state[e + "position_embedding.weight"][None],
        "norm.weight": state["rms_norm.weight"],
    }
    layers = sorted({int(k.split(".")[2]) for k in state if k.startswith("encoder.layers.")})
    for i in layers:
        t, b = f"blocks.{i}.", f"encoder.layers.{i}."
        out[t + "attn.qkv.weight"] = np.concatenate(
            [state[b + f"attention.{p}_proj.weight"] for p in ("q", "k", "v")], axis=0)
        pairs = {"attention.out_proj": "attn.proj", "rms_norm1": "norm1", "rms_norm2": "norm2",
                 "ffn.gate_proj": "mlp.fc1_g", "ffn.up_proj": "mlp.fc1_x", "ffn.down_proj": "mlp.fc2"}
        for hf, tm in pairs.items():
            out[t + f"{tm}.weight"] = state[b + f"{hf}.weight"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def torch_state(model):
    """A torch model's state dict as float32 NumPy arrays."""
    return {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}


def siglip2_forward(model, batch):
    """transformers' `Siglip2VisionModel` on a NaFlex dict
    (`keras_vit.preprocessing.naflex.naflex_inputs`): `(pooled, last_hidden_state)`."""
    import torch

    valid = np.asarray(batch["patch_valid"])
    coords = np.asarray(batch["patch_coords"])
    shapes = np.where(valid[..., None], coords, -1).max(axis=1) + 1
    with torch.no_grad():
        out = model(
            pixel_values=torch.from_numpy(np.asarray(batch["patches"], np.float32)),
            pixel_attention_mask=torch.from_numpy(valid.astype(np.int32)),
            spatial_shapes=torch.from_numpy(shapes.astype(np.int64)),
        )
    return out.pooler_output.numpy(), out.last_hidden_state.numpy()
