"""The block options of the rotary-position ViTs (DINOv3, EVA02, Perception
Encoder, RoPE-ViT), in a whole `ViT`: rotary embeddings of every variant,
per-projection query/key/value biases, the attention's output bias and
inner norm, MLP biases and inner norm (plain and SwiGLU), RMSNorm and
`position_embedding="none"`.

The model's output is held to `reference_families.eva_forward`, the NumPy
forward pass of timm's `Eva` written from timm's source, run on the model's
own weights renamed to timm's keys, at a larger non-square grid than the
model's. The layers' contracts (config round trip, saving, mixed
precision, gradients) run through `harness.run_layer_test`.
"""

import json

import keras
import numpy as np
import pytest

import keras_vit
import reference_families as ref
from conftest import spread, to_numpy
from harness import run_layer_test
from keras_vit.layers import MultiHeadSelfAttention, SwiGluMlp
from keras_vit.layers.config import BlockConfig, EncoderConfig
from keras_vit.layers.rotary import RotaryEmbedding, rope_tables
from keras_vit.layers.transformer import MlpBlock
from keras_vit.models import forward
from keras_vit.weights.mapping import model_state

SMALL = dict(image_size=16, patch_size=4, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=24)
SIZES = [(16, 16), (20, 28)]

# keras_vit's rope variant -> the settings of timm's rotary embedding in `eva_forward`.
TIMM_ROPE = {
    "dinov3": dict(rope="dinov3", rope_temperature=100.0, rope_rotate_half=True),
    "eva02": dict(rope="cat", rope_temperature=10000.0, rope_grid_indexing="ij", ref_feat_shape=(4, 4)),
    "pe": dict(rope="cat", rope_temperature=10000.0, rope_grid_indexing="xy", ref_feat_shape=(4, 4),
               rope_grid_offset=1.0),
    "axial": dict(rope="cat", rope_temperature=100.0, rope_grid_indexing="xy"),
    "mixed": dict(rope="mixed", rope_grid_indexing="xy"),
}
# One model per variant, each with a different set of the other options.
CASES = {
    "dinov3": dict(rope="dinov3", position_embedding="none", num_register_tokens=2, qkv_bias=(True, False, True),
                   layer_scale_init=0.5, layer_norm_epsilon=1e-5),
    "eva02": dict(rope="eva02", rope_settings={"reference_grid": (4, 4)}, classifier="gap", mlp_kind="swiglu",
                  position_interpolation="timm",
                  mlp_norm=True, attention_out_norm=True, qkv_bias=(True, False, True)),
    "pe": dict(rope="pe", rope_settings={"reference_grid": (4, 4)}, pre_norm=True, patch_bias=False,
               position_interpolation="timm",
               attention_out_bias=False, mlp_bias=False),
    "axial": dict(rope="axial", position_embedding="none", layer_scale_init=0.1, norm_kind="rmsnorm",
                  mlp_kind="swiglu", mlp_bias=False, mlp_norm=True),
    "mixed": dict(rope="mixed", position_embedding="none", mlp_norm=True, attention_out_norm=True),
}


def _randomise(model, seed=3):
    # Zero heads, unit norms and equal biases hide wiring mistakes.
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        scale = 1.0 if "frequencies" in weight.path else 0.3
        offset = 1.0 if weight.path.endswith(("gamma", "scale")) else 0.0
        weight.assign((offset + rng.normal(scale=scale, size=weight.shape)).astype(weight.dtype))
    return model


def _linear(kernel, bias=None):
    out = {"weight": kernel.reshape(kernel.shape[0], -1).T}
    if bias is not None:
        out["bias"] = bias.reshape(-1)
    return out


def timm_state(model):
    """The model's weights under timm's `Eva` keys (separate q/k/v, split SwiGLU)."""
    p = model_state(model)
    s = {}

    def put(name, value):
        if value is not None:
            s[name] = value

    def linear(name, prefix, heads_out=False):
        kernel = p[prefix + "kernel"]
        kernel = kernel.reshape(-1, kernel.shape[-1]) if heads_out else kernel
        for leaf, value in _linear(kernel, p.get(prefix + "bias")).items():
            s[f"{name}.{leaf}"] = value

    def norm(name, prefix):
        put(name + ".weight", p.get(prefix + "scale"))
        put(name + ".bias", p.get(prefix + "bias"))

    s["patch_embed.proj.weight"] = p["embedding/kernel"].transpose(3, 2, 0, 1)
    put("patch_embed.proj.bias", p.get("embedding/bias"))
    put("cls_token", p.get("cls"))
    put("reg_token", p.get("reg"))
    put("pos_embed", p.get("Transformer/posembed_input/pos_embedding"))
    put("rope.freqs", p.get("rope/frequencies"))
    norm("norm_pre", "pre_norm/")
    for i in range(model.num_layers):
        b, t = f"Transformer/encoderblock_{i}/", f"blocks.{i}."
        a = b + "MultiHeadDotProductAttention_1/"
        norm(t + "norm1", b + "LayerNorm_0/")
        for part, name in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
            linear(t + "attn." + name, a + part + "/")
        norm(t + "attn.norm", a + "norm/")
        linear(t + "attn.proj", a + "out/", heads_out=True)
        norm(t + "norm2", b + "LayerNorm_2/")
        m = b + "MlpBlock_3/"
        for ours, theirs in (("Dense_0", "fc1"), ("gate", "fc1_g"), ("up", "fc1_x"), ("Dense_1", "fc2"),
                             ("down", "fc2")):
            if m + ours + "/kernel" in p:
                linear(t + "mlp." + theirs, m + ours + "/")
        norm(t + "mlp.norm", m + "norm/")
        put(t + "gamma_1", p.get(b + "attention_scale"))
        put(t + "gamma_2", p.get(b + "mlp_scale"))
    norm("norm", "Transformer/encoder_norm/")
    return s


