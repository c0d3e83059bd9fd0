"""Independent NumPy (float64) forward pass of the hybrids' ResNet.

Written from the definitions in the official `vit_jax/models_resnet.py` and
`vit_jax/models_vit.py` (as summarised in docs/checkpoints.md §2-3):
weight standardisation `(w - mean) / (std + 1e-5)` per output channel,
GroupNorm 32 groups eps 1e-6, TF "SAME" padding, bottleneck units. The
parameters are read from a dict with the official `.npz` key names, so
nothing here depends on keras_vit. The Transformer part of a hybrid is
`tests/reference.py`'s `forward(..., stem=stem(resnet_layers))`.
"""

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


def stem(resnet_layers):
    """`stem(params, images)` for `tests/reference.py`'s `forward`."""
    return lambda params, images: resnet(params, images, resnet_layers)
