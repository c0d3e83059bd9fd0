"""An independent NumPy ViT forward pass on an official-layout checkpoint.

Written from the paper's equations (arXiv:2010.11929, eq. 1-4) and the
official vit_jax model, in float64, with no Keras or keras_vit code: the
yardstick the converter and the tests hold keras_vit models to.

`params` is a flat dict in the official `.npz` layout
(`Transformer/encoderblock_{i}/MultiHeadDotProductAttention_1/query/kernel`,
...), as returned by `keras_vit.weights.sources.read_checkpoint(...).params`
or `numpy.load`.

Example:

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> D, C = 8, 3
>>> params = {"embedding/kernel": rng.normal(size=(4, 4, 3, D)),
...           "embedding/bias": np.zeros(D), "cls": np.zeros((1, 1, D)),
...           "Transformer/posembed_input/pos_embedding": np.zeros((1, 5, D)),
...           "Transformer/encoder_norm/scale": np.ones(D),
...           "Transformer/encoder_norm/bias": np.zeros(D),
...           "head/kernel": np.zeros((D, C)), "head/bias": np.arange(C)}
>>> forward(params, np.zeros((1, 8, 8, 3))).tolist()
[[0.0, 1.0, 2.0]]
"""

import math
import re

import numpy as np

POSEMB = "Transformer/posembed_input/pos_embedding"


def gelu(x, approximate=True):
    """GELU: tanh approximation (Google's `jax.nn.gelu`) or exact erf."""
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def activation(x, name):
    """The MLP activation: `True`/"gelu_tanh" (tanh GELU), `False`/"gelu"
    (erf GELU) or "quick_gelu" (OpenAI CLIP's `x * sigmoid(1.702 x)`)."""
    if name == "quick_gelu":
        return x / (1.0 + np.exp(-1.702 * x))
    return gelu(x, approximate=name in (True, "gelu_tanh"))


def layer_norm(x, scale, bias, epsilon=1e-6):
    """LayerNorm over the last axis (population variance)."""
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * scale + bias


def embed_patches(images, kernel, bias=0.0):
    """Eq. 1: non-overlapping `(ph, pw)` patches, flattened, projected."""
    ph, pw, channels, dim = kernel.shape
    b, h, w, _ = images.shape
    gh, gw = h // ph, w // pw
    x = images[:, : gh * ph, : gw * pw].reshape(b, gh, ph, gw, pw, channels)
    x = x.transpose(0, 1, 3, 2, 4, 5).reshape(b, gh * gw, ph * pw * channels)
    return x @ kernel.reshape(-1, dim) + bias


def self_attention(x, p):
    """Multi-head self-attention with `(D, heads, head_dim)` projections
    (query/key/value biases are optional)."""
    q, k, v = (
        np.tensordot(x, p[f"{name}/kernel"], axes=1) + p.get(f"{name}/bias", 0.0)
        for name in ("query", "key", "value")
    )
    q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))  # (b, heads, t, hd)
    logits = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    logits = logits - logits.max(-1, keepdims=True)
    probs = np.exp(logits)
    probs = probs / probs.sum(-1, keepdims=True)
    heads = (probs @ v).transpose(0, 2, 1, 3)  # (b, t, heads, hd)
    return np.tensordot(heads, p["out/kernel"], axes=2) + p["out/bias"]


def encoder_block(x, p, gelu_approximate=True, epsilon=1e-6):
    """Eq. 2-3: `x + MSA(LN(x))`, then `x + MLP(LN(x))`; with LayerScale
    (`attention_scale`, `mlp_scale`) each branch is scaled per channel."""
    sub = lambda prefix: {k[len(prefix) :]: v for k, v in p.items() if k.startswith(prefix)}
    y = layer_norm(x, p["LayerNorm_0/scale"], p["LayerNorm_0/bias"], epsilon)
    x = x + self_attention(y, sub("MultiHeadDotProductAttention_1/")) * p.get("attention_scale", 1.0)
    y = layer_norm(x, p["LayerNorm_2/scale"], p["LayerNorm_2/bias"], epsilon)
    y = y @ p["MlpBlock_3/Dense_0/kernel"] + p["MlpBlock_3/Dense_0/bias"]
    y = activation(y, gelu_approximate)
    y = y @ p["MlpBlock_3/Dense_1/kernel"] + p["MlpBlock_3/Dense_1/bias"]
    return x + y * p.get("mlp_scale", 1.0)


