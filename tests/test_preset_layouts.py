"""Preset layouts without building keras_vit models: key tables, configs,
preprocessing records, layout detection and `hf://` resolution offline."""

import json
import os

import numpy as np
import pytest

from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from hub_dirs import offline_hub, populate_hf_cache, random_timm_state, write_timm_hub  # noqa: F401 (a fixture)
from keras_vit import presets
from keras_vit.preprocessing import Preprocessing, preprocess_input
from keras_vit.weights import shards
from keras_vit.families import keras_hub_source as keras_hub_format
from keras_vit.weights.formats import keras_hub_family
from keras_vit.weights.formats import timm as timm_format
from keras_vit.families import transformers_source as hf_format
from keras_vit.weights.formats import transformers_processor
from keras_vit.families.vit import TransformersViT
from conftest import runs_once

pytestmark = runs_once("torch", "layouts are read from files and tables, no model is built")

TINY_HF = dict(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=2,
               num_attention_heads=2, intermediate_size=32, num_labels=3)
HF_ARCHITECTURES = (
    "ViTForImageClassification", "ViTModel",
    "DeiTForImageClassification", "DeiTForImageClassificationWithTeacher",
)


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """transformers' own `save_pretrained` output of each architecture."""
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    out = {}
    for name in HF_ARCHITECTURES:
        config_cls = transformers.DeiTConfig if name.startswith("DeiT") else transformers.ViTConfig
        model = getattr(transformers, name)(config_cls(**TINY_HF))
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        out[name] = (str(folder), {k: v.numpy() for k, v in model.state_dict().items()})
    return out


@pytest.mark.parametrize("architecture", HF_ARCHITECTURES)
def test_transformers_table_reads_every_tensor_and_writes_it_back(hf_dirs, architecture):
    folder, _ = hf_dirs[architecture]
    state, path = shards.read_state(folder)
    assert path.endswith("model.safetensors")
    config = json.load(open(os.path.join(folder, "config.json")))
    assert hf_format.TRANSFORMERS_FAMILIES.find(config).transformers_class(config) == architecture
    table = TransformersViT().rule_table(architecture)
    params, unknown = table.to_canonical(state, num_heads=2)
    assert unknown == []
    assert params["Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel"].shape == (16, 2, 8)
    assert params["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/out/kernel"].shape == (2, 8, 16)
    assert params["embedding/kernel"].shape == (8, 8, 3, 16)
    assert ("dist" in params) == architecture.startswith("DeiT")
    assert ("head_dist/kernel" in params) == architecture.endswith("Teacher")
    assert ("pre_logits/kernel" in params) == (architecture == "ViTModel")  # the tanh pooler
    back = table.from_canonical(params)
    assert sorted(back) == sorted(state)
    for key in state:
        np.testing.assert_array_equal(back[key], state[key])


@pytest.mark.parametrize("architecture", ["ViTForImageClassification", "DeiTForImageClassificationWithTeacher"])
def test_transformers_in_memory_names_read_as_the_saved_ones(hf_dirs, architecture):
    # transformers 5 names its modules `layers.{i}.attention.q_proj` in
    # memory and renames when saving; a raw `state_dict()` must read the same.
    folder, memory = hf_dirs[architecture]
    saved, _ = shards.read_state(folder)
    table = TransformersViT().rule_table(architecture)
    from_file, _ = table.to_canonical(saved, 2)
    from_memory, unknown = table.to_canonical(memory, 2)
    assert unknown == [] and sorted(from_memory) == sorted(from_file)
    for key in from_file:
        np.testing.assert_array_equal(from_memory[key], from_file[key])