def timm_arch(model, rope_case):
    """`eva_forward`'s resolved architecture for the model."""
    config = model.block_config
    return dict(
        dict(rope_rotate_half=False), embed_dim=model.hidden_size, num_heads=model.num_heads,
        eps=config.layer_norm_epsilon, norm="rms" if config.norm_kind == "rmsnorm" else "layer",
        num_prefix_tokens=model.num_prefix_tokens, pos_grid=model.grid_size,
        global_pool="avg" if model.classifier == "gap" else "token", **TIMM_ROPE[rope_case],
    )


@spread("each rotary variant's model against NumPy once; the rotary layers are held on every backend by "
        "test_rotary and the layer contracts")
@pytest.mark.parametrize("case", sorted(CASES))
def test_rotary_models_equal_numpy_eva(case):
    model = _randomise(keras_vit.ViT(**SMALL, include_top=False, mlp_activation="gelu", seed=1, **CASES[case]))
    state, arch = timm_state(model), timm_arch(model, case)
    # A grid other than the model's (larger, non-square): tables, position
    # table resize and prefix rows all follow it (the checkpoint layouts'
    # tests also run each model's own size).
    images = np.random.default_rng(5).normal(size=(2,) + SIZES[1] + (3,)).astype("float32")
    want = ref.eva_forward(state, images, arch)["tokens"]
    np.testing.assert_allclose(to_numpy(model.forward_features(images)), want, atol=1e-4, rtol=0)
    # Another layout of the same tables gives other numbers: the check can fail.
    wrong = ref.eva_forward(state, images, dict(arch, rope_rotate_half=not arch["rope_rotate_half"]))["tokens"]
    assert np.abs(wrong - want).max() > 1e-2


def test_every_block_takes_the_tables_computed_once():
    model = keras_vit.ViT(**SMALL, rope="dinov3", position_embedding="none", num_register_tokens=1)
    rope = model.get_layer("rope")
    assert isinstance(rope, RotaryEmbedding) and rope.num_prefix_tokens == 2
    # One table node feeds every block: the rotary layer is called once.
    assert len(rope._inbound_nodes) == 1
    tables = to_numpy(rope.tables((5, 7)))
    sin, cos = (to_numpy(t) for t in rope_tables((5, 7), 8, "dinov3"))
    np.testing.assert_array_equal(tables[0, :2], 0.0)
    np.testing.assert_array_equal(tables[1, :2], 1.0)
    np.testing.assert_allclose(tables[0, 2:], sin, atol=1e-7)
    np.testing.assert_allclose(tables[1, 2:], cos, atol=1e-7)
    assert "embedding/pos_embedding" not in {w.path for w in model.weights}


def test_blocks_refuse_missing_or_unexpected_tables():
    model = keras_vit.ViT(**SMALL, rope="axial", classes=3)
    s = forward.stages(model)
    x, _ = forward.embed(s, np.zeros((1, 16, 16, 3), "float32"))
    with pytest.raises(ValueError, match="take its tables"):
        forward.run_blocks(s, x)
    with pytest.raises(ValueError, match="needs the rotary tables"):
        s.blocks[0](x)
    plain = keras_vit.ViT(**SMALL, classes=3)
    with pytest.raises(ValueError, match="takes no `rope` tables"):
        forward.stages(plain).blocks[0](x, rope=forward.rope_at(s, (4, 4)))


def test_rotary_models_survive_config_and_keras_saving(tmp_path):
    model = _randomise(keras_vit.ViT(**SMALL, classes=3, **CASES["pe"], qkv_bias=(False, True, True)))
    config = model.get_config()
    assert config["block_config"]["rope_settings"] == {"reference_grid": (4, 4)}
    restored = keras_vit.ViT.from_config(json.loads(json.dumps(config)))
    assert restored.block_config == model.block_config
    x = np.random.default_rng(0).normal(size=(2, 20, 28, 3)).astype("float32")
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(x)), to_numpy(model(x)), atol=1e-6)
    mixed = _randomise(keras_vit.ViT(**SMALL, classes=3, **CASES["mixed"]))
    mixed.save(path)
    np.testing.assert_allclose(to_numpy(keras.saving.load_model(path)(x)), to_numpy(mixed(x)), atol=1e-6)