def _tokens(params, x):
    """Eq. 1 with the prefix tokens: class and distillation tokens (each with
    a position row), then register tokens (`reg`, no position row)."""
    prefix = [params[k] for k in ("cls", "dist") if k in params]
    prefix = [np.broadcast_to(t, (x.shape[0], 1, x.shape[-1])) for t in prefix]
    x = np.concatenate(prefix + [x], axis=1) + params[POSEMB]
    if "reg" in params:
        reg = np.broadcast_to(params["reg"], (x.shape[0],) + params["reg"].shape[1:])
        x = np.concatenate([x[:, : len(prefix)], reg, x[:, len(prefix) :]], axis=1)
    return x


def _head(params, x, epsilon):
    """Pooling, optional norm of the pooled features, pre-logits and head(s)."""
    if "dist" in params and "head_dist/kernel" in params:
        # DeiT: the class-token and distillation-token heads, averaged.
        first = x[:, 0] @ params["head/kernel"] + params["head/bias"]
        second = x[:, 1] @ params["head_dist/kernel"] + params["head_dist/bias"]
        return (first + second) / 2
    if "cls" in params:
        x = x[:, 0]
    else:
        skip = params["reg"].shape[1] if "reg" in params else 0
        x = x[:, skip:].mean(axis=1)  # the patch tokens
    if "fc_norm/scale" in params:
        x = layer_norm(x, params["fc_norm/scale"], params["fc_norm/bias"], epsilon)
    if "pre_logits/kernel" in params:
        x = np.tanh(x @ params["pre_logits/kernel"] + params["pre_logits/bias"])
    return x @ params["head/kernel"] + params["head/bias"]


def forward(params, images, gelu_approximate=True, epsilon=1e-6, stem=None):
    """Logits (or final tokens) of a ViT checkpoint for a batch of images.

    Beyond the paper's model it computes the options keras_vit loads from
    other layouts: a distillation token `dist` with a second head
    `head_dist` (DeiT: the two heads' logits averaged), register tokens
    `reg` (no position row), query/key/value without biases, LayerScale, a
    final norm of the pooled features (`fc_norm/*`, instead of
    `Transformer/encoder_norm/*` on every token), and CLIP's patch embedding
    without bias, LayerNorm before the blocks (`pre_norm/*`) and quick GELU.

    Args:
        params: flat official-layout dict of arrays.
        images: `(batch, H, W, C)` array, already preprocessed.
        gelu_approximate: the MLP activation: True (default: tanh GELU,
            Google numerics), False (erf GELU) or a name of `activation`.
        epsilon: LayerNorm epsilon, default 1e-6.
        stem: optional `stem(params, images) -> feature map` run before the
            patch embedding (the ResNet of the hybrids).

    Returns:
        `(batch, classes)` logits when `params` has a head, else the
        `(batch, tokens, D)` output of the final LayerNorm.
    """
    params = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = np.asarray(images, np.float64)
    if stem is not None:
        x = stem(params, x)
    # An embedding without bias (CLIP) has no `embedding/bias`.
    x = embed_patches(x, params["embedding/kernel"], params.get("embedding/bias", 0.0))
    x = _tokens(params, x)
    if "pre_norm/scale" in params:  # CLIP's LayerNorm before the blocks
        x = layer_norm(x, params["pre_norm/scale"], params["pre_norm/bias"], epsilon)
    depth = 1 + max(
        (int(m.group(1)) for k in params if (m := re.match(r"Transformer/encoderblock_(\d+)/", k))),
        default=-1,
    )
    for i in range(depth):
        prefix = f"Transformer/encoderblock_{i}/"
        block = {k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)}
        x = encoder_block(x, block, gelu_approximate, epsilon)
    if "Transformer/encoder_norm/scale" in params:
        x = layer_norm(
            x, params["Transformer/encoder_norm/scale"], params["Transformer/encoder_norm/bias"], epsilon
        )
    if "head/kernel" not in params:
        return x
    return _head(params, x, epsilon)
