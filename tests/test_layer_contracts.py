"""Every keras_vit layer against the shared layer contract (`harness.run_layer_test`).

Shapes, config and serialisation round trips, `.keras` saving, mixed
precision and gradients, under the backend the suite runs on. The numerics
of each layer are tested against NumPy in test_layers.py and
test_resnet_layers.py.
"""

import numpy as np
import pytest

from harness import run_layer_test
from keras_vit import layers

RNG = np.random.default_rng(0)


def _normal(*shape):
    return RNG.normal(size=shape).astype("float32")


# (layer factory, input, expected output shape)
CASES = {
    "Patches": (lambda **kw: layers.Patches((2, 4), **kw), _normal(2, 6, 8, 3), (2, 3, 2, 24)),
    "PatchEncoder": (
        lambda **kw: layers.PatchEncoder(hidden_size=6, patch_size=4, grid_size=(2, 3), **kw),
        _normal(2, 2, 3, 48),
        (2, 7, 6),
    ),
    "PatchEncoder-no-class-token": (
        lambda **kw: layers.PatchEncoder(4, 2, 2, class_token=False, **kw),
        _normal(1, 2, 2, 12),
        (1, 4, 4),
    ),
    "PatchEncoder-distillation-registers": (
        lambda **kw: layers.PatchEncoder(4, 2, 2, distillation_token=True, num_register_tokens=3, **kw),
        _normal(1, 2, 2, 12),
        (1, 9, 4),
    ),
    "MultiHeadSelfAttention-no-qkv-bias": (
        lambda **kw: layers.MultiHeadSelfAttention(num_heads=2, head_dim=4, qkv_bias=False, **kw),
        _normal(2, 5, 8),
        (2, 5, 8),
    ),
    "TransformerBlock-layer-scale": (
        # No q/k/v biases: a key bias shifts every logit of a query alike, so its
        # gradient is zero up to rounding, which the contract would flag.
        lambda **kw: layers.TransformerBlock(num_heads=2, mlp_dim=16, layer_scale_init=0.1, qkv_bias=False, **kw),
        _normal(2, 5, 8),
        (2, 5, 8),
    ),
    "TokenPooling-distillation": (
        lambda **kw: layers.TokenPooling("distillation", 2, **kw), _normal(2, 5, 3), (2, 3)
    ),
    "MultiHeadSelfAttention": (
        lambda **kw: layers.MultiHeadSelfAttention(num_heads=2, head_dim=4, **kw),
        _normal(2, 5, 8),
        (2, 5, 8),
    ),
    "MlpBlock": (lambda **kw: layers.MlpBlock(mlp_dim=16, **kw), _normal(2, 5, 8), (2, 5, 8)),
    "TransformerBlock": (
        lambda **kw: layers.TransformerBlock(num_heads=2, mlp_dim=16, **kw),
        _normal(2, 5, 8),
        (2, 5, 8),
    ),
    "TokenPooling-token": (lambda **kw: layers.TokenPooling("token", 1, **kw), _normal(2, 5, 3), (2, 3)),
    "TokenPooling-avg": (lambda **kw: layers.TokenPooling("avg", 1, **kw), _normal(2, 5, 3), (2, 3)),
    "TokenPooling-max": (lambda **kw: layers.TokenPooling("max", 0, **kw), _normal(2, 5, 3), (2, 3)),
    "StdConv2D": (
        lambda **kw: layers.StdConv2D(8, 3, strides=2, epsilon=1e-4, **kw),
        _normal(2, 7, 7, 4),
        (2, 4, 4, 8),
    ),
    "BottleneckUnit": (
        lambda **kw: layers.BottleneckUnit(32, strides=2, groups=16, norm_epsilon=1e-5, **kw),
        _normal(1, 5, 6, 64),
        (1, 3, 3, 128),
    ),
    "ResNetStage": (
        lambda **kw: layers.ResNetStage(32, 2, strides=2, conv_epsilon=1e-6, name="block2", **kw),
        _normal(1, 8, 8, 64),
        (1, 4, 4, 128),
    ),
    "GroupNorm": (
        lambda **kw: layers.GroupNorm(groups=4, epsilon=1e-6, **kw), _normal(2, 3, 5, 8), (2, 3, 5, 8)
    ),
    "MapHead": (
        # No q/k/v biases, as the TransformerBlock case (test_map_head.py
        # checks the gradients with them).
        lambda **kw: layers.MapHead(num_heads=2, mlp_dim=12, qkv_bias=False, **kw), _normal(2, 5, 8), (2, 8)
    ),
    "AttentionPoolHead": (
        lambda **kw: layers.AttentionPoolHead(num_heads=2, **kw), _normal(2, 5, 8), (2, 8)
    ),
    "PatchEncoder-patch-norm": (
        lambda **kw: layers.PatchEncoder(4, 2, 2, class_token=False, patch_norm="rmsnorm", **kw),
        _normal(1, 2, 2, 12),
        (1, 4, 4),
    ),
    "PatchDropout": (
        # At inference (the contract's call) it is the identity; the kept
        # tokens in training are tested in test_patch_dropout.py.
        lambda **kw: layers.PatchDropout(0.5, num_prefix_tokens=1, seed=0, **kw),
        _normal(2, 5, 8),
        (2, 5, 8),
    ),
    "SwiGluMlp": (lambda **kw: layers.SwiGluMlp(mlp_dim=16, **kw), _normal(2, 5, 8), (2, 5, 8)),
    "MaxPool2D": (
        lambda **kw: layers.MaxPool2D(3, strides=2, padding="same", **kw),
        _normal(2, 5, 6, 3),
        (2, 3, 3, 3),
    ),
}


# Layers with several inputs or outputs, which the single-tensor harness
# cannot drive: their contract (config round trip, `.keras` saving, mixed
# precision, gradients) is tested in the named file.
OWN_CONTRACT = {
    "SimpleFeaturePyramid": "test_pyramid.py",
    "TokenGrid": "test_forward.py",
}


def test_every_layer_has_a_case():
    exported = {
        name for name in layers.__all__ if isinstance(getattr(layers, name), type)
    }
    covered = {case.split("-")[0] for case in CASES} | set(OWN_CONTRACT)
    assert exported <= covered, f"layers without a contract test: {sorted(exported - covered)}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_layer_contract(case):
    make_layer, inputs, expected_shape = CASES[case]
    _, outputs = run_layer_test(make_layer, inputs, expected_shape)
    assert np.all(np.isfinite(outputs))
