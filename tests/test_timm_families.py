"""timm Hub directories of CLIP and SigLIP image towers (`vit_*_clip_*`,
`vit_*_siglip_*`) and of DINOv2 (`vit_*_patch14_dinov2`,
`vit_*_patch14_reg4_dinov2`). timm is not importable here, so a random tiny
transformers `CLIPVisionModel[WithProjection]` / `SiglipVisionModel` /
`Dinov2Model` / `Dinov2WithRegistersModel` is renamed into timm's layout by
the test helpers (`hub_dirs.transformers_to_timm_*`, written apart from
keras_vit's rules) and saved as a timm Hub directory; `from_preset` must
reproduce transformers' own forward pass."""

import json

import keras
import numpy as np
import pytest

import keras_vit
from conftest import inference, spread, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from hub_dirs import (
    populate_hf_cache,
    randomise_torch,
    random_timm_state,
    timm_forward,
    transformers_to_timm_clip,
    transformers_to_timm_dinov2,
    transformers_to_timm_siglip,
    write_timm_hub,
)
from keras_vit.weights.formats import timm as timm_format

pytestmark = spread("timm's CLIP and SigLIP layouts: the layers are held on every backend by their "
                    "contracts; each case once")

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TINY = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
            image_size=28, patch_size=7)
# The same sizes as timm's exports record them (`model_args` in config.json).
TINY_TIMM = dict(img_size=28, patch_size=7, embed_dim=16, depth=2, num_heads=2, mlp_ratio=2.0)
CLIP_STATS = dict(mean=[0.48145466, 0.4578275, 0.40821073], std=[0.26862954, 0.26130258, 0.27577711])
# case: (transformers class, config changes, timm architecture, num_classes).
# The architecture fixes the activation, as in timm: `_quickgelu` CLIP names
# QuickGELU, the others erf; SigLIP's B/32 tanh, its B/16 erf.
CASES = {
    "clip-projection-quickgelu": ("CLIPVisionModelWithProjection", dict(hidden_act="quick_gelu", projection_dim=12),
                                  "vit_base_patch16_clip_quickgelu_224", 12),
    "clip-backbone-gelu": ("CLIPVisionModel", dict(hidden_act="gelu"), "vit_base_patch16_clip_224", 0),
    "siglip-tanh": ("SiglipVisionModel", dict(hidden_act="gelu_pytorch_tanh"), "vit_base_patch32_siglip_256", 0),
    "siglip-erf": ("SiglipVisionModel", dict(hidden_act="gelu"), "vit_base_patch16_siglip_224", 0),
}


def _images(height=28, width=28, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, height, width, 3)).astype("float32")


def _timm_resize_patched(monkeypatch, calls):
    """Makes torch's `interpolate` antialias, as timm's `resample_abs_pos_embed`
    does, recording each call's mode; returns the unpatched function."""
    plain = torch.nn.functional.interpolate

    def timm_resample(*args, **kwargs):
        calls.append(kwargs.get("mode"))
        return plain(*args, **dict(kwargs, antialias=True))

    monkeypatch.setattr(torch.nn.functional, "interpolate", timm_resample)
    return plain


def _run(model, x, **kwargs):
    """transformers' outputs: (pooled, last_hidden_state, that state after
    `post_layernorm`)."""
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), **kwargs)
        normed = getattr(model, "vision_model", model).post_layernorm(out.last_hidden_state)
    pooled = out.image_embeds if hasattr(out, "image_embeds") else out.pooler_output
    return pooled.numpy(), out.last_hidden_state.numpy(), normed.numpy()


@pytest.fixture(scope="module")
def timm_dirs(tmp_path_factory):
    """`{case: (folder, transformers model)}`, every tensor moved off its
    initial value (LayerNorms, tokens, the probe included)."""
    out = {}
    for seed, (case, (name, changes, architecture, classes)) in enumerate(CASES.items()):
        family = "CLIP" if name.startswith("CLIP") else "Siglip"
        config = getattr(transformers, f"{family}VisionConfig")(**TINY, **changes)
        model = randomise_torch(getattr(transformers, name)(config), seed)
        state = {k: v.numpy() for k, v in model.state_dict().items() if "position_ids" not in k}
        convert = transformers_to_timm_clip if family == "CLIP" else transformers_to_timm_siglip
        stats = CLIP_STATS if family == "CLIP" else {}
        folder = write_timm_hub(tmp_path_factory.mktemp(case), architecture, convert(state), classes,
                                pretrained_cfg=dict(input_size=[3, 28, 28], crop_pct=1.0, **stats),
                                model_args=TINY_TIMM)
        out[case] = (folder, model.eval())
    return out