def test_rotary_model_trains_every_weight():
    model = _randomise(keras_vit.ViT(**SMALL, classes=3, **CASES["mixed"]))
    before = {w.path: to_numpy(w).copy() for w in model.trainable_weights}
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x = np.random.default_rng(1).normal(size=(4, 16, 16, 3)).astype("float32")
    model.fit(x, np.random.default_rng(2).normal(size=(4, 3)).astype("float32"), verbose=0)
    for weight in model.trainable_weights:
        assert not np.array_equal(to_numpy(weight), before[weight.path]), weight.path


@pytest.mark.parametrize("options", [
    dict(rope_layout="half", qkv_bias=(True, False, True)),
    dict(rope_layout="interleaved", out_bias=False, out_norm=1e-6, qk_norm_kind="rmsnorm"),
])
def test_attention_layer_contract_with_rotary_tables(options):
    tables = to_numpy(RotaryEmbedding(4, "dinov3", num_prefix_tokens=1).tables((2, 3)))

    class WithTables(MultiHeadSelfAttention):
        # The harness calls layers with one input: these tables ride along.
        def call(self, x, training=None, **kwargs):
            return super().call(x, training=training, rope=tables)

    keras.saving.get_custom_objects()["WithTables"] = WithTables
    try:
        x = np.random.default_rng(0).normal(size=(2, 7, 8)).astype("float32")
        layer, out = run_layer_test(lambda **kw: WithTables(2, 4, **options, **kw), x, expected_shape=(2, 7, 8))
    finally:
        del keras.saving.get_custom_objects()["WithTables"]
    names = {w.path.split("/", 1)[1] for w in layer.weights}
    assert ("key/bias" in names) == (options.get("qkv_bias", True) is True)
    assert ("out/bias" in names) == options.get("out_bias", True)
    assert ("norm/gamma" in names) == ("out_norm" in options)


@pytest.mark.parametrize("layer", [
    lambda **kw: MlpBlock(12, activation="gelu", use_bias=False, norm=1e-6, **kw),
    lambda **kw: SwiGluMlp(12, use_bias=False, norm=1e-5, norm_kind="rmsnorm", **kw),
])
def test_mlp_options_layer_contract(layer):
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    built, _ = run_layer_test(layer, x, expected_shape=(2, 3, 8))
    assert not [w for w in built.weights if w.path.endswith("bias") and "norm" not in w.path]


@pytest.mark.parametrize("fields, match", [
    (dict(qkv_bias=(True, False)), "`qkv_bias` must be True, False or a"),
    (dict(qkv_bias=(True, 0, True)), "`qkv_bias` must be True, False or a"),
    (dict(rope="dinov4"), "`rope` must be one of"),
    (dict(rope_settings={"base": 10.0}), "`rope_settings` needs a `rope` variant"),
    (dict(rope="dinov3", rope_settings={"reference_grid": 4}), "`reference_grid` applies to index"),
    (dict(rope="eva02", rope_settings={"bas": 10.0}), "did you mean 'base'"),
    (dict(rope="eva02", rope_settings=[("base", 10.0)]), "`rope_settings` must be None or a dict"),
    (dict(mlp_norm=1), "`mlp_norm` must be True or False"),
    (dict(attention_out_bias="no"), "`attention_out_bias` must be True or False"),
])
def test_bad_block_options_are_named(fields, match):
    with pytest.raises(ValueError, match=match):
        BlockConfig(**fields)


def test_records_normalise_and_round_trip_the_new_fields():
    config = BlockConfig(qkv_bias=[True, False, True], rope="pe", rope_settings={"reference_grid": [14, 14]})
    assert config.qkv_bias == (True, False, True)
    assert config.rope_settings == {"reference_grid": (14, 14)}
    assert BlockConfig.from_config(json.loads(json.dumps(config.get_config()))) == config
    assert BlockConfig(qkv_bias=(False, False, False)).qkv_bias is False
    assert EncoderConfig(position_embedding="none").position_embedding == "none"


def test_rotary_heads_must_split_into_quarters():
    with pytest.raises(ValueError, match="`head_dim` must be a multiple of 4"):
        keras_vit.ViT(**dict(SMALL, hidden_size=12, num_heads=2), rope="dinov3")


def test_rope_and_patch_dropout_are_refused_together():
    with pytest.raises(ValueError, match="`patch_dropout_rate` cannot be combined with `rope`"):
        keras_vit.ViT(**SMALL, rope="dinov3", patch_dropout_rate=0.5)


def test_position_similarity_needs_an_absolute_embedding():
    from keras_vit.inspection import position_embedding_similarity

    with pytest.raises(ValueError, match="no absolute position embedding"):
        position_embedding_similarity(keras_vit.ViT(**SMALL, rope="dinov3", position_embedding="none"))
