"""`SwiGluMlp` against transformers' `Dinov2SwiGLUFFN`."""

import keras
import numpy as np
import pytest

from harness import run_layer_test
from keras_vit.layers.swiglu import SwiGluMlp, swiglu_hidden_width

torch = pytest.importorskip("torch", reason="transformers' DINOv2 MLP is the reference")
dinov2 = pytest.importorskip("transformers.models.dinov2.modeling_dinov2")


def _reference(hidden_size, mlp_ratio):
    from transformers import Dinov2Config

    config = Dinov2Config(hidden_size=hidden_size, mlp_ratio=mlp_ratio, use_swiglu_ffn=True)
    torch.manual_seed(0)
    mlp = dinov2.Dinov2SwiGLUFFN(config).eval()
    with torch.no_grad():
        for parameter in mlp.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.3)
    return mlp


@pytest.mark.parametrize("hidden_size,mlp_ratio", [(1536, 4), (20, 4), (10, 3), (24, 2)])
def test_hidden_width_is_transformers(hidden_size, mlp_ratio):
    mlp = _reference(hidden_size, mlp_ratio)
    assert swiglu_hidden_width(hidden_size, mlp_ratio) == mlp.gate_proj.out_features


def test_matches_transformers_dinov2_swiglu():
    hidden_size, mlp_ratio = 20, 4
    mlp = _reference(hidden_size, mlp_ratio)
    x = np.random.default_rng(0).normal(size=(2, 5, hidden_size)).astype("float32")
    with torch.no_grad():
        expected = mlp(torch.from_numpy(x)).numpy()
    layer = SwiGluMlp(swiglu_hidden_width(hidden_size, mlp_ratio))
    layer.build(x.shape)
    for dense, name in ((layer.gate, "gate_proj"), (layer.up, "up_proj"), (layer.down, "down_proj")):
        source = getattr(mlp, name)
        dense.kernel.assign(source.weight.detach().numpy().T)
        dense.bias.assign(source.bias.detach().numpy())
    out = keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_allclose(out, expected, atol=1e-5, rtol=0)
    # Gate and up are not interchangeable: swapping them changes the output.
    gate = keras.ops.convert_to_numpy(layer.gate.kernel)
    layer.gate.kernel.assign(keras.ops.convert_to_numpy(layer.up.kernel))
    layer.up.kernel.assign(gate)
    assert np.abs(keras.ops.convert_to_numpy(layer(x)) - expected).max() > 1e-3


def test_layer_contract():
    x = np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32")
    run_layer_test(lambda **kw: SwiGluMlp(16, **kw), x, (2, 5, 8))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="mlp_dim"):
        SwiGluMlp(0)
    with pytest.raises(ValueError, match="mlp_ratio"):
        swiglu_hidden_width(8, -1.0)