def _ours(model, x):
    """The model's output and `forward_features` as NumPy (one compiled program on jax)."""
    return inference(lambda x: (model(x), model.forward_features(x)), x)


@pytest.mark.parametrize("case", list(CASES))
def test_timm_clip_and_siglip_directories_reproduce_transformers(timm_dirs, case):
    """The output is timm's: CLIP's projected class token (`image_embeds`)
    or, without a head, `pooler_output`; SigLIP's attention pool
    (`pooler_output`). `forward_features` is timm's: the tokens after `norm`,
    which for CLIP is `post_layernorm` on every token (transformers'
    `last_hidden_state` is the last block's output)."""
    folder, reference = timm_dirs[case]
    pooled, last, normed = _run(reference, _images())
    model = keras_vit.from_preset(folder)
    x = _images()
    out, features = _ours(model, x)
    np.testing.assert_allclose(out, pooled, rtol=0, atol=1e-4)
    blocks = keras.Model(model.input, model.get_layer(f"encoderblock_{model.num_layers - 1}").output)
    if case.startswith("clip"):
        assert model.encoder_config.pre_norm and not model.encoder_config.patch_bias
        assert model.num_prefix_tokens == 1
        np.testing.assert_allclose(to_numpy(blocks(x)), last, rtol=0, atol=1e-4)
        np.testing.assert_allclose(features, normed, rtol=0, atol=1e-4)
    else:
        assert model.num_prefix_tokens == 0 and model.classifier == "map"
        np.testing.assert_allclose(features, last, rtol=0, atol=1e-4)
    expected = {"clip-projection-quickgelu": "quick_gelu", "siglip-tanh": "gelu_tanh"}.get(case, "gelu")
    assert model.block_config.mlp_activation == expected


@pytest.mark.parametrize("case", ["clip-projection-quickgelu", "siglip-tanh"])
def test_timm_directories_at_another_image_size_resize_as_timm(timm_dirs, case, monkeypatch):
    """At 42x35 pixels (6x5 patches from 4x4) keras_vit resizes the position
    embedding as timm's `resample_abs_pos_embed` does (bicubic with
    antialiasing), where transformers' `interpolate_pos_encoding` uses plain
    bicubic: the reference is transformers with its resize made timm's."""
    folder, reference = timm_dirs[case]
    calls = []
    x = _images(42, 35, seed=3)
    plain = _timm_resize_patched(monkeypatch, calls)
    pooled, last, normed = _run(reference, x, interpolate_pos_encoding=True)
    monkeypatch.setattr(torch.nn.functional, "interpolate", plain)
    assert calls == ["bicubic"]
    model = keras_vit.from_preset(folder).for_inference(image_size=(42, 35))
    assert model.encoder_config.position_interpolation == "timm"
    out, features = _ours(model, x)
    np.testing.assert_allclose(out, pooled, rtol=0, atol=1e-4)
    np.testing.assert_allclose(features, normed if case.startswith("clip") else last, rtol=0, atol=1e-4)


def test_timm_siglip_directory_loads_through_an_hf_handle(timm_dirs, tmp_path, monkeypatch):
    constants = pytest.importorskip("huggingface_hub").constants
    cache = tmp_path / "cache"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder, reference = timm_dirs["siglip-tanh"]
    populate_hf_cache(str(cache), "timm/vit_base_patch32_siglip_256.tiny", folder)
    model = keras_vit.from_preset("hf://timm/vit_base_patch32_siglip_256.tiny")
    np.testing.assert_allclose(to_numpy(model(_images())), _run(reference, _images())[0], rtol=0, atol=1e-4)


def test_timm_siglip_gap_directory_matches_timm_forward(tmp_path, rng):
    """`vit_*_siglip_gap_*`: no class token, the mean of the tokens after
    `norm`, erf GELU for B/16 (NumPy forward pass in timm's layout)."""
    state = random_timm_state(rng, class_token=False)
    folder = write_timm_hub(tmp_path, "vit_base_patch16_siglip_gap_224", state, 5,
                            model_args=dict(TINY_TIMM, img_size=32, patch_size=8))
    model = keras_vit.from_preset(folder)
    x = _images(32, 32)
    expected = timm_forward(state, x, heads=2, pool="avg")
    np.testing.assert_allclose(to_numpy(model(x)), expected, rtol=0, atol=2e-5)
    assert model.classifier == "gap" and not model.pooled_norm


