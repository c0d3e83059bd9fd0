"""keras-hub's DINOv2 and SigLIP presets: a tiny model made at random by
keras-hub on the backend under test, saved with `save_to_preset`, loads with
`keras_vit.from_preset` and reproduces keras-hub's own forward pass (the
pooled embedding and the tokens after the final norm)."""

import json
import logging

import keras
import numpy as np
import pytest

import keras_vit
from conftest import spread, to_numpy
from hub_dirs import light_keras_state as _fresh_keras_state  # noqa: F401
from keras_vit.weights import canonical as C
from keras_vit.families import keras_hub_source as keras_hub_format
from keras_vit.families.dinov2 import KerasHubDinov2
from keras_vit.weights.mapping import model_variables

pytestmark = spread("keras-hub's presets: the layers are held on every backend by their contracts; each case "
                    "once")

keras_hub = pytest.importorskip("keras_hub")

SIZE, OTHER = 28, 42  # 4x4 patches, and 6x6 at the other size
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TINY_DINOV2 = dict(patch_size=7, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32,
                   layer_scale_init_value=0.5, image_shape=(SIZE, SIZE, 3),
                   position_embedding_shape=(SIZE, SIZE, 3))
# keras-hub's converter antialiases the resize of the registers checkpoints,
# as transformers does.
DINOV2 = {
    "plain": dict(num_register_tokens=0, antialias_in_interpolation=False),
    "registers": dict(num_register_tokens=3, antialias_in_interpolation=True),
    # DINOv2-giant's gated MLP (hidden width 24 from intermediate_dim 32).
    "swiglu": dict(num_register_tokens=0, use_swiglu_ffn=True),
}
TINY_SIGLIP = dict(patch_size=7, hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=32,
                   image_shape=(SIZE, SIZE, 3))


