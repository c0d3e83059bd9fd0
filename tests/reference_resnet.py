"""Independent NumPy (float64) forward pass of the official hybrid ViT.

Written from the definitions in the official `vit_jax/models_resnet.py` and
`vit_jax/models_vit.py` (as summarised in ../shared/CHECKPOINTS.md §2-3):
weight standardisation `(w - mean) / (std + 1e-5)` per output channel,
GroupNorm 32 groups eps 1e-6, TF "SAME" padding, bottleneck units, then the
ViT (pre-LN blocks, tanh GELU, class token). Parameters are read from a dict
with the official `.npz` key names, so nothing here depends on keras_vit.
"""

import math

import numpy as np


def same_padding(size, kernel, stride):
    """TF/Flax "SAME": `(before, after)` padding of one spatial axis."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def standardize(kernel, eps=1e-5):
    """Weight standardisation over (h, w, in) with the population std."""
    kernel = np.asarray(kernel, np.float64)
    mean = kernel.mean(axis=(0, 1, 2), keepdims=True)
    std = kernel.std(axis=(0, 1, 2), keepdims=True)
    return (kernel - mean) / (std + eps)


def conv2d(x, kernel, stride=1, padding="SAME"):
    """NHWC x HWIO convolution by explicit sums over kernel taps."""
    x = np.asarray(x, np.float64)
    kernel = np.asarray(kernel, np.float64)
    kh, kw = kernel.shape[:2]
    n, h, w, _ = x.shape
    if padding == "SAME":
        ph, pw = same_padding(h, kh, stride), same_padding(w, kw, stride)
        x = np.pad(x, ((0, 0), ph, pw, (0, 0)))
    oh = (x.shape[1] - kh) // stride + 1
    ow = (x.shape[2] - kw) // stride + 1
    out = np.zeros((n, oh, ow, kernel.shape[3]))
    for i in range(kh):
        for j in range(kw):
            window = x[:, i : i + stride * oh : stride, j : j + stride * ow : stride]
            out += window @ kernel[i, j]
    return out


def max_pool_same(x, size=3, stride=2):
    """Max-pool with "SAME" padding by -inf (as `flax.linen.max_pool`)."""
    n, h, w, c = x.shape
    ph, pw = same_padding(h, size, stride), same_padding(w, size, stride)
    x = np.pad(x, ((0, 0), ph, pw, (0, 0)), constant_values=-np.inf)
    oh = (x.shape[1] - size) // stride + 1
    ow = (x.shape[2] - size) // stride + 1
    out = np.full((n, oh, ow, c), -np.inf)
    for i in range(size):
        for j in range(size):
            out = np.maximum(
                out, x[:, i : i + stride * oh : stride, j : j + stride * ow : stride]
            )
    return out


def group_norm(x, scale, bias, groups=32, eps=1e-6):
    """GroupNorm over (h, w, channels of the group), then affine."""
    n, h, w, c = x.shape
    g = x.reshape(n, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    g = (g - mean) / np.sqrt(var + eps)
    return g.reshape(n, h, w, c) * np.reshape(scale, -1) + np.reshape(bias, -1)


def relu(x):
    return np.maximum(x, 0.0)


def _std_conv(params, key, x, stride=1):
    return conv2d(x, standardize(params[f"{key}/kernel"]), stride)


def _gn(params, key, x):
    return group_norm(x, params[f"{key}/scale"], params[f"{key}/bias"])


def bottleneck_unit(params, prefix, x, stride):
    """One official `ResidualUnit` with parameters under `prefix`."""
    if f"{prefix}/conv_proj/kernel" in params:
        shortcut = _gn(params, f"{prefix}/gn_proj", _std_conv(params, f"{prefix}/conv_proj", x, stride))
    else:
        shortcut = x
    y = relu(_gn(params, f"{prefix}/gn1", _std_conv(params, f"{prefix}/conv1", x)))
    y = relu(_gn(params, f"{prefix}/gn2", _std_conv(params, f"{prefix}/conv2", y, stride)))
    y = _gn(params, f"{prefix}/gn3", _std_conv(params, f"{prefix}/conv3", y))
    return relu(shortcut + y)


def resnet(params, x, resnet_layers):
    """Root block and stages (`block{s}/unit{u}`) of the hybrid's ResNet."""
    x = _std_conv(params, "conv_root", x, stride=2)
    x = max_pool_same(relu(_gn(params, "gn_root", x)))
    for s, units in enumerate(resnet_layers):
        for u in range(units):
            stride = 2 if s > 0 and u == 0 else 1
            x = bottleneck_unit(params, f"block{s + 1}/unit{u + 1}", x, stride)
    return x


def layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def encoder_block(params, prefix, x):
    """Official pre-LN block: x + MHA(LN0(x)), then x + MLP(LN2(x))."""
    p = lambda k: np.asarray(params[f"{prefix}/{k}"], np.float64)  # noqa: E731
    att = "MultiHeadDotProductAttention_1"
    y = layer_norm(x, p("LayerNorm_0/scale"), p("LayerNorm_0/bias"))
    q, k, v = (
        np.einsum("nld,dhk->nlhk", y, p(f"{att}/{n}/kernel")) + p(f"{att}/{n}/bias")
        for n in ("query", "key", "value")
    )
    logits = np.einsum("nqhk,nshk->nhqs", q, k) / math.sqrt(q.shape[-1])
    logits -= logits.max(-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(-1, keepdims=True)
    heads = np.einsum("nhqs,nshk->nqhk", weights, v)
    x = x + np.einsum("nqhk,hkd->nqd", heads, p(f"{att}/out/kernel")) + p(f"{att}/out/bias")
    y = layer_norm(x, p("LayerNorm_2/scale"), p("LayerNorm_2/bias"))
    y = gelu_tanh(y @ p("MlpBlock_3/Dense_0/kernel") + p("MlpBlock_3/Dense_0/bias"))
    return x + y @ p("MlpBlock_3/Dense_1/kernel") + p("MlpBlock_3/Dense_1/bias")


def hybrid_vit(params, images, resnet_layers, num_layers):
    """Logits of the official hybrid ViT (`classifier='token'`).

    Args:
        params: dict of official `.npz` keys to arrays (GroupNorm params may
            be `(C,)` or `(1, 1, 1, C)`).
        images: `(n, h, w, 3)` array.
        resnet_layers: units per ResNet stage.
        num_layers: number of Transformer blocks.

    Returns:
        `(n, classes)` float64 logits.
    """
    x = resnet(params, np.asarray(images, np.float64), resnet_layers)
    kernel = params["embedding/kernel"]
    x = conv2d(x, kernel, stride=kernel.shape[0], padding="VALID")
    x = x + params["embedding/bias"]
    n, gh, gw, d = x.shape
    x = x.reshape(n, gh * gw, d)
    cls = np.broadcast_to(params["cls"], (n, 1, d))
    x = np.concatenate([cls, x], axis=1) + params["Transformer/posembed_input/pos_embedding"]
    for i in range(num_layers):
        x = encoder_block(params, f"Transformer/encoderblock_{i}", x)
    x = layer_norm(x, params["Transformer/encoder_norm/scale"], params["Transformer/encoder_norm/bias"])
    x = x[:, 0]
    if "pre_logits/kernel" in params:
        x = np.tanh(x @ params["pre_logits/kernel"] + params["pre_logits/bias"])
    return x @ params["head/kernel"] + params["head/bias"]
