"""`keras_vit.from_preset` on every layout, against the reference libraries'
own forward passes (transformers, keras-hub) or an independent NumPy one
(timm, whose library is not importable here)."""


import keras
import numpy as np
import pytest

import keras_vit
from conftest import spread, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from hub_dirs import populate_hf_cache, random_timm_state, timm_forward, write_timm_hub

pytestmark = spread("each layout's reader and key table over layers held on every backend; each case once")

TINY_HF = dict(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=2,
               num_attention_heads=2, intermediate_size=32)
# (transformers class, config changes)
HF_CASES = {
    "vit": ("ViTForImageClassification", dict(id2label={"0": "cat", "1": "dog", "2": "eel"})),
    "vit-tanh-nobias": ("ViTForImageClassification", dict(hidden_act="gelu_new", qkv_bias=False,
                                                          layer_norm_eps=1e-6, num_labels=4)),
    "vit-base": ("ViTModel", {}),
    "deit": ("DeiTForImageClassification", dict(num_labels=3)),
    "deit-teacher": ("DeiTForImageClassificationWithTeacher", dict(num_labels=3, hidden_act="gelu_pytorch_tanh")),
}


def _images(seed=0, size=32, batch=2):
    return np.random.default_rng(seed).uniform(-1, 1, (batch, size, size, 3)).astype("float32")


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """Random tiny transformers models, saved, with their own outputs."""
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    x = _images()
    out = {}
    for case, (name, change) in HF_CASES.items():
        config_cls = transformers.DeiTConfig if name.startswith("DeiT") else transformers.ViTConfig
        model = getattr(transformers, name)(config_cls(**TINY_HF, **change)).eval()
        with torch.no_grad():  # non-trivial LayerNorm and token weights
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
            result = model(torch.from_numpy(x.transpose(0, 3, 1, 2)))
        folder = tmp_path_factory.mktemp(case)
        model.save_pretrained(folder)
        outputs = {k: v.numpy() for k, v in result.items() if isinstance(v, torch.Tensor)}
        out[case] = dict(folder=str(folder), model=model, outputs=outputs)
    return out


@pytest.mark.parametrize("case", list(HF_CASES))
def test_transformers_directories_give_transformers_outputs(hf, case):
    entry = hf[case]
    model = keras_vit.from_preset(entry["folder"])
    y = to_numpy(model(_images()))
    expected = entry["outputs"]["last_hidden_state" if case == "vit-base" else "logits"]
    np.testing.assert_allclose(y, expected, rtol=0, atol=2e-5)
    config = entry["model"].config
    assert model.mlp_activation == ("gelu" if config.hidden_act == "gelu" else "gelu_tanh")
    assert model.layer_norm_epsilon == config.layer_norm_eps
    assert model.qkv_bias == config.qkv_bias
    assert model.distillation_token == case.startswith("deit")


def test_distilled_heads_are_both_reachable(hf):
    entry = hf["deit-teacher"]
    model = keras_vit.from_preset(entry["folder"])
    heads = keras.Model(model.input, [model.get_layer("head").output, model.get_layer("head_dist").output])
    first, second = (to_numpy(t) for t in heads(_images()))
    np.testing.assert_allclose(first, entry["outputs"]["cls_logits"], rtol=0, atol=2e-5)
    np.testing.assert_allclose(second, entry["outputs"]["distillation_logits"], rtol=0, atol=2e-5)
    np.testing.assert_allclose(to_numpy(model(_images())), (first + second) / 2, rtol=0, atol=1e-6)