def test_transformers_config_arguments(hf_dirs):
    config = json.load(open(os.path.join(hf_dirs["DeiTForImageClassificationWithTeacher"][0], "config.json")))
    args = hf_format.model_arguments(dict(config, hidden_act="gelu_new", qkv_bias=False,
                                          id2label={"0": "cat", "1": "dog", "2": "eel"}))
    assert args["mlp_activation"] == "gelu_tanh" and args["qkv_bias"] is False
    assert args["distillation_token"] and args["distillation_head"]
    assert args["layer_norm_epsilon"] == 1e-12 and args["classes"] == 3
    assert args["class_names"] == ["cat", "dog", "eel"]
    plain = hf_format.model_arguments(json.load(open(os.path.join(hf_dirs["ViTModel"][0], "config.json"))))
    assert plain["include_top"] is False and plain["distillation_token"] is False
    assert plain["mlp_activation"] == "gelu"
    assert "class_names" not in plain  # LABEL_i names are no names


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(model_type="vit-hybrid"), "vit-hybrid"),
        (dict(model_type="swin"), "model_type"),
        (dict(hidden_act="quick_gelu"), "hidden_act"),
        (dict(architectures=["ViTForSomethingElse"]), "ViTForSomethingElse"),
        (dict(head_dim=4), "head_dim"),
    ],
)
def test_transformers_configs_keras_vit_cannot_build_are_refused(change, match):
    config = dict(model_type="vit", architectures=["ViTForImageClassification"], hidden_size=16,
                  num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    with pytest.raises(ValueError, match=match):
        hf_format.model_arguments(dict(config, **change))


@pytest.mark.parametrize("processor", ["ViTImageProcessor", "DeiTImageProcessor"])
@pytest.mark.parametrize("rescale", [True, False])
def test_transformers_preprocessing_matches_the_image_processor(tmp_path, processor, rescale):
    transformers = pytest.importorskip("transformers")
    mean, std = [0.48, 0.46, 0.41], [0.23, 0.22, 0.26]
    if not rescale:  # statistics in pixel units
        mean, std = [255 * m for m in mean], [255 * s for s in std]
    cls = getattr(transformers, processor + "Pil")
    kwargs = dict(image_mean=mean, image_std=std, do_rescale=rescale, size={"height": 32, "width": 32})
    if processor.startswith("DeiT"):
        kwargs.update(crop_size={"height": 32, "width": 32})
    cls(**kwargs).save_pretrained(tmp_path)
    config = json.load(open(tmp_path / "preprocessor_config.json"))
    record = transformers_processor.preprocessing(config)
    assert record.image_size == (32, 32)
    image = np.random.default_rng(0).integers(0, 256, (32, 32, 3)).astype("uint8")
    expected = cls.from_pretrained(tmp_path)(image, return_tensors="np")["pixel_values"][0]
    model = type("M", (), {"preprocessing": record, "name": "m"})()
    ours = preprocess_input(image, model=model)
    np.testing.assert_allclose(ours.transpose(2, 0, 1), expected, rtol=0, atol=2e-6)


def test_transformers_preprocessor_round_trip():
    record = Preprocessing(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                           image_size=224, resize=(256, 256), interpolation="bicubic")
    config = transformers_processor.export_preprocessor(record)
    assert config["image_processor_type"] == "DeiTImageProcessor" and config["resample"] == 3
    back = transformers_processor.preprocessing(config)
    assert back.image_size == (224, 224) and back.resize == (256, 256)
    np.testing.assert_allclose(back.mean, record.mean)
    np.testing.assert_allclose(back.std, record.std)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("vit_base_patch16_224", dict(hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072, classifier="token")),
        ("vit_large_patch14_224", dict(hidden_size=1024, num_layers=24, num_heads=16, patch_size=(14, 14))),
        ("vit_giant_patch14_224", dict(hidden_size=1408, num_layers=40, mlp_dim=6144)),
        ("deit_tiny_distilled_patch16_224", dict(hidden_size=192, num_heads=3, distillation_token=True)),
        ("vit_base_patch16_224_miil", dict(qkv_bias=False)),
        ("vit_base_patch16_gap_224", dict(num_heads=16, classifier="gap", pooled_norm=False)),
        ("vit_base_patch16_reg4_gap_256", dict(num_register_tokens=4, classifier="gap", pooled_norm=True,
                                               image_size=(256, 256))),
        ("vit_so150m_patch16_reg4_gap_256", dict(hidden_size=896, mlp_dim=2304, num_heads=14, pooled_norm=False)),
        ("vit_medium_patch16_reg4_gap_256", dict(hidden_size=512, num_heads=8, layer_scale_init=1e-5,
                                                 num_register_tokens=4)),
        ("vit_little_patch16_reg1_gap_256", dict(hidden_size=320, num_layers=14, mlp_dim=1792)),
        ("vit_small_patch14_dinov2", dict(hidden_size=384, num_heads=6, patch_size=(14, 14),
                                          image_size=(518, 518), layer_scale_init=1e-5, classifier="token")),
        ("vit_base_patch14_reg4_dinov2", dict(hidden_size=768, num_register_tokens=4, classifier="token")),
    ],
)
def test_timm_architecture_table(name, expected):
    args, _ = timm_format.model_arguments({"architecture": name, "num_classes": 10, "pretrained_cfg": {}})
    assert {k: args[k] for k in expected} == expected
    assert args["mlp_activation"] == "gelu" and args["layer_norm_epsilon"] == 1e-6


