"""The ViT options later checkpoints need (distillation token and head,
register tokens, no q/k/v biases, LayerScale, the norm of the pooled
features) and what travels with the weights (class names, preprocessing):
numerics against the independent NumPy forward pass, config round trips,
argument checks and the inspection tools."""

import os

import keras
import numpy as np
import pytest

import keras_vit
import reference
from conftest import TINY, spread, to_numpy
from families import make_model
from keras_vit import inspection
from keras_vit.weights.mapping import model_state

pytestmark = spread("the options are layers held on every backend by their contracts; each case once")

OPTIONS = {
    "distilled": dict(distillation_token=True),
    "distilled-cls-head": dict(distillation_token=True, distillation_head=False),
    "registers-gap-fcnorm": dict(classifier="gap", num_register_tokens=3, pooled_norm=True,
                                 layer_scale_init=1e-5, qkv_bias=False),
    "cls-registers": dict(num_register_tokens=2, mlp_activation="gelu"),
}


def _model(options, **extra):
    """A two-block ViT of the registry (tests/families.py) with `options`, every weight moved."""
    return make_model("vit", num_layers=2, classes=5, scale=0.3, **options, **extra)


def _images(size=32):
    return np.random.default_rng(1).uniform(-1, 1, (2, size, size, 3)).astype("float32")


@pytest.mark.parametrize("kind", list(OPTIONS))
def test_options_match_the_numpy_reference(kind):
    model = _model(OPTIONS[kind])
    x = _images()
    expected = reference.forward(model_state(model), x, model.mlp_activation, model.layer_norm_epsilon)
    np.testing.assert_allclose(to_numpy(model(x)), expected, rtol=0, atol=2e-5)
    assert model.num_prefix_tokens == model.get_layer("embedding").num_prefix_tokens


def test_config_round_trip_and_keras_file(tmp_path):
    model = _model(OPTIONS["registers-gap-fcnorm"], class_names=list("abcde"),
                   preprocessing=dict(mean=[0.4, 0.5, 0.6], std=[0.2, 0.2, 0.2], image_size=[32, 32]))
    config = model.get_config()
    again = keras_vit.ViT.from_config(config)
    assert again.get_config() == config
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.class_names == tuple("abcde") and loaded.preprocessing == model.preprocessing
    np.testing.assert_array_equal(to_numpy(loaded(_images())), to_numpy(model(_images())))


def test_mixed_precision_survives_the_config():
    model = keras_vit.ViT(**TINY, dtype="mixed_bfloat16")
    again = keras_vit.ViT.from_config(model.get_config())
    assert again.get_layer("encoderblock_1").dtype_policy.name == "mixed_bfloat16"


def test_distilled_model_for_inference_at_another_size():
    model = _model(OPTIONS["distilled"])
    fast = model.for_inference(image_size=48)
    np.testing.assert_allclose(to_numpy(fast(_images(48))), to_numpy(model(_images(48))), atol=2e-5)


@pytest.mark.parametrize(
    "arguments, match",
    [
        (dict(classifier="gap", distillation_token=True), "distillation_token"),
        (dict(distillation_head=True), "distillation_head"),
        (dict(distillation_token=True, representation_size=8), "representation_size"),
        (dict(num_register_tokens=-1), "num_register_tokens"),
        (dict(pooled_norm="yes"), "pooled_norm"),
        (dict(qkv_bias=None), "qkv_bias"),
        (dict(layer_scale_init=0.0), "layer_scale_init"),
        (dict(class_names=["a", "b"]), "class_names"),
        (dict(class_names="imagenet22k"), "class_names"),
        (dict(include_top=False, class_names=["a"] * 5), "class_names"),
        (dict(preprocessing="imagenet"), "preprocessing"),
        (dict(preprocessing=dict(mean=[0.5], std=[0.0])), "std"),
    ],
)
def test_bad_arguments_name_themselves(arguments, match):
    with pytest.raises(ValueError, match=match):
        keras_vit.ViT(**TINY, classes=5, **arguments)


def test_named_class_lists_and_registered_weights_metadata():
    from keras_vit.architectures import ARCHITECTURE_CONFIGS
    from keras_vit.weights.describe import describe_weights

    model = keras_vit.ViT(**TINY, classes=1000, class_names="imagenet1k")
    assert model.class_names[281] == "tabby" and model.get_config()["class_names"] == "imagenet1k"
    preds = np.zeros((1, 1000), "float32")
    preds[0, 281] = 1.0
    assert keras_vit.decode_predictions(preds, top=1, model=model) == [[(281, "tabby", 1.0)]]
    info = describe_weights("imagenet21k+imagenet2012", ARCHITECTURE_CONFIGS["B/16"])
    assert info.class_names == "imagenet1k" and info.preprocessing.mode == "inception"
    assert info.preprocessing.image_size == (384, 384)


def test_inspection_handles_prefix_tokens():
    model = _model(dict(distillation_token=True, num_register_tokens=2))
    embedding = model.get_layer("embedding")
    assert (embedding.num_prefix_rows, embedding.num_prefix_tokens) == (2, 4)
    maps, grid = inspection.attention_rollout(model, _images(), return_grid=True)
    assert grid.shape == (2, 4, 4) and np.all(grid > 0)
    probs = inspection.attention_maps(model, _images(), layers=[0])[0]
    assert probs.shape == (2, 2, 20, 20)
    # Fig. 7: the patch rows only, neither the class nor the distillation row.
    pos = to_numpy(embedding.pos_embedding)[0, 2:].astype("float64")
    pos /= np.linalg.norm(pos, axis=-1, keepdims=True)
    np.testing.assert_allclose(inspection.position_embedding_similarity(model).reshape(16, 16),
                               pos @ pos.T, atol=1e-5)
    distances = inspection.mean_attention_distance(model, _images())
    assert distances.shape == (2, 2) and np.all(distances > 0)