def _images(size, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _randomise(model, seed):
    """Moves every float weight off its initial value (LayerNorms, LayerScale,
    tokens and the probe included)."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        if "float" in str(variable.dtype):
            variable.assign(variable + rng.normal(0, 0.2, variable.shape).astype("float32"))


def _save(model, folder, converter):
    model.save_to_preset(folder)
    converter.save_to_preset(folder)
    return str(folder)


@pytest.fixture(scope="module")
def dinov2_presets(tmp_path_factory):
    """`{kind: (folder, keras-hub output at SIZE, keras-hub output at OTHER)}`."""
    scale = [1 / (255 * s) for s in STD]
    offset = [-m / s for m, s in zip(MEAN, STD)]
    out = {}
    for seed, (kind, extra) in enumerate(DINOV2.items()):
        backbone = keras_hub.models.DINOV2Backbone(**TINY_DINOV2, **extra)
        _randomise(backbone, seed)
        # keras-hub saves the table its forward pass adds only when
        # sum(resized stored table - added table) > epsilon (a signed sum), and
        # rebuilds the added one from the stored one on loading: give both the
        # same values so that the preset holds the model called here.
        embeddings = backbone.embeddings
        embeddings.interpolated_position_embeddings.assign(embeddings.position_embeddings)
        converter = keras_hub.layers.DINOV2ImageConverter(
            image_size=(SIZE, SIZE), scale=scale, offset=offset, interpolation="bicubic")
        folder = _save(backbone, tmp_path_factory.mktemp(f"dinov2_{kind}"), converter)
        # keras-hub at another size: the same preset built for OTHER pixels,
        # its position table resized by keras-hub (the MLP plays no part).
        other = None
        if kind != "swiglu":
            other = keras_hub.models.DINOV2Backbone.from_preset(folder, image_shape=(OTHER, OTHER, 3))
        out[kind] = (folder, to_numpy(backbone({"images": _images(SIZE)})), other)
    return out


@pytest.fixture(scope="module")
def dinov2_models(dinov2_presets):
    return {kind: keras_vit.from_preset(folder) for kind, (folder, _, _) in dinov2_presets.items()}


def _pooled_and_tokens(model, x):
    # The output and the tokens after the final norm, as keras-hub's DINOv2
    # backbone returns them (class token, registers, patches), in one call.
    both = keras.Model(model.input, [model.output, model.get_layer("encoder_norm").output])
    return [to_numpy(out) for out in both(x)]


@pytest.mark.parametrize("kind", sorted(DINOV2))
def test_dinov2_presets_reproduce_keras_hub(dinov2_presets, dinov2_models, kind):
    hidden = dinov2_presets[kind][1]
    model = dinov2_models[kind]
    assert model.num_register_tokens == DINOV2[kind]["num_register_tokens"]
    assert model.layer_scale_init == 0.5 and model.mlp_activation == "gelu"
    assert model.mlp_kind == ("swiglu" if kind == "swiglu" else "plain")
    pooled, tokens = _pooled_and_tokens(model, _images(SIZE))
    # The pooled embedding is the class token after the final norm.
    np.testing.assert_allclose(pooled, hidden[:, 0], rtol=0, atol=1e-4)
    np.testing.assert_allclose(tokens, hidden, rtol=0, atol=1e-4)
    prep = model.preprocessing
    np.testing.assert_allclose(prep.mean, MEAN, atol=1e-6)
    np.testing.assert_allclose(prep.std, STD, atol=1e-6)
    assert prep.image_size == (SIZE, SIZE) and prep.interpolation == "bicubic"


@pytest.mark.parametrize("kind", ["plain", "registers"])
def test_dinov2_presets_at_another_image_size(dinov2_presets, dinov2_models, kind):
    """At OTHER pixels keras_vit resizes the position table as transformers
    does (bicubic; antialiased for the registers checkpoints), on every
    backend. keras-hub resizes with `keras.ops.image.resize`: the same
    numbers on torch, and for the antialiased resize on every backend; its
    plain bicubic on jax and tensorflow is Keys' `a = -0.5` kernel, not
    torch's `a = -0.75`, so there the comparison gives keras-hub keras_vit's
    table and checks the rest of the forward pass."""
    other = dinov2_presets[kind][2]
    model = dinov2_models[kind].for_inference(image_size=OTHER)
    table = keras.ops.convert_to_numpy(model_variables(model)[C.POSEMB])
    if kind == "plain" and keras.backend.backend() != "torch":
        other.embeddings.interpolated_position_embeddings.assign(table)
    else:
        np.testing.assert_allclose(
            table, to_numpy(other.embeddings.interpolated_position_embeddings), rtol=0, atol=1e-5)
    x = _images(OTHER, seed=1)
    hidden = to_numpy(other({"images": x}))
    pooled, tokens = _pooled_and_tokens(model, x)
    np.testing.assert_allclose(pooled, hidden[:, 0], rtol=0, atol=1e-4)
    np.testing.assert_allclose(tokens, hidden, rtol=0, atol=1e-4)


def test_dinov2_preset_trained_at_another_size_adds_keras_hubs_table(tmp_path):
    """A preset whose `position_embedding_shape` (35 pixels, 5x5 patches)
    differs from its `image_shape`: keras-hub resizes the stored table when
    it builds the model, and keras_vit takes the resized one, so both add
    the same table at the preset's size."""
    config = dict(TINY_DINOV2, position_embedding_shape=(35, 35, 3), num_layers=1)
    backbone = keras_hub.models.DINOV2Backbone(**config, num_register_tokens=1, antialias_in_interpolation=True)
    _randomise(backbone, 5)
    backbone.save_to_preset(str(tmp_path))
    # The preset as keras-hub loads it (its save keeps the stored table).
    reference = keras_hub.models.Backbone.from_preset(str(tmp_path))
    assert reference.embeddings.position_embeddings.shape[1] == 1 + 5 * 5
    x = _images(SIZE, seed=2)
    hidden = to_numpy(reference({"images": x}))
    pooled, tokens = _pooled_and_tokens(keras_vit.from_preset(str(tmp_path)), x)
    np.testing.assert_allclose(pooled, hidden[:, 0], rtol=0, atol=1e-4)
    np.testing.assert_allclose(tokens, hidden, rtol=0, atol=1e-4)


@pytest.fixture(scope="module")
def siglip_presets(tmp_path_factory):
    """`{kind: folder}` and keras-hub's vision outputs (pooled, tokens after the final norm)."""
    vision = keras_hub.models.SigLIPVisionEncoder(**TINY_SIGLIP, name="vision_encoder")
    text = keras_hub.models.SigLIPTextEncoder(
        vocabulary_size=20, embedding_dim=16, hidden_dim=16, num_layers=1, num_heads=2,
        intermediate_dim=32, max_sequence_length=8, projection_dim=16, name="text_encoder")
    backbone = keras_hub.models.SigLIPBackbone(vision, text)
    _randomise(backbone, 10)
    converter = keras_hub.layers.SigLIPImageConverter(
        image_size=(SIZE, SIZE), scale=1 / 127.5, offset=-1.0, interpolation="bicubic")
    folders = {
        "backbone": _save(backbone, tmp_path_factory.mktemp("siglip"), converter),
        "vision_encoder": _save(vision, tmp_path_factory.mktemp("siglip_vision"), converter),
    }
    x = {"images": _images(SIZE)}
    tokens = keras.Model(vision.inputs, vision.get_layer("vision_encoder_post_layer_norm").output)
    # The image embedding SigLIPBackbone scores against the text is the
    # vision encoder's output.
    pooled = to_numpy(backbone.get_vision_embeddings(x["images"]))
    np.testing.assert_array_equal(pooled, to_numpy(vision(x)))
    return folders, pooled, to_numpy(tokens(x))


@pytest.mark.parametrize("kind", ["backbone", "vision_encoder"])
def test_siglip_presets_reproduce_keras_hub(siglip_presets, kind, caplog):
    """No class token; the output is the attention-pool head's, the tokens
    after the final norm are `forward_features`. The text tower of a
    SigLIPBackbone preset is listed as ignored, tensor by tensor."""
    folders, pooled, tokens = siglip_presets
    with caplog.at_level(logging.INFO, logger="keras_vit"):
        model = keras_vit.from_preset(folders[kind])
    assert model.num_prefix_tokens == 0 and model.pooling == "map" and model.mlp_activation == "gelu_tanh"
    x = _images(SIZE)
    np.testing.assert_allclose(to_numpy(model(x)), pooled, rtol=0, atol=1e-4)
    np.testing.assert_allclose(to_numpy(model.forward_features(x)), tokens, rtol=0, atol=1e-4)
    assert model.preprocessing.mode == "inception"
    ignored = [r.getMessage() for r in caplog.records if ": ignored " in r.getMessage()]
    text = [m for m in ignored if "text tower" in m]
    if kind == "backbone":
        assert any("text_encoder_embedding/token_embedding/embeddings" in m for m in text)
        assert any("siglip_head/logit_scale" in m for m in ignored)
    else:
        assert not text
    assert any("position_ids" in m for m in ignored)


def _edited(folder, tmp_path, edit):
    with open(f"{folder}/config.json") as f:
        config = json.load(f)
    edit(config)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def _set(path, value):
    def edit(config):
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


@pytest.mark.parametrize(
    "family, edit, match",
    [
        ("dinov2", _set(("registered_name",), "keras_hub>MiTBackbone"),
         r"keras_hub>DINOV2Backbone.*keras_hub>DINOV3Backbone.*Received: registered_name='keras_hub>MiTBackbone'"),
        ("siglip", _set(("config", "vision_encoder", "config", "intermediate_activation"), "relu"),
         "intermediate_activation='relu'"),
        ("siglip", _set(("config", "vision_encoder", "config", "layer_norm_epsilon"), 1e-5),
         "layer_norm_epsilon=1e-05"),
        ("siglip", _set(("config", "vision_encoder", "registered_name"), "keras_hub>ViTBackbone"),
         "vision_encoder must be"),
    ],
)
def test_presets_keras_vit_cannot_build_are_refused(dinov2_presets, siglip_presets, tmp_path, family, edit, match):
    folder = dinov2_presets["plain"][0] if family == "dinov2" else siglip_presets[0]["backbone"]
    with pytest.raises(ValueError, match=match):
        keras_hub_format.model_arguments(_edited(folder, tmp_path, edit))


def test_swiglu_table_reads_and_writes_keras_hub_names(rng):
    """keras-hub's `weights_in` is the gate and the up projection side by
    side (`silu(first half) * second half`): the table splits it so and
    writes it back unchanged."""
    table = KerasHubDinov2.TABLE
    kernel, bias = rng.normal(size=(4, 6)).astype("float32"), rng.normal(size=(6,)).astype("float32")
    state = {"encoder/layers_1/mlp/weights_in/kernel": kernel, "encoder/layers_1/mlp/weights_in/bias": bias}
    params, unknown = table.to_canonical(state)
    assert not unknown
    prefix = "Transformer/encoderblock_1/MlpBlock_3/"
    np.testing.assert_array_equal(params[prefix + "gate/kernel"], kernel[:, :3])
    np.testing.assert_array_equal(params[prefix + "up/bias"], bias[3:])
    again = table.from_canonical(params)
    assert sorted(again) == sorted(state)
    for key, value in state.items():
        np.testing.assert_array_equal(again[key], value)


def test_a_task_on_a_family_backbone_is_refused(dinov2_presets, tmp_path):
    folder = _edited(dinov2_presets["plain"][0], tmp_path, lambda config: None)
    (tmp_path / "task.json").write_text(json.dumps({"registered_name": "keras_hub>ImageClassifier"}))
    with pytest.raises(ValueError, match="backbone alone"):
        keras_hub_format.model_arguments(folder)


def test_a_backbone_saved_alone_loads_with_its_preprocessing_unknown(dinov2_presets, tmp_path):
    """`backbone.save_to_preset` writes no image converter: the preset loads,
    reproduces keras-hub, carries no preprocessing record and a warning says
    so and how to give one."""
    folder, expected, _ = dinov2_presets["plain"]
    backbone = keras_hub.models.DINOV2Backbone.from_preset(folder)
    backbone.save_to_preset(str(tmp_path / "alone"))
    assert not {"image_converter.json", "preprocessor.json"} & set(
        p.name for p in (tmp_path / "alone").iterdir())
    with pytest.warns(UserWarning, match=r"has no image converter .*preprocessing is unknown.*"
                                         r"model\.preprocessing = keras_vit\.preprocessing\.Preprocessing"):
        model = keras_vit.from_preset(str(tmp_path / "alone"))
    assert model.preprocessing is None
    np.testing.assert_allclose(_pooled_and_tokens(model, _images(SIZE))[1], expected, rtol=0, atol=1e-4)
