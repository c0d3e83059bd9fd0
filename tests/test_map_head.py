"""`MapHead` against transformers' `SiglipMultiheadAttentionPoolingHead`."""

import keras
import numpy as np
import pytest

from harness import run_layer_test
from keras_vit.layers.map_head import MapHead

torch = pytest.importorskip("torch", reason="transformers' SigLIP head is the reference")
siglip = pytest.importorskip("transformers.models.siglip.modeling_siglip")

DIM, HEADS, MLP = 16, 4, 24


def _reference():
    from transformers import SiglipVisionConfig

    config = SiglipVisionConfig(
        hidden_size=DIM, num_attention_heads=HEADS, intermediate_size=MLP, layer_norm_eps=1e-6
    )
    torch.manual_seed(0)
    head = siglip.SiglipMultiheadAttentionPoolingHead(config).eval()
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    return head


def _copy_into(layer, head):
    """transformers' names and layouts -> MapHead's (the loader's mapping)."""
    state = {k: v.detach().numpy() for k, v in head.state_dict().items()}
    hd = DIM // HEADS
    q_w, k_w, v_w = np.split(state["attention.in_proj_weight"], 3)
    q_b, k_b, v_b = np.split(state["attention.in_proj_bias"], 3)
    attention = layer.attention
    layer.probe.assign(state["probe"])
    for target, w, b in ((attention.query, q_w, q_b), (attention.key, k_w, k_b), (attention.value, v_w, v_b)):
        target.kernel.assign(w.T.reshape(DIM, HEADS, hd))
        target.bias.assign(b.reshape(HEADS, hd))
    attention.out.kernel.assign(state["attention.out_proj.weight"].T.reshape(HEADS, hd, DIM))
    attention.out.bias.assign(state["attention.out_proj.bias"])
    layer.norm.gamma.assign(state["layernorm.weight"])
    layer.norm.beta.assign(state["layernorm.bias"])
    for dense, key in ((layer.mlp.dense_0, "mlp.fc1"), (layer.mlp.dense_1, "mlp.fc2")):
        dense.kernel.assign(state[f"{key}.weight"].T)
        dense.bias.assign(state[f"{key}.bias"])


def test_matches_transformers_siglip_head():
    head = _reference()
    tokens = np.random.default_rng(0).normal(size=(3, 7, DIM)).astype("float32")
    with torch.no_grad():
        expected = head(torch.from_numpy(tokens)).numpy()
    layer = MapHead(num_heads=HEADS, mlp_dim=MLP)
    layer.build(tokens.shape)
    _copy_into(layer, head)
    out = keras.ops.convert_to_numpy(layer(tokens))
    assert out.shape == (3, DIM)
    np.testing.assert_allclose(out, expected, atol=1e-5, rtol=0)
    # The probe matters: another probe gives another pooling.
    layer.probe.assign(keras.ops.convert_to_numpy(layer.probe) + 1.0)
    assert np.abs(keras.ops.convert_to_numpy(layer(tokens)) - expected).max() > 1e-3


def test_weight_names_are_big_vision_s():
    layer = MapHead(num_heads=2, mlp_dim=8, name="MAPHead_0")
    layer.build((None, None, 4))
    assert sorted(w.path for w in layer.weights) == sorted(
        [
            "MAPHead_0/probe",
            *(f"MAPHead_0/MultiHeadDotProductAttention_0/{p}/{w}"
              for p in ("query", "key", "value", "out") for w in ("kernel", "bias")),
            "MAPHead_0/LayerNorm_0/gamma",
            "MAPHead_0/LayerNorm_0/beta",
            *(f"MAPHead_0/MlpBlock_0/Dense_{i}/{w}" for i in (0, 1) for w in ("kernel", "bias")),
        ]
    )


def test_layer_contract():
    tokens = np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32")
    # A key bias shifts all the logits of the one query alike: its gradient is
    # zero up to rounding, so the contract's gradient check runs below instead.
    run_layer_test(lambda **kw: MapHead(num_heads=2, mlp_dim=12, **kw), tokens, (2, 8), training=False)


def test_every_weight_but_the_key_bias_gets_a_gradient():
    tokens = np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32")
    layer = MapHead(num_heads=2, mlp_dim=12)
    inputs = keras.Input((5, 8))
    model = keras.Model(inputs, layer(inputs))
    before = {w.path: keras.ops.convert_to_numpy(w).copy() for w in layer.trainable_weights}
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    target = np.random.default_rng(2).normal(size=(2, 8)).astype("float32")
    model.fit(tokens, target, epochs=1, batch_size=2, verbose=0)
    for weight in layer.trainable_weights:
        moved = np.abs(keras.ops.convert_to_numpy(weight) - before[weight.path]).max()
        if weight.path.endswith("key/bias"):
            assert moved < 1e-6, weight.path
        else:
            assert moved > 0, f"{weight.path} received no gradient"


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_heads"):
        MapHead(num_heads=0, mlp_dim=4)
    with pytest.raises(ValueError, match="num_heads=3"):
        MapHead(num_heads=3, mlp_dim=4)(np.zeros((1, 2, 8), "float32"))
