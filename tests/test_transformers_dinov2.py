"""transformers DINOv2 beyond the plain backbones: the SwiGLU MLP of
DINOv2-giant (`use_swiglu_ffn`) and the linear classifiers
(`Dinov2ForImageClassification`, `Dinov2WithRegistersForImageClassification`)
made at random by transformers, loaded with `keras_vit.from_preset`, compared
with transformers' own forward pass and written back; and the "token_avg"
pooling those classifiers read."""

import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from conftest import spread, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from hub_dirs import randomise_torch
from keras_vit import export
from keras_vit.layers import TokenPooling

pytestmark = spread("DINOv2's parity: the layers are held on every backend by their contracts; each case "
                    "once")

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

# mlp_ratio 3 at width 16: SwiGLU width (int(48 * 2 / 3) + 7) // 8 * 8 = 32,
# not the plain MLP's 48.
TINY = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=3,
            image_size=28, patch_size=7, layerscale_value=0.5)
NAMES = ["cat", "dog", "eel"]
CLASSIFIERS = {
    "Dinov2ForImageClassification": (transformers.Dinov2Config, {}),
    "Dinov2WithRegistersForImageClassification": (
        transformers.Dinov2WithRegistersConfig, dict(num_register_tokens=2, use_swiglu_ffn=True)
    ),
}


def _images(height, width=None, seed=0):
    shape = (2, height, width or height, 3)
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def _save_random(model, folder, seed):
    """Saves `model` with every tensor moved off its initial value, in eval mode."""
    model = randomise_torch(model, seed)
    model.save_pretrained(folder)
    return model


def _run(model, x):
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))


def _final_tokens(model, x):
    # transformers' last hidden state is the tokens after the final norm.
    return to_numpy(keras.Model(model.input, model.get_layer("encoder_norm").output)(x))


@pytest.fixture(scope="module")
def swiglu_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dinov2_swiglu")
    model = transformers.Dinov2Model(transformers.Dinov2Config(**TINY, use_swiglu_ffn=True))
    model = _save_random(model, folder, seed=0)
    references = {}
    for size in ((28, 28), (42, 35)):
        out = _run(model, _images(*size))
        references[size] = (out.pooler_output.numpy(), out.last_hidden_state.numpy())
    return str(folder), references


def test_swiglu_file_holds_the_fused_gate_and_up_projection(swiglu_dir):
    from safetensors.numpy import load_file

    state = load_file(os.path.join(swiglu_dir[0], "model.safetensors"))
    assert state["encoder.layer.0.mlp.weights_in.weight"].shape == (2 * 32, 16)
    assert not any("fc1" in k or "gate_proj" in k for k in state)


@pytest.mark.parametrize("size", [(28, 28), (42, 35)])
def test_swiglu_backbone_reproduces_transformers(swiglu_dir, size):
    """At the checkpoint's size and at 42x35 (6x5 patches from 4x4, DINOv2's
    bicubic position resize)."""
    folder, references = swiglu_dir
    pooled, hidden = references[size]
    model = keras_vit.from_preset(folder)
    assert model.block_config.mlp_kind == "swiglu" and model.mlp_dim == 32
    if size != (28, 28):
        model = model.for_inference(image_size=size)
    x = _images(*size)
    np.testing.assert_allclose(to_numpy(model(x)), pooled, rtol=0, atol=1e-4)
    np.testing.assert_allclose(_final_tokens(model, x), hidden, rtol=0, atol=1e-4)


def test_swiglu_backbone_writes_back_to_transformers(swiglu_dir, tmp_path):
    folder, references = swiglu_dir
    pooled, hidden = references[(28, 28)]
    keras_vit.from_preset(folder).save_to_preset(tmp_path, format="transformers", preprocessing="imagenet")
    with open(tmp_path / "config.json") as f:
        config = json.load(f)
    assert config["use_swiglu_ffn"] is True and config["mlp_ratio"] == TINY["mlp_ratio"]
    again, info = transformers.Dinov2Model.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    out = _run(again.eval(), _images(28))
    np.testing.assert_allclose(out.pooler_output.numpy(), pooled, rtol=0, atol=1e-4)
    np.testing.assert_allclose(out.last_hidden_state.numpy(), hidden, rtol=0, atol=1e-4)


def test_swiglu_width_transformers_cannot_hold_is_refused(tmp_path):
    # 40 is no SwiGLU width of an integer ratio at width 16 (1 -> 16, 2 -> 24, 3 -> 32, 4 -> 48).
    model = keras_vit.ViT(image_size=28, patch_size=7, hidden_size=16, num_layers=1, num_heads=2,
                          mlp_dim=40, mlp_kind="swiglu", layer_scale_init=1.0, include_top=False)
    with pytest.raises(ValueError, match="mlp_dim=40"):
        model.save_to_preset(str(tmp_path / "hf"), format="transformers", preprocessing="imagenet")
    assert not os.path.exists(tmp_path / "hf" / "config.json")