def test_transformers_class_names_and_preprocessing_travel(hf, tmp_path):
    import shutil

    from transformers import ViTImageProcessorPil

    folder = tmp_path / "with_processor"
    shutil.copytree(hf["vit"]["folder"], folder)
    ViTImageProcessorPil(size={"height": 32, "width": 32}, image_mean=[0.4, 0.5, 0.6],
                         image_std=[0.2, 0.25, 0.3]).save_pretrained(folder)
    model = keras_vit.from_preset(folder)
    assert model.class_names == ("cat", "dog", "eel")
    preds = np.array([[0.1, 0.7, 0.2]], "float32")
    assert keras_vit.decode_predictions(preds, top=2, model=model) == [[(1, "dog", pytest.approx(0.7)), (2, "eel", pytest.approx(0.2))]]
    x = np.full((1, 2, 2, 3), 255, "uint8")
    np.testing.assert_allclose(keras_vit.preprocess_input(x, model=model)[0, 0, 0],
                               [(1 - 0.4) / 0.2, (1 - 0.5) / 0.25, (1 - 0.6) / 0.3], rtol=1e-6)
    # A new head has no names.
    with pytest.warns(UserWarning, match="zero-initialised"):
        other = keras_vit.from_preset(folder, classes=5)
    assert other.class_names is None
    with pytest.raises(ValueError, match="class names"):
        keras_vit.decode_predictions(np.zeros((1, 5)), model=other)


def test_sharded_and_pickle_free_torch_files(hf, tmp_path):
    import torch

    entry = hf["vit"]
    sharded = tmp_path / "sharded"
    entry["model"].save_pretrained(sharded, max_shard_size="4KB")
    assert (sharded / "model.safetensors.index.json").exists()
    binary = tmp_path / "bin"
    binary.mkdir()
    torch.save(entry["model"].state_dict(), binary / "pytorch_model.bin")
    (binary / "config.json").write_text((sharded / "config.json").read_text())
    for folder in (sharded, binary):
        y = to_numpy(keras_vit.from_preset(str(folder))(_images()))
        np.testing.assert_allclose(y, entry["outputs"]["logits"], rtol=0, atol=2e-5)


def test_strict_loading_names_the_file_and_the_keys(hf, tmp_path):
    from safetensors.numpy import load_file, save_file

    import shutil

    folder = tmp_path / "broken"
    shutil.copytree(hf["vit"]["folder"], folder)
    state = load_file(folder / "model.safetensors")
    state["vit.extra.weight"] = np.zeros(3, "float32")
    del state["vit.layernorm.bias"]
    state["classifier.bias"] = np.zeros(7, "float32")
    save_file(state, folder / "model.safetensors")
    with pytest.raises(ValueError) as info:
        keras_vit.from_preset(str(folder))
    message = str(info.value)
    for part in ("model.safetensors", "vit.extra.weight", "Transformer/encoder_norm/bias", "head/bias"):
        assert part in message


def test_overrides_follow_the_weights_rules(hf):
    entry = hf["deit-teacher"]
    model = keras_vit.from_preset(entry["folder"], image_size=48, classifier_activation="softmax")
    assert model.grid_size == (6, 6)
    probs = to_numpy(model(_images(size=48)))
    np.testing.assert_allclose(probs.sum(-1), 1, rtol=1e-5)
    features = keras_vit.from_preset(entry["folder"], include_top=False, pooling="token")
    assert features.output_shape == (None, 16)
    with pytest.raises(ValueError, match="hidden_size"):
        keras_vit.from_preset(entry["folder"], hidden_size=32)


def test_hf_handle_loads_offline_from_the_cache(hf, tmp_path, monkeypatch):
    constants = pytest.importorskip("huggingface_hub").constants
    cache = tmp_path / "cache"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    populate_hf_cache(str(cache), "tiny-org/deit", hf["deit-teacher"]["folder"])
    model = keras_vit.from_preset("hf://tiny-org/deit@main")
    np.testing.assert_allclose(to_numpy(model(_images())), hf["deit-teacher"]["outputs"]["logits"], rtol=0, atol=2e-5)


# timm Hub directories: tiny models through `model_args` (as timm's own
# exports record them), checked against `timm_forward` in timm's layout.
TIMM_CASES = {
    "plain": ("vit_base_patch16_224", {}, dict(), "token"),
    "distilled": ("deit_base_distilled_patch16_224", {}, dict(distilled=True), "token"),
    "reg4-posrows": ("vit_so150m_patch16_reg4_gap_256", {}, dict(class_token=False, reg_tokens=4), "avg"),
    "cls-reg-noembed": ("vit_base_patch16_224", dict(reg_tokens=2, no_embed_class=True),
                        dict(reg_tokens=2, no_embed_class=True), "token"),
    "reg4-layerscale": ("vit_medium_patch16_reg4_gap_256", {}, dict(class_token=False, reg_tokens=4,
                                                                    no_embed_class=True, fc_norm=True,
                                                                    layer_scale=True), "avg"),
    "dinov2-reg4": ("vit_small_patch14_reg4_dinov2", {}, dict(reg_tokens=4, no_embed_class=True,
                                                             layer_scale=True), "token"),
}
_TINY_TIMM = dict(img_size=32, patch_size=8, embed_dim=16, depth=2, num_heads=2, mlp_ratio=2.0)


