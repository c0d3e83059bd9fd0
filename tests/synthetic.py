"""Random checkpoints in the official, big_vision and timm layouts.

Each writer follows the layout as documented in docs/checkpoints.md
(§2.1 key names and shapes; timm's fused `qkv`, `(out, in)` Linear weights
and OIHW convolutions), independently of keras_vit's readers.
"""

import numpy as np

import keras_vit
from conftest import TINY

POSEMB = "Transformer/posembed_input/pos_embedding"


def official_params(
    rng,
    image_size=32,
    patch_size=8,
    hidden_size=16,
    num_layers=2,
    num_heads=2,
    mlp_dim=32,
    classes=10,
    representation_size=None,
    channels=3,
):
    """A random checkpoint in the official `.npz` layout (float32)."""
    d, hd = hidden_size, hidden_size // num_heads
    size = (image_size, image_size) if isinstance(image_size, int) else image_size
    tokens = 1 + (size[0] // patch_size) * (size[1] // patch_size)

    def normal(shape, scale=1.0):
        return (scale * rng.standard_normal(shape)).astype("float32")

    p = {
        "embedding/kernel": normal((patch_size, patch_size, channels, d), (patch_size**2 * channels) ** -0.5),
        "embedding/bias": normal((d,), 0.1),
        "cls": normal((1, 1, d), 0.5),
        POSEMB: normal((1, tokens, d), 0.5),
        "Transformer/encoder_norm/scale": 1 + normal((d,), 0.1),
        "Transformer/encoder_norm/bias": normal((d,), 0.1),
    }
    for i in range(num_layers):
        b = f"Transformer/encoderblock_{i}/"
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            p[b + ln + "/scale"] = 1 + normal((d,), 0.1)
            p[b + ln + "/bias"] = normal((d,), 0.1)
        for name in ("query", "key", "value"):
            p[b + f"MultiHeadDotProductAttention_1/{name}/kernel"] = normal((d, num_heads, hd), d**-0.5)
            p[b + f"MultiHeadDotProductAttention_1/{name}/bias"] = normal((num_heads, hd), 0.1)
        p[b + "MultiHeadDotProductAttention_1/out/kernel"] = normal((num_heads, hd, d), d**-0.5)
        p[b + "MultiHeadDotProductAttention_1/out/bias"] = normal((d,), 0.1)
        p[b + "MlpBlock_3/Dense_0/kernel"] = normal((d, mlp_dim), d**-0.5)
        p[b + "MlpBlock_3/Dense_0/bias"] = normal((mlp_dim,), 0.1)
        p[b + "MlpBlock_3/Dense_1/kernel"] = normal((mlp_dim, d), mlp_dim**-0.5)
        p[b + "MlpBlock_3/Dense_1/bias"] = normal((d,), 0.1)
    width = d
    if representation_size:
        p["pre_logits/kernel"] = normal((d, representation_size), d**-0.5)
        p["pre_logits/bias"] = normal((representation_size,), 0.1)
        width = representation_size
    if classes:
        p["head/kernel"] = normal((width, classes), width**-0.5)
        p["head/bias"] = normal((classes,), 0.1)
    return p


def to_big_vision(params, prefix="params/"):
    """The same model in big_vision's layout.

    Linen numbering; `pos_embedding` at the top level, added before the class
    token is prepended, so the class token's position row folds into `cls`.
    """
    out = {}
    for key, value in params.items():
        key = (
            key.replace("/MultiHeadDotProductAttention_1/", "/MultiHeadDotProductAttention_0/")
            .replace("/LayerNorm_2/", "/LayerNorm_1/")
            .replace("/MlpBlock_3/", "/MlpBlock_0/")
        )
        out[key] = value
    posemb = out.pop(POSEMB)
    out["cls"] = out["cls"] + posemb[:, :1]
    out["pos_embedding"] = posemb[:, 1:]
    return {prefix + k: v for k, v in out.items()}


def to_timm(params, num_heads):
    """The same model as a timm `VisionTransformer` state dict (NumPy)."""
    out = {
        "cls_token": params["cls"],
        "pos_embed": params[POSEMB],
        "patch_embed.proj.weight": params["embedding/kernel"].transpose(3, 2, 0, 1),
        "patch_embed.proj.bias": params["embedding/bias"],
        "norm.weight": params["Transformer/encoder_norm/scale"],
        "norm.bias": params["Transformer/encoder_norm/bias"],
    }
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in params:
        b, t = f"Transformer/encoderblock_{i}/", f"blocks.{i}."
        att = b + "MultiHeadDotProductAttention_1/"
        d = params[b + "LayerNorm_0/scale"].shape[0]
        out[t + "norm1.weight"] = params[b + "LayerNorm_0/scale"]
        out[t + "norm1.bias"] = params[b + "LayerNorm_0/bias"]
        out[t + "norm2.weight"] = params[b + "LayerNorm_2/scale"]
        out[t + "norm2.bias"] = params[b + "LayerNorm_2/bias"]
        # Linear(D, 3D): rows are (q|k|v, head, head_dim), columns the input.
        out[t + "attn.qkv.weight"] = np.concatenate(
            [params[att + n + "/kernel"].reshape(d, d).T for n in ("query", "key", "value")]
        )
        out[t + "attn.qkv.bias"] = np.concatenate(
            [params[att + n + "/bias"].reshape(d) for n in ("query", "key", "value")]
        )
        out[t + "attn.proj.weight"] = params[att + "out/kernel"].reshape(d, d).T
        out[t + "attn.proj.bias"] = params[att + "out/bias"]
        out[t + "mlp.fc1.weight"] = params[b + "MlpBlock_3/Dense_0/kernel"].T
        out[t + "mlp.fc1.bias"] = params[b + "MlpBlock_3/Dense_0/bias"]
        out[t + "mlp.fc2.weight"] = params[b + "MlpBlock_3/Dense_1/kernel"].T
        out[t + "mlp.fc2.bias"] = params[b + "MlpBlock_3/Dense_1/bias"]
        i += 1
    if "pre_logits/kernel" in params:
        out["pre_logits.fc.weight"] = params["pre_logits/kernel"].T
        out["pre_logits.fc.bias"] = params["pre_logits/bias"]
    if "head/kernel" in params:
        out["head.weight"] = params["head/kernel"].T
        out["head.bias"] = params["head/bias"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def tiny_model(**overrides):
    """`keras_vit.ViT` on the TINY config, returning logits."""
    config = dict(TINY, classes=10, classifier_activation=None)
    if "block_config" not in overrides and str(overrides.get("weights", "")).endswith((".npz", ".h5")):
        # Google-layout .npz and Keras weights files record no GELU: the
        # synthetic ones hold the tanh GELU's.
        config["mlp_activation"] = "gelu_tanh"
    config.update(overrides)
    return keras_vit.ViT(**config)


def images(rng, size=32, batch=2):
    """A fixed batch of random images in [-1, 1]."""
    size = (size, size) if isinstance(size, int) else size
    return rng.uniform(-1, 1, (batch,) + tuple(size) + (3,)).astype("float32")