@pytest.mark.parametrize("registers", [0, 4])
def test_timm_dinov2_directory_without_head_gives_the_pooled_class_token(tmp_path, rng, registers):
    """timm's DINOv2 Hub directories have no head (`num_classes` 0): timm's
    output is the class token after `norm`, what an identity head would give."""
    state = random_timm_state(rng, reg_tokens=registers, no_embed_class=bool(registers), layer_scale=True)
    name = "vit_small_patch14_reg4_dinov2" if registers else "vit_small_patch14_dinov2"
    identity = dict(state, **{"head.weight": np.eye(16, dtype="float32"), "head.bias": np.zeros(16, "float32")})
    backbone = {k: v for k, v in state.items() if not k.startswith("head.")}
    folder = write_timm_hub(tmp_path, name, backbone, 0,
                            model_args=dict(TINY_TIMM, img_size=32, patch_size=8, reg_tokens=registers))
    model = keras_vit.from_preset(folder)
    x = _images(32, 32)
    expected = timm_forward(identity, x, heads=2, no_embed_class=bool(registers), pool="token")
    np.testing.assert_allclose(to_numpy(model(x)), expected, rtol=0, atol=2e-5)
    assert model.pooling == "token" and model.position_interpolation == "timm"


# registers: (transformers class, timm architecture); TINY_TIMM's mlp_ratio 2.
DINOV2 = {0: ("Dinov2Model", "vit_small_patch14_dinov2"),
          4: ("Dinov2WithRegistersModel", "vit_small_patch14_reg4_dinov2")}


@pytest.fixture(scope="module")
def timm_dinov2_dirs(tmp_path_factory):
    """`{registers: (folder, transformers model)}`: timm DINOv2 Hub
    directories (no head) renamed from random transformers backbones."""
    out = {}
    for registers, (name, architecture) in DINOV2.items():
        config = getattr(transformers, name.replace("Model", "Config"))(
            hidden_size=16, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2, image_size=28,
            patch_size=7, layerscale_value=0.5, **({"num_register_tokens": registers} if registers else {}))
        model = randomise_torch(getattr(transformers, name)(config), seed=10 + registers)
        state = {k: v.numpy() for k, v in model.state_dict().items()}
        folder = write_timm_hub(tmp_path_factory.mktemp(architecture), architecture,
                                transformers_to_timm_dinov2(state), 0,
                                pretrained_cfg=dict(input_size=[3, 28, 28], crop_pct=1.0),
                                model_args=dict(TINY_TIMM, reg_tokens=registers))
        out[registers] = (folder, model.eval())
    return out


def _dinov2_run(model, x):
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))
    return out.pooler_output.numpy(), out.last_hidden_state.numpy()


@pytest.mark.parametrize("registers", sorted(DINOV2))
def test_timm_dinov2_directories_reproduce_transformers(timm_dinov2_dirs, registers):
    """The output is the class token after `norm` (transformers'
    `pooler_output`), `forward_features` every token after it, registers
    included (`last_hidden_state`)."""
    folder, reference = timm_dinov2_dirs[registers]
    x = _images()
    pooled, last = _dinov2_run(reference, x)
    model = keras_vit.from_preset(folder)
    assert model.num_register_tokens == registers and model.position_interpolation == "timm"
    out, features = _ours(model, x)
    np.testing.assert_allclose(out, pooled, rtol=0, atol=1e-4)
    np.testing.assert_allclose(features, last, rtol=0, atol=1e-4)