@pytest.mark.parametrize(
    "name, model_args, match",
    [
        ("vit_medium_patch16_rope_reg1_gap_256", {}, "vit_medium_patch16_rope_reg1_gap_256.* with its Eva"),
        ("vit_base_patch16_224", {"qk_norm": True}, "qk_norm"),
        ("vit_base_patch16_224", {"global_pool": "map"}, "global_pool"),
        ("vit_base_patch16_224", {"norm_layer": "batchnorm"}, "norm_layer"),
        ("vit_base_patch16_224", {"act_layer": "silu"}, "act_layer"),
    ],
)
def test_timm_models_keras_vit_cannot_build_are_refused(name, model_args, match):
    with pytest.raises(ValueError, match=match):
        timm_format.model_arguments({"architecture": name, "model_args": model_args, "pretrained_cfg": {}})


def test_timm_labels_and_preprocessing():
    config = {
        "architecture": "deit_tiny_patch16_224", "num_classes": 2,
        "label_names": ["n1", "n2"], "label_descriptions": {"n1": "tabby cat", "n2": "dog"},
        "pretrained_cfg": {"input_size": [3, 224, 224], "crop_pct": 0.875, "interpolation": "bicubic",
                           "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
    }
    args, _ = timm_format.model_arguments(config)
    assert args["class_names"] == ["tabby cat", "dog"]
    prep = timm_format.preprocessing(config)
    assert (prep.resize, prep.image_size, prep.mode) == (256, (224, 224), "imagenet")
    squash = timm_format.preprocessing(dict(config, pretrained_cfg=dict(config["pretrained_cfg"], crop_pct=0.9, crop_mode="squash")))
    assert squash.resize == (248, 248)  # floor(224 / 0.9)


@pytest.mark.parametrize("no_embed_class", [False, True])
def test_timm_prefix_rows_fold_exactly(rng, no_embed_class):
    state = random_timm_state(rng, class_token=True, reg_tokens=3, no_embed_class=no_embed_class)
    params = timm_format.fold_prefix_rows(timm_format.to_canonical(state, 2), no_embed_class)
    posemb = params["Transformer/posembed_input/pos_embedding"]
    assert posemb.shape == (1, 1 + 16, 16)  # class row + patches, no register rows
    if no_embed_class:
        np.testing.assert_array_equal(posemb[:, 0], 0)
        np.testing.assert_array_equal(params["reg"], state["reg_token"])
    else:
        np.testing.assert_array_equal(params["reg"], state["reg_token"] + state["pos_embed"][:, 1:4])


def test_keras_hub_image_converter_statistics(tmp_path):
    converter = {"config": {"image_size": [32, 32], "scale": [1 / (255 * 0.229), 1 / (255 * 0.224), 1 / (255 * 0.225)],
                            "offset": [-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225],
                            "interpolation": "bicubic", "crop_to_aspect_ratio": True}}
    (tmp_path / "image_converter.json").write_text(json.dumps(converter))
    prep = keras_hub_family.preprocessing(str(tmp_path))
    assert prep.mode == "imagenet" and prep.image_size == (32, 32) and prep.resize == 32
    converter["config"].update(scale=1 / 127.5, offset=-1.0)
    (tmp_path / "image_converter.json").write_text(json.dumps(converter))
    assert keras_hub_family.preprocessing(str(tmp_path)).mode == "inception"


@pytest.mark.parametrize(
    "flags, task, match",
    [
        (dict(use_mlp_bias=False), None, "use_mlp_bias"),
        ({}, dict(pooling="gap"), "averages the class token"),
        ({}, dict(pooling="map"), "pooling"),
    ],
)
def test_keras_hub_presets_keras_vit_cannot_build_are_refused(tmp_path, flags, task, match):
    backbone = dict(image_shape=[32, 32, 3], patch_size=[8, 8], num_layers=1, num_heads=2,
                    hidden_dim=16, mlp_dim=32, use_class_token=True, **flags)
    (tmp_path / "config.json").write_text(json.dumps(
        {"registered_name": "keras_hub>ViTBackbone", "config": backbone}))
    if task is not None:
        (tmp_path / "task.json").write_text(json.dumps(
            {"registered_name": "keras_hub>ViTImageClassifier", "config": dict(num_classes=3, **task)}))
    with pytest.raises(ValueError, match=match):
        keras_hub_format.model_arguments(str(tmp_path))


def test_preprocessing_record_validates_and_rescales():
    with pytest.raises(ValueError, match="std"):
        Preprocessing(std=(0.5, 0.0, 0.5))
    with pytest.raises(ValueError, match="interpolation"):
        Preprocessing(interpolation="cubic-ish")
    with pytest.raises(ValueError, match="resize"):
        Preprocessing(resize=(256,))
    prep = Preprocessing.from_mode("imagenet", image_size=224, crop_fraction=0.875)
    assert prep.for_image_size(384).resize == 438 and prep.for_image_size(384).image_size == (384, 384)
    exact = Preprocessing(image_size=(224, 224), resize=(224, 224))
    assert exact.resize is None  # resizing straight to the input size
    with pytest.raises(ValueError, match="model"):
        preprocess_input(np.zeros((1, 2, 2, 3)), model=type("M", (), {"preprocessing": None, "name": "m"})())


def test_layout_detection(tmp_path, rng, hf_dirs):
    assert presets.detect_layout(hf_dirs["ViTModel"][0]) == "transformers"
    timm_dir = write_timm_hub(tmp_path / "timm", "vit_tiny_patch16_224", random_timm_state(rng), 5)
    assert presets.detect_layout(timm_dir) == "timm"
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "config.json").write_text('{"registered_name": "keras_hub>ViTBackbone"}')
    assert presets.detect_layout(str(tmp_path / "hub")) == "keras_hub"
    (tmp_path / "other").mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        presets.detect_layout(str(tmp_path / "other"))
    (tmp_path / "other" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="Cannot tell the layout"):
        presets.detect_layout(str(tmp_path / "other"))
    with pytest.raises(ValueError, match="is a file"):
        presets.preset_directory(os.path.join(timm_dir, "config.json"))
    with pytest.raises(ValueError, match="no such directory"):
        presets.preset_directory(str(tmp_path / "missing"))