@pytest.mark.parametrize("case", list(TIMM_CASES))
def test_timm_hub_directories_match_timm_forward(tmp_path, rng, case):
    architecture, extra_args, state_args, pool = TIMM_CASES[case]
    state = random_timm_state(rng, **state_args)
    folder = write_timm_hub(tmp_path, architecture, state, 5, model_args=dict(_TINY_TIMM, **extra_args),
                            label_names=[f"n{i}" for i in range(5)])
    model = keras_vit.from_preset(folder)
    x = _images()
    expected = timm_forward(state, x, heads=2, no_embed_class=state_args.get("no_embed_class", False), pool=pool)
    np.testing.assert_allclose(to_numpy(model(x)), expected, rtol=0, atol=2e-5)
    assert model.num_register_tokens == state_args.get("reg_tokens", 0)
    assert model.class_names == tuple(f"n{i}" for i in range(5))
    assert model.preprocessing.mode == "inception"


def test_timm_unknown_tensor_is_reported(tmp_path, rng):
    state = random_timm_state(rng)
    state["blocks.0.attn.q_norm.weight"] = np.ones(8, "float32")
    folder = write_timm_hub(tmp_path, "vit_base_patch16_224", state, 5, model_args=_TINY_TIMM)
    with pytest.raises(ValueError, match=r"(?s)model\.safetensors.*blocks\.0\.attn\.q_norm\.weight"):
        keras_vit.from_preset(folder)


@pytest.fixture(scope="module")
def keras_hub_presets(tmp_path_factory):
    keras_hub = pytest.importorskip("keras_hub")
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.ViTBackbone(image_shape=(32, 32, 3), patch_size=8, num_layers=2,
                                            num_heads=2, hidden_dim=16, mlp_dim=32)
    for v in backbone.weights:  # non-trivial LayerNorm and token weights
        v.assign(v + np.random.default_rng(1).normal(0, 0.1, v.shape).astype("float32"))
    converter = keras_hub.layers.ViTImageConverter(image_size=(32, 32), scale=1 / 127.5, offset=-1.0)
    classifier = keras_hub.models.ViTImageClassifier(
        backbone=backbone, num_classes=3, intermediate_dim=12,
        preprocessor=keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter))
    # OpenAI CLIP-style: a patch embedding without bias.
    no_bias = keras_hub.models.ViTBackbone(image_shape=(32, 32, 3), patch_size=8, num_layers=1,
                                           num_heads=2, hidden_dim=16, mlp_dim=32, use_patch_bias=False)
    for v in no_bias.weights:
        v.assign(v + np.random.default_rng(2).normal(0, 0.1, v.shape).astype("float32"))
    models = (("backbone", backbone), ("classifier", classifier), ("no-patch-bias", no_bias))
    folders = {}
    for name, model in models:
        folders[name] = str(tmp_path_factory.mktemp(name))
        model.save_to_preset(folders[name])
    x = _images()
    # Called directly: keras-hub's `predict` would run the preprocessor too.
    return folders, {name: to_numpy(model(x)) for name, model in models}


@pytest.mark.parametrize("kind", ["backbone", "classifier", "no-patch-bias"])
def test_keras_hub_presets_give_keras_hub_outputs(keras_hub_presets, kind):
    folders, outputs = keras_hub_presets
    model = keras_vit.from_preset(folders[kind])
    np.testing.assert_allclose(to_numpy(model(_images())), outputs[kind], rtol=0, atol=2e-5)
    if kind == "classifier":
        assert model.representation_size == 12 and model.preprocessing.mode == "inception"
