"""Checkpoint directories as other libraries write them, and a NumPy forward
pass in timm's own layout, written independently of keras_vit's readers.

- `offline_hub`: a fixture, an empty `huggingface_hub` cache with the Hub
  switched off.
- `populate_hf_cache`: a `huggingface_hub` cache (`models--org--name/`
  with `blobs/`, `snapshots/<commit>/` links and `refs/<revision>`), the
  layout the library itself writes, for offline `hf://` tests.
- `random_timm_state` / `write_timm_hub`: timm Hub directories (timm key
  names: fused `qkv`, `(out, in)` Linear weights, OIHW patch convolution,
  `cls_token`, `dist_token`, `reg_token`, `fc_norm`, `head_dist`, LayerScale
  `ls1.gamma`/`ls2.gamma`).
- `timm_forward`: timm's ViT forward pass (token order, position rows with
  or without `no_embed_class`, average pooling over the patches, `fc_norm`,
  the averaged DeiT heads) in float64 NumPy.
- `timm_to_transformers`: a timm ViT/DeiT state dict renamed to the keys
  transformers' `save_pretrained` writes (q, k, v split from `qkv`).
"""

import hashlib
import json
import os

import keras
import numpy as np
import pytest

import reference


@pytest.fixture(autouse=True)
def light_keras_state():
    """Replaces conftest's `_fresh_keras_state` in the preset tests (import
    it as that name): the tiny models there share no state, and their
    modules keep the models and reference directories they build for every
    test (`functools.lru_cache`), which `clear_session` would leave holding
    TensorFlow resources it freed."""
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty huggingface_hub cache with the Hub switched off: every
    download fails (import it into a test module to use it)."""
    constants = pytest.importorskip("huggingface_hub").constants
    cache = tmp_path / "hf_cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return str(cache)


def randomise_torch(model, seed, scale=0.2):
    """Moves every floating-point tensor of a torch model off its initial
    value (LayerNorms, tokens, LayerScale, probes too), so that a mapping
    that drops or swaps one shows; returns the model in eval mode."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.dtype.is_floating_point:
                tensor.add_(scale * torch.randn(tensor.shape, generator=generator))
    return model.eval()