@pytest.fixture(scope="module")
def classifier_dirs(tmp_path_factory):
    out = {}
    labels = dict(id2label=dict(enumerate(NAMES)), label2id={n: i for i, n in enumerate(NAMES)})
    for seed, (name, (config_class, extra)) in enumerate(CLASSIFIERS.items()):
        folder = tmp_path_factory.mktemp(name)
        model = getattr(transformers, name)(config_class(**TINY, **extra, **labels))
        model = _save_random(model, folder, seed + 1)
        x = _images(28)
        logits = _run(model, x).logits.numpy()
        tokens = _run(model.base_model, x).last_hidden_state.numpy()
        # transformers resizes its position table itself at another size.
        other_logits = _run(model, _images(42, 35)).logits.numpy()
        out[name] = (str(folder), logits, tokens, other_logits)
    return out


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_classifiers_reproduce_transformers_logits(classifier_dirs, name):
    folder, logits, tokens, _ = classifier_dirs[name]
    model = keras_vit.from_preset(folder)
    assert model.classifier == "token_avg" and model.class_names == tuple(NAMES)
    x = _images(28)
    np.testing.assert_allclose(to_numpy(model(x)), logits, rtol=0, atol=1e-4)
    # Without the head: the class token beside the mean of the patch tokens,
    # registers left out of the mean (with them in, the feature differs).
    features = keras_vit.from_preset(folder, include_top=False, pooling="token_avg")
    prefix = 1 + model.num_register_tokens
    expected = np.concatenate([tokens[:, 0], tokens[:, prefix:].mean(axis=1)], axis=-1)
    np.testing.assert_allclose(to_numpy(features(x)), expected, rtol=0, atol=1e-4)
    if prefix > 1:
        assert np.abs(tokens[:, 1:].mean(axis=1) - expected[:, 16:]).max() > 1e-3


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_classifiers_reproduce_transformers_logits_at_another_image_size(classifier_dirs, name):
    """42x35 px: 6x5 patches from the checkpoint's 4x4, DINOv2's bicubic position resize."""
    folder, _, _, other_logits = classifier_dirs[name]
    model = keras_vit.from_preset(folder).for_inference(image_size=(42, 35))
    np.testing.assert_allclose(to_numpy(model(_images(42, 35))), other_logits, rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_classifiers_write_back_to_transformers(classifier_dirs, tmp_path, name):
    folder, logits, _, _ = classifier_dirs[name]
    keras_vit.from_preset(folder).save_to_preset(tmp_path, format="transformers", preprocessing="imagenet")
    with open(tmp_path / "config.json") as f:
        config = json.load(f)
    assert config["architectures"] == [name]
    assert [config["id2label"][str(i)] for i in range(3)] == NAMES
    again, info = getattr(transformers, name).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    np.testing.assert_allclose(_run(again.eval(), _images(28)).logits.numpy(), logits, rtol=0, atol=1e-4)


# The "token_avg" pooling as a model option.
OPTION = dict(image_size=28, patch_size=7, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32,
              num_register_tokens=2)


def _randomised(model):
    rng = np.random.default_rng(5)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))
    return model


def test_token_avg_pooling_matches_numpy():
    x = np.random.default_rng(1).normal(size=(2, 7, 4)).astype("float32")
    y = to_numpy(TokenPooling("token_avg", num_prefix_tokens=3)(x))
    np.testing.assert_allclose(y, np.concatenate([x[:, 0], x[:, 3:].mean(axis=1)], -1), atol=1e-6)
    assert TokenPooling("token_avg", 3).compute_output_shape((2, 7, 4)) == (2, 8)


def test_token_avg_head_and_features_follow_keras_applications():
    """include_top=False gives the 2 * D feature; include_top=True the Dense head on it."""
    model = _randomised(keras_vit.ViT(**OPTION, classifier="token_avg", classes=3,
                                      classifier_activation=None))
    x = _images(28)
    tokens = to_numpy(model.forward_features(x))
    feature = np.concatenate([tokens[:, 0], tokens[:, 3:].mean(axis=1)], axis=-1)
    head = model.get_layer("head")
    expected = feature @ to_numpy(head.kernel) + to_numpy(head.bias)
    np.testing.assert_allclose(to_numpy(model(x)), expected, atol=1e-4)
    np.testing.assert_allclose(to_numpy(model.forward_head(model.forward_features(x), pre_logits=True)),
                               feature, atol=1e-5)
    backbone = keras_vit.ViT(**OPTION, include_top=False, pooling="token_avg")
    assert tuple(backbone.output.shape) == (None, 32)


def test_token_avg_survives_config_and_keras_saving(tmp_path):
    model = _randomised(keras_vit.ViT(**OPTION, classifier="token_avg", classes=3))
    config = model.get_config()
    assert config["classifier"] == "token_avg"
    assert keras_vit.ViT.from_config(config).get_config() == config
    x = _images(28)
    path = str(tmp_path / "token_avg.keras")
    model.save(path)
    np.testing.assert_allclose(to_numpy(keras.saving.load_model(path)(x)), to_numpy(model(x)), atol=1e-6)


@pytest.mark.parametrize(
    "arguments, match",
    [
        (dict(classifier="gap", include_top=False, pooling="token_avg"), "pooling='token_avg' reads the class token"),
        (dict(classifier="token_avg", class_token=False), "classifier='token_avg' reads the class token"),
        (dict(include_top=False, pooling="token_avg", class_token=False), "class_token=False"),
        (dict(classifier="token_mean"), "classifier"),
    ],
)
def test_token_avg_without_class_token_is_refused(arguments, match):
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT(**OPTION, **arguments)


@pytest.mark.skipif("onnx" not in export.BACKEND_FORMATS.get(keras.backend.backend(), ()),
                    reason="this backend exports no ONNX")
def test_token_avg_exports_to_onnx(tmp_path):
    model = _randomised(keras_vit.ViT(**OPTION, classifier="token_avg", classes=3, classifier_activation=None))
    path = model.export(str(tmp_path / "token_avg.onnx"), format="onnx")
    diff, outputs, expected = export.verify_export(path, "onnx", model, _images(28))
    assert outputs.shape == (2, 3) and diff <= 1e-4, diff
    assert np.abs(expected[0] - expected[1]).max() > 1e-3
