"""A model whose head reads only its prefix tokens runs its last block for
those tokens alone (`forward.head_tokens`, `TransformerBlock(output_tokens=)`):
outputs and gradients equal the whole graph's, which stays the model's
structure (every layer's `output` is unchanged)."""

import keras
import numpy as np
import pytest

import keras_vit
from conftest import TINY, every_backend, spread, to_numpy
from keras_vit.layers import TransformerBlock
from keras_vit.models import forward

pytestmark = spread("the cut last block is the same layers held on every backend by their contracts; each "
                    "case once, its gradients in every job (every_backend)")

# name: (constructor, tokens the head reads)
MODELS = {
    "class-token": (lambda: keras_vit.ViT(**TINY, classes=5, classifier_activation=None), 1),
    "distilled-registers": (
        lambda: keras_vit.ViT(
            **TINY, classes=5, distillation_token=True, num_register_tokens=2,
            classifier_activation=None,
        ),
        2,
    ),
    "pooled-norm-layer-scale-qk-norm": (
        lambda: keras_vit.ViT(
            **TINY, classes=5, pooled_norm=True, layer_scale_init=0.1, qk_norm=True,
            representation_size=8, classifier_activation="softmax",
        ),
        1,
    ),
    "no-top-token-pooling": (lambda: keras_vit.ViT(**TINY, include_top=False, pooling="token"), 1),
    "hybrid": (
        lambda: keras_vit.ViTHybrid(
            resnet_layers=(1,), resnet_width=0.5, image_size=32, patch_size=1, hidden_size=16,
            num_layers=2, num_heads=2, mlp_dim=32, classes=5, classifier_activation=None,
        ),
        1,
    ),
}
EVERY_TOKEN = {
    "gap": lambda: keras_vit.ViT(**TINY, classes=5, classifier="gap"),
    "token_avg": lambda: keras_vit.ViT(**TINY, classes=5, classifier="token_avg"),
    "map": lambda: keras_vit.ViT(**TINY, classes=5, classifier="map"),
    "no-pooling": lambda: keras_vit.ViT(**TINY, include_top=False),
}


def _randomised(model, seed=0):
    rng = np.random.default_rng(seed)
    for v in model.weights:  # tokens, heads and scales start at zero or one
        v.assign(np.asarray(v) + rng.normal(0, 0.3, v.shape).astype("float32"))
    return model


def _images(n=3, size=32):
    return np.random.default_rng(1).normal(size=(n, size, size, 3)).astype("float32")


def _whole_graph(model):
    """The same layers run as the model's graph: the last block on every token."""
    return keras.Model(model.input, model.output)


def _last_mlp_rows(model, x):
    """The token count the last block's MLP sees during `model(x)`."""
    mlp = model.get_layer(f"encoderblock_{model.num_layers - 1}").mlp
    seen = []
    call = mlp.call
    mlp.call = lambda y, *a, **k: (seen.append(tuple(y.shape)[1]), call(y, *a, **k))[1]
    try:
        model(x)
    finally:
        del mlp.call
    return seen


@pytest.mark.parametrize("kind", list(MODELS))
def test_outputs_equal_the_whole_graph(kind):
    make, count = MODELS[kind]
    model = _randomised(make())
    assert forward.head_tokens(forward.stages(model)) == count
    x = _images()
    expected = to_numpy(_whole_graph(model)(x))
    assert np.abs(expected).max() > 1e-2  # not a trivially constant output
    np.testing.assert_allclose(to_numpy(model(x)), expected, rtol=0, atol=2e-6)
    # The last block ran its MLP on the head's tokens only.
    assert _last_mlp_rows(model, x) == [count]


def test_predict_and_other_sizes_equal_the_whole_graph():
    model = _randomised(MODELS["distilled-registers"][0]())
    x = _images()
    # predict may compile (XLA on tensorflow): float rounding differs there.
    np.testing.assert_allclose(
        model.predict(x, batch_size=2, verbose=0), to_numpy(_whole_graph(model)(x)), rtol=0, atol=1e-5
    )
    # Another image size: the position embedding is resized on the fly.
    y = _images(size=48)
    np.testing.assert_allclose(
        to_numpy(model(y)), to_numpy(model.forward_head(model.forward_features(y))), rtol=0, atol=2e-6
    )


@pytest.mark.parametrize("kind", list(EVERY_TOKEN))
def test_heads_reading_every_token_run_the_whole_graph(kind):
    model = _randomised(EVERY_TOKEN[kind]())
    assert forward.head_tokens(forward.stages(model)) is None
    x = _images()
    np.testing.assert_array_equal(to_numpy(model(x)), to_numpy(_whole_graph(model)(x)))
    assert _last_mlp_rows(model, x) == [x.shape[1] // 8 * (x.shape[2] // 8) + model.num_prefix_tokens]


def test_layer_outputs_keep_every_token():
    model = _randomised(MODELS["class-token"][0]())
    last = model.get_layer(f"encoderblock_{model.num_layers - 1}")
    assert tuple(last.output.shape) == (None, 17, 16)
    features = keras.Model(model.input, last.output)(_images())
    assert tuple(features.shape) == (3, 17, 16)


@every_backend("the gradients of the cut block under each backend's autodiff")
@pytest.mark.parametrize("kind", ["class-token", "distilled-registers"])
def test_training_step_equals_the_whole_graph(kind):
    """One SGD step through the shortened last block moves every weight as
    the whole graph's step does (the cut tokens still give keys and values)."""
    model = _randomised(MODELS[kind][0]())
    x, y = _images(n=4), np.array([0, 1, 2, 3])
    start = [to_numpy(v).copy() for v in model.weights]
    after = {}
    for name, runner in (("short", model), ("whole", _whole_graph(model))):
        for v, value in zip(model.weights, start):
            v.assign(value)
        runner.compile(
            optimizer=keras.optimizers.SGD(1.0),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        runner.train_on_batch(x, y)
        after[name] = [to_numpy(v) for v in model.weights]
    moved = [np.abs(b - a).max() for a, b in zip(start, after["whole"])]
    assert min(moved) > 0  # every weight gets a gradient, the cut tokens' keys and values too
    for short, whole in zip(after["short"], after["whole"]):
        np.testing.assert_allclose(short, whole, rtol=0, atol=1e-5)


@pytest.mark.parametrize("option", ["plain", "remat", "lora"])
def test_block_output_tokens_are_the_first_tokens_of_its_output(option):
    block = TransformerBlock(
        num_heads=2, mlp_dim=32, layer_scale_init=0.5, qk_norm=True,
        remat=option == "remat",
    )
    x = np.random.default_rng(2).normal(size=(2, 7, 16)).astype("float32")
    block(x)
    _randomised(block, seed=3)
    if option == "lora":
        block.attention.query.enable_lora(2)
        block.attention.key.enable_lora(2)
        _randomised(block, seed=4)  # LoRA's B starts at zero
    training = option == "remat"
    whole = to_numpy(block(x, training=training))
    short = to_numpy(block(x, training=training, output_tokens=3))
    np.testing.assert_allclose(short, whole[:, :3], rtol=0, atol=2e-6)
    symbolic = block(keras.Input((None, 16)), output_tokens=2)
    assert tuple(symbolic.shape) == (None, 2, 16)


def test_the_last_block_cannot_be_tapped_when_cut():
    model = MODELS["class-token"][0]()
    s = forward.stages(model)
    x, _ = forward.embed(s, _images())
    with pytest.raises(ValueError, match="output_tokens"):
        forward.run_blocks(s, x, indices=[model.num_layers - 1], output_tokens=1)