def populate_hf_cache(cache, repo_id, source_dir, revision="main", commit="0123456789abcdef0123456789abcdef01234567"):
    """Puts the files of `source_dir` into a huggingface_hub cache as `repo_id`."""
    from huggingface_hub.file_download import repo_folder_name

    repo = os.path.join(cache, repo_folder_name(repo_id=repo_id, repo_type="model"))
    snapshot = os.path.join(repo, "snapshots", commit)
    os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
    os.makedirs(snapshot, exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    for name in sorted(os.listdir(source_dir)):
        with open(os.path.join(source_dir, name), "rb") as f:
            data = f.read()
        blob = os.path.join(repo, "blobs", hashlib.sha256(data).hexdigest())
        with open(blob, "wb") as f:
            f.write(data)
        os.symlink(os.path.relpath(blob, snapshot), os.path.join(snapshot, name))
    with open(os.path.join(repo, "refs", revision), "w") as f:
        f.write(commit)
    return snapshot


def random_timm_state(
    rng, image_size=32, patch=8, dim=16, depth=2, heads=2, mlp=32, classes=5,
    class_token=True, distilled=False, reg_tokens=0, no_embed_class=False,
    fc_norm=False, qkv_bias=True, layer_scale=False,
):
    """A random ViT state dict in timm's names and layouts (float32)."""
    def normal(shape, scale):
        return (scale * rng.standard_normal(shape)).astype("float32")

    prefix = int(class_token) + int(distilled) + reg_tokens
    patches = (image_size // patch) ** 2
    s = {
        "patch_embed.proj.weight": normal((dim, 3, patch, patch), (3 * patch * patch) ** -0.5),
        "patch_embed.proj.bias": normal((dim,), 0.1),
        "pos_embed": normal((1, patches + (0 if no_embed_class else prefix), dim), 0.5),
    }
    if class_token:
        s["cls_token"] = normal((1, 1, dim), 0.5)
    if distilled:
        s["dist_token"] = normal((1, 1, dim), 0.5)
    if reg_tokens:
        s["reg_token"] = normal((1, reg_tokens, dim), 0.5)
    for i in range(depth):
        b = f"blocks.{i}."
        for n in ("norm1", "norm2"):
            s[b + n + ".weight"] = 1 + normal((dim,), 0.1)
            s[b + n + ".bias"] = normal((dim,), 0.1)
        s[b + "attn.qkv.weight"] = normal((3 * dim, dim), dim**-0.5)
        if qkv_bias:
            s[b + "attn.qkv.bias"] = normal((3 * dim,), 0.1)
        s[b + "attn.proj.weight"] = normal((dim, dim), dim**-0.5)
        s[b + "attn.proj.bias"] = normal((dim,), 0.1)
        s[b + "mlp.fc1.weight"] = normal((mlp, dim), dim**-0.5)
        s[b + "mlp.fc1.bias"] = normal((mlp,), 0.1)
        s[b + "mlp.fc2.weight"] = normal((dim, mlp), mlp**-0.5)
        s[b + "mlp.fc2.bias"] = normal((dim,), 0.1)
        if layer_scale:
            s[b + "ls1.gamma"] = normal((dim,), 0.5)
            s[b + "ls2.gamma"] = normal((dim,), 0.5)
    norm = "fc_norm" if fc_norm else "norm"
    s[norm + ".weight"] = 1 + normal((dim,), 0.1)
    s[norm + ".bias"] = normal((dim,), 0.1)
    for head in ("head", "head_dist") if distilled else ("head",):
        s[head + ".weight"] = normal((classes, dim), dim**-0.5)
        s[head + ".bias"] = normal((classes,), 0.1)
    return s


def write_timm_hub(directory, architecture, state, num_classes, pretrained_cfg=None, **top):
    """A timm Hub directory: `config.json` and `model.safetensors`."""
    from safetensors.numpy import save_file

    os.makedirs(directory, exist_ok=True)
    cfg = dict(
        input_size=[3, 224, 224], interpolation="bicubic", crop_pct=0.9, crop_mode="center",
        mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5], num_classes=num_classes,
        first_conv="patch_embed.proj", classifier="head",
    )
    cfg.update(pretrained_cfg or {})
    config = dict(architecture=architecture, num_classes=num_classes, pretrained_cfg=cfg, **top)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    save_file(state, os.path.join(directory, "model.safetensors"))
    return str(directory)


def _attention(x, s, b, heads):
    n, t, d = x.shape
    qkv = x @ s[b + "attn.qkv.weight"].T + s.get(b + "attn.qkv.bias", 0.0)
    qkv = qkv.reshape(n, t, 3, heads, d // heads).transpose(2, 0, 3, 1, 4)
    q, k, v = qkv
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d // heads)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    out = (probs @ v).transpose(0, 2, 1, 3).reshape(n, t, d)
    return out @ s[b + "attn.proj.weight"].T + s[b + "attn.proj.bias"]


def timm_forward(state, images, heads, no_embed_class=False, pool="token", eps=1e-6):
    """Logits of a timm ViT state dict for NHWC images, as timm computes them."""
    s = {k: np.asarray(v, np.float64) for k, v in state.items()}
    x = np.asarray(images, np.float64).transpose(0, 3, 1, 2)  # NCHW
    w = s["patch_embed.proj.weight"]
    d, _, ph, pw = w.shape
    n, c, h, wd = x.shape
    x = x.reshape(n, c, h // ph, ph, wd // pw, pw).transpose(0, 2, 4, 1, 3, 5)
    x = x.reshape(n, -1, c * ph * pw) @ w.reshape(d, -1).T + s["patch_embed.proj.bias"]
    prefix = [s[k] for k in ("cls_token", "dist_token", "reg_token") if k in s]
    prefix = [np.broadcast_to(p, (n,) + p.shape[1:]) for p in prefix]
    if no_embed_class:
        x = np.concatenate(prefix + [x + s["pos_embed"]], axis=1)
    else:
        x = np.concatenate(prefix + [x], axis=1) + s["pos_embed"]
    blocks = sorted({int(k.split(".")[1]) for k in s if k.startswith("blocks.")})
    for i in blocks:
        b = f"blocks.{i}."
        y = reference.layer_norm(x, s[b + "norm1.weight"], s[b + "norm1.bias"], eps)
        x = x + _attention(y, s, b, heads) * s.get(b + "ls1.gamma", 1.0)
        y = reference.layer_norm(x, s[b + "norm2.weight"], s[b + "norm2.bias"], eps)
        y = reference.gelu(y @ s[b + "mlp.fc1.weight"].T + s[b + "mlp.fc1.bias"], approximate=False)
        x = x + (y @ s[b + "mlp.fc2.weight"].T + s[b + "mlp.fc2.bias"]) * s.get(b + "ls2.gamma", 1.0)
    if "norm.weight" in s:
        x = reference.layer_norm(x, s["norm.weight"], s["norm.bias"], eps)
    num_prefix = sum(p.shape[1] for p in prefix)
    if "dist_token" in s:
        first = x[:, 0] @ s["head.weight"].T + s["head.bias"]
        second = x[:, 1] @ s["head_dist.weight"].T + s["head_dist.bias"]
        return (first + second) / 2
    x = x[:, 0] if pool == "token" else x[:, num_prefix:].mean(axis=1)
    if "fc_norm.weight" in s:
        x = reference.layer_norm(x, s["fc_norm.weight"], s["fc_norm.bias"], eps)
    return x @ s["head.weight"].T + s["head.bias"]


def timm_to_transformers(state, distilled=False):
    """timm ViT/DeiT keys -> the keys transformers' `save_pretrained` writes."""
    body = "deit." if distilled else "vit."
    out = {
        body + "embeddings.cls_token": state["cls_token"],
        body + "embeddings.position_embeddings": state["pos_embed"],
        body + "embeddings.patch_embeddings.projection.weight": state["patch_embed.proj.weight"],
        body + "embeddings.patch_embeddings.projection.bias": state["patch_embed.proj.bias"],
        body + "layernorm.weight": state["norm.weight"],
        body + "layernorm.bias": state["norm.bias"],
    }
    if distilled:
        out[body + "embeddings.distillation_token"] = state["dist_token"]
        out["cls_classifier.weight"], out["cls_classifier.bias"] = state["head.weight"], state["head.bias"]
        out["distillation_classifier.weight"] = state["head_dist.weight"]
        out["distillation_classifier.bias"] = state["head_dist.bias"]
    else:
        out["classifier.weight"], out["classifier.bias"] = state["head.weight"], state["head.bias"]
    blocks = sorted({int(k.split(".")[1]) for k in state if k.startswith("blocks.")})
    for i in blocks:
        t, b = f"blocks.{i}.", f"{body}encoder.layer.{i}."
        q, k, v = np.split(state[t + "attn.qkv.weight"], 3, axis=0)
        qb, kb, vb = np.split(state[t + "attn.qkv.bias"], 3, axis=0)
        for name, w_, b_ in (("query", q, qb), ("key", k, kb), ("value", v, vb)):
            out[b + f"attention.attention.{name}.weight"] = w_
            out[b + f"attention.attention.{name}.bias"] = b_
        pairs = {
            "attention.output.dense": "attn.proj", "intermediate.dense": "mlp.fc1",
            "output.dense": "mlp.fc2", "layernorm_before": "norm1", "layernorm_after": "norm2",
        }
        for hf, tm in pairs.items():
            out[b + hf + ".weight"] = state[t + tm + ".weight"]
            out[b + hf + ".bias"] = state[t + tm + ".bias"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def _vision_body(state):
    """The CLIP/SigLIP tower's tensors without the `vision_model.` prefix
    (transformers writes it for some classes and versions, not others)."""
    prefix = "vision_model."
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state.items()}


def _transformers_blocks_to_timm(state, body):
    """CLIP/SigLIP encoder layers (transformers names) -> timm `blocks.{i}.`."""
    out = {}
    start = body + "encoder.layers."
    layers = sorted({int(k[len(start):].split(".")[0]) for k in state if k.startswith(start)})
    for i in layers:
        t, b = f"blocks.{i}.", f"{body}encoder.layers.{i}."
        for leaf in ("weight", "bias"):
            # timm fuses the three projections into one Linear, rows q, k, v.
            out[t + f"attn.qkv.{leaf}"] = np.concatenate(
                [state[b + f"self_attn.{p}_proj.{leaf}"] for p in ("q", "k", "v")], axis=0
            )
            pairs = {"self_attn.out_proj": "attn.proj", "layer_norm1": "norm1",
                     "layer_norm2": "norm2", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
            for hf, tm in pairs.items():
                out[t + f"{tm}.{leaf}"] = state[b + f"{hf}.{leaf}"]
    return out


def transformers_to_timm_clip(state):
    """A transformers `CLIPVisionModel[WithProjection]` state dict -> timm's
    `vit_*_clip_*` keys: `norm_pre` (pre_layrnorm), `norm` (post_layernorm),
    the projection as `head` with a zero bias."""
    state, body = _vision_body(state), ""
    dim = state[body + "embeddings.class_embedding"].shape[0]
    out = {
        "cls_token": state[body + "embeddings.class_embedding"].reshape(1, 1, dim),
        "pos_embed": state[body + "embeddings.position_embedding.weight"][None],
        "patch_embed.proj.weight": state[body + "embeddings.patch_embedding.weight"],
        "norm_pre.weight": state[body + "pre_layrnorm.weight"],
        "norm_pre.bias": state[body + "pre_layrnorm.bias"],
        "norm.weight": state[body + "post_layernorm.weight"],
        "norm.bias": state[body + "post_layernorm.bias"],
        **_transformers_blocks_to_timm(state, body),
    }
    if "visual_projection.weight" in state:
        out["head.weight"] = state["visual_projection.weight"]
        out["head.bias"] = np.zeros(out["head.weight"].shape[:1], out["head.weight"].dtype)
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def transformers_to_timm_siglip(state):
    """A transformers `SiglipVisionModel` state dict -> timm's
    `vit_*_siglip_*` keys: `norm` (post_layernorm) and `attn_pool`, whose
    `kv` Linear is the key and value rows of `in_proj_weight`."""
    state, body, head = _vision_body(state), "", "head."
    dim = state[body + "post_layernorm.weight"].shape[0]
    out = {
        "pos_embed": state[body + "embeddings.position_embedding.weight"][None],
        "patch_embed.proj.weight": state[body + "embeddings.patch_embedding.weight"],
        "patch_embed.proj.bias": state[body + "embeddings.patch_embedding.bias"],
        "norm.weight": state[body + "post_layernorm.weight"],
        "norm.bias": state[body + "post_layernorm.bias"],
        "attn_pool.latent": state[head + "probe"],
        "attn_pool.q.weight": state[head + "attention.in_proj_weight"][:dim],
        "attn_pool.q.bias": state[head + "attention.in_proj_bias"][:dim],
        "attn_pool.kv.weight": state[head + "attention.in_proj_weight"][dim:],
        "attn_pool.kv.bias": state[head + "attention.in_proj_bias"][dim:],
        **_transformers_blocks_to_timm(state, body),
    }
    for hf, tm in {"attention.out_proj": "proj", "layernorm": "norm", "mlp.fc1": "mlp.fc1",
                   "mlp.fc2": "mlp.fc2"}.items():
        for leaf in ("weight", "bias"):
            out[f"attn_pool.{tm}.{leaf}"] = state[head + f"{hf}.{leaf}"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def transformers_to_timm_dinov2(state):
    """A transformers `Dinov2Model` / `Dinov2WithRegistersModel` state dict
    -> timm's `vit_*_patch14_dinov2` / `vit_*_patch14_reg4_dinov2` keys:
    fused `qkv`, LayerScale `ls1.gamma`/`ls2.gamma`, `norm` (layernorm).
    With registers timm's model has `no_embed_class`: as timm's checkpoint
    filter does, the class row of the position table is added to
    `cls_token` and the table keeps the patch rows only (`mask_token`, a
    pre-training tensor, has no timm counterpart)."""
    e = "embeddings."
    cls, pos = state[e + "cls_token"], state[e + "position_embeddings"]
    out = {
        "cls_token": cls,
        "pos_embed": pos,
        "patch_embed.proj.weight": state[e + "patch_embeddings.projection.weight"],
        "patch_embed.proj.bias": state[e + "patch_embeddings.projection.bias"],
        "norm.weight": state["layernorm.weight"],
        "norm.bias": state["layernorm.bias"],
    }
    if e + "register_tokens" in state:
        out["reg_token"] = state[e + "register_tokens"]
        out["cls_token"], out["pos_embed"] = cls + pos[:, :1], pos[:, 1:]
    layers = sorted({int(k.split(".")[2]) for k in state if k.startswith("encoder.layer.")})
    for i in layers:
        t, b = f"blocks.{i}.", f"encoder.layer.{i}."
        for leaf in ("weight", "bias"):
            out[t + f"attn.qkv.{leaf}"] = np.concatenate(
                [state[b + f"attention.{p}_proj.{leaf}"] for p in ("q", "k", "v")], axis=0
            )
            pairs = {"attention.o_proj": "attn.proj", "norm1": "norm1", "norm2": "norm2",
                     "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
            for hf, tm in pairs.items():
                out[t + f"{tm}.{leaf}"] = state[b + f"{hf}.{leaf}"]
        out[t + "ls1.gamma"] = state[b + "layer_scale1.lambda1"]
        out[t + "ls2.gamma"] = state[b + "layer_scale2.lambda1"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}