@pytest.mark.parametrize("registers", sorted(DINOV2))
def test_timm_dinov2_directories_at_another_image_size_resize_as_timm(timm_dinov2_dirs, registers,
                                                                      monkeypatch):
    """At 42x35 pixels (6x5 patches from 4x4) timm's DINOv2 resizes the
    patch rows of its position table with `resample_abs_pos_embed`: torch's
    bicubic `interpolate` to the target grid (`size=`), `antialias=True`, in
    float32. transformers 5.23 resizes the same rows to the same `size=` in
    float32 (no scale factor: the original DINOv2 code's `+ 0.1` offset is
    not there), without antialiasing for `Dinov2Model` and with it for
    `Dinov2WithRegistersModel`; adding `antialias=True` to its one call
    makes it exactly timm's resize (a no-op with registers). The class row
    is not resized by either (timm's register model holds it in `cls_token`)."""
    folder, reference = timm_dinov2_dirs[registers]
    calls = []
    x = _images(42, 35, seed=3)
    plain = _timm_resize_patched(monkeypatch, calls)
    pooled, last = _dinov2_run(reference, x)
    monkeypatch.setattr(torch.nn.functional, "interpolate", plain)
    assert calls == ["bicubic"]
    model = keras_vit.from_preset(folder).for_inference(image_size=(42, 35))
    assert model.encoder_config.position_interpolation == "timm"
    out, features = _ours(model, x)
    np.testing.assert_allclose(out, pooled, rtol=0, atol=1e-4)
    np.testing.assert_allclose(features, last, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("vit_base_patch16_clip_224", dict(pre_norm=True, patch_bias=False, layer_norm_epsilon=1e-5,
                                           mlp_activation="gelu", classifier="token")),
        ("vit_large_patch14_clip_quickgelu_336", dict(hidden_size=1024, num_layers=24, image_size=(336, 336),
                                                      mlp_activation="quick_gelu")),
        ("vit_base_patch16_plus_clip_240", dict(hidden_size=896, num_heads=14, image_size=(240, 240))),
        ("vit_xsmall_patch16_clip_224", dict(hidden_size=256, num_layers=10, num_heads=4)),
        ("vit_base_patch16_siglip_224", dict(classifier="map", pooling="map", mlp_activation="gelu",
                                             layer_norm_epsilon=1e-6, include_top=False)),
        ("vit_large_patch16_siglip_512", dict(mlp_activation="gelu_tanh", num_layers=24)),
        ("vit_large_patch16_siglip_384", dict(mlp_activation="gelu")),
        ("vit_so400m_patch14_siglip_378", dict(hidden_size=1152, num_layers=27, mlp_dim=4304,
                                               patch_size=(14, 14))),
        ("vit_so400m_patch16_siglip_gap_256", dict(classifier="gap", pooling="avg", mlp_activation="gelu_tanh",
                                                   pooled_norm=False)),
        ("vit_giantopt_patch16_siglip_384", dict(hidden_size=1536, num_layers=40, mlp_activation="gelu_tanh")),
    ],
)
def test_timm_clip_and_siglip_architecture_table(name, expected):
    """Each name's arguments as timm's model functions give them
    (timm/models/vision_transformer.py)."""
    args, _ = timm_format.model_arguments({"architecture": name, "num_classes": 0, "pretrained_cfg": {}})
    assert {k: args.get(k) for k in expected} == expected
    assert args["position_interpolation"] == "timm"


@pytest.mark.parametrize(
    "name, model_args, match",
    [
        ("vit_small_patch16_siglip_224", {}, r"vit_small_patch16_siglip_224.*closest.*siglip"),
        ("vit_base_patch16_siglip_224", {"class_token": True}, "global_pool"),
        ("vit_base_patch16_siglip_224", {"reg_tokens": 4}, "global_pool"),
        ("vit_base_patch16_clip_224", {"norm_layer": "batchnorm"}, "norm_layer"),
        ("vit_base_patch16_clip_224", {"mlp_layer": "swiglu"}, "act_layer"),
        ("vit_base_patch16_clip_224", {"act_layer": "silu"}, "act_layer"),
        ("vit_base_patch16_clip_224", {"pool_include_prefix": True}, "pool_include_prefix=True"),
    ],
)
def test_timm_towers_keras_vit_cannot_build_are_refused(name, model_args, match):
    with pytest.raises(ValueError, match=match):
        timm_format.model_arguments({"architecture": name, "model_args": model_args, "pretrained_cfg": {}})


def test_timm_attention_pool_tensor_keras_vit_lacks_is_reported(timm_dirs, tmp_path):
    """A query norm in the attention pool (timm's `qk_norm`) has no place:
    strict loading names it."""
    from safetensors.numpy import load_file, save_file

    folder = timm_dirs["siglip-erf"][0]
    state = load_file(f"{folder}/model.safetensors")
    state["attn_pool.q_norm.weight"] = np.ones(8, "float32")
    save_file(state, str(tmp_path / "model.safetensors"))
    with open(f"{folder}/config.json") as f:
        (tmp_path / "config.json").write_text(json.dumps(json.load(f)))
    with pytest.raises(ValueError, match=r"attn_pool\.q_norm\.weight"):
        keras_vit.from_preset(str(tmp_path))


@pytest.mark.parametrize("case", ["clip-projection-quickgelu", "siglip-tanh"])
def test_timm_table_reads_every_tower_tensor_and_writes_it_back(timm_dirs, case):
    """Every tensor has a rule (none left under its timm name), and the same
    table writes the canonical tensors back to the file's (the fused `qkv`
    and the attention pool's `kv` re-fused)."""
    from safetensors.numpy import load_file

    state = load_file(f"{timm_dirs[case][0]}/model.safetensors")
    params, unknown = timm_format.TABLE.to_canonical(state, num_heads=2)
    assert unknown == []
    back = timm_format.TABLE.from_canonical(params)
    assert sorted(back) == sorted(state)
    for key, value in state.items():
        np.testing.assert_array_equal(back[key], value, err_msg=key)