def test_hf_handles_resolve_from_the_cache_offline(offline_hub, hf_dirs):
    import huggingface_hub

    folder = hf_dirs["ViTForImageClassification"][0]
    snapshot = populate_hf_cache(offline_hub, "tiny-org/tiny-vit", folder)
    second = populate_hf_cache(offline_hub, "tiny-org/tiny-vit", folder, revision="v2",
                               commit="fedcba9876543210fedcba9876543210fedcba98")
    # The library sees the repository and both revisions in its cache.
    info = huggingface_hub.scan_cache_dir(offline_hub)
    (repo,) = info.repos
    assert repo.repo_id == "tiny-org/tiny-vit" and len(repo.revisions) == 2
    assert os.path.samefile(presets.preset_directory("hf://tiny-org/tiny-vit"), snapshot)
    assert os.path.samefile(presets.preset_directory("hf://tiny-org/tiny-vit@v2"), second)
    resolved = presets.preset_directory("hf://tiny-org/tiny-vit")
    assert presets.detect_layout(resolved) == "transformers"


def test_hf_handle_offline_without_a_cached_copy_names_repo_and_cache(offline_hub):
    with pytest.raises(presets.PresetDownloadError) as info:
        presets.preset_directory("hf://tiny-org/not-cached@main")
    message = str(info.value)
    assert "tiny-org/not-cached" in message and "HF_HUB_OFFLINE" in message
    assert os.path.join(offline_hub, "models--tiny-org--not-cached") in message
    assert info.value.cache_path == os.path.join(offline_hub, "models--tiny-org--not-cached")
    with pytest.raises(ValueError, match="model repository"):
        presets.preset_directory("hf://datasets/tiny-org/data")

