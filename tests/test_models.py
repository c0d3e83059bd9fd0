"""ViT model tests: every variant's exact size, argument checks, any image size."""

import gc

import keras
import numpy as np
import pytest
import scipy.ndimage

import keras_vit
from conftest import TINY, every_backend, inference, spread, to_numpy
from keras_vit.execution import tf_xla
from keras_vit.models import ARCHITECTURE_CONFIGS, CONSTRUCTORS
from keras_vit.execution.sharded_load import shapes_only
from model_contract import outputs_of

pytestmark = spread("the variants are rows of one table over the same layers, each held on every backend by "
                    "its contract; each case once")

# Official parameter counts, 1000-way head, no pre-logits (vit_jax
# models_test.py MODEL_SIZES at 224; at 384 counted from the official Flax
# model's parameter shapes).
OFFICIAL_PARAMS = {
    "Ti/16": (5_717_416, 5_790_376),
    "S/16": (22_050_664, 22_196_584),
    "S/32": (22_878_952, 22_915_432),
    "B/8": (86_576_872, 87_744_232),
    "B/16": (86_567_656, 86_859_496),
    "B/32": (88_224_232, 88_297_192),
    "L/16": (304_326_632, 304_715_752),
    "L/32": (306_535_400, 306_632_680),
    "H/14": (632_045_800, 632_651_240),
}
# The giant sizes' published counts, in millions, of the encoder without
# its head at 224 px (Zhai et al., arXiv:2106.04560, Table 2).
PUBLISHED_MILLIONS = {"g/14": 1011, "G/14": 1843}
PLAIN = sorted(name for name, arch in CONSTRUCTORS.items() if "resnet_layers" not in ARCHITECTURE_CONFIGS[arch])


def test_every_plain_variant_has_an_official_count():
    assert {CONSTRUCTORS[name] for name in PLAIN} == set(OFFICIAL_PARAMS) | set(PUBLISHED_MILLIONS)


@pytest.mark.parametrize("constructor", [n for n in PLAIN if CONSTRUCTORS[n] in PUBLISHED_MILLIONS])
def test_giant_variants_have_their_published_size(constructor):
    with shapes_only():
        model = getattr(keras_vit, constructor)(include_top=False)
        assert round(model.count_params() / 1e6) == PUBLISHED_MILLIONS[CONSTRUCTORS[constructor]]


@pytest.mark.parametrize("size_index,size", [(0, 224), (1, 384)])
@pytest.mark.parametrize("constructor", [n for n in PLAIN if CONSTRUCTORS[n] in OFFICIAL_PARAMS])
def test_variant_parameter_count(constructor, size_index, size):
    arch = CONSTRUCTORS[constructor]
    if arch == "H/14" and size == 384:
        # The official conv embedding (VALID, stride 14) drops the last 6
        # pixels of a 384 image: its "384" count is that of a 27x27 grid.
        size = 378
    # Shapes only: no time or memory spent on random initial values.
    with shapes_only():
        model = getattr(keras_vit, constructor)(image_size=size)
        assert model.count_params() == OFFICIAL_PARAMS[arch][size_index]


# Full-size models with real variables, small enough to build in a second.
SMALL = [n for n in PLAIN if ARCHITECTURE_CONFIGS[CONSTRUCTORS[n]]["hidden_size"] <= 384]


@pytest.mark.parametrize("constructor", SMALL)
def test_full_size_variant_runs_on_a_small_image(constructor):
    model = getattr(keras_vit, constructor)()
    assert model.count_params() == OFFICIAL_PARAMS[CONSTRUCTORS[constructor]][0]
    # Built for 224 px, it also runs on an image of only 2x2 patches.
    patch = model.patch_size[0]
    x = np.random.default_rng(0).uniform(-1, 1, (1, 2 * patch, 2 * patch, 3)).astype("float32")
    # predict on jax: its weights are arguments of the compiled call, not
    # constants compiled into it (millions of them here).
    out = outputs_of(model, x)
    assert out.shape == (1, 1000) and np.isfinite(out).all()
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-5)
    del model
    gc.collect()


def test_imagenet21k_head_with_pre_logits_count():
    with shapes_only():
        model = keras_vit.ViTB16(classes=21843, representation_size=768)
        assert model.count_params() == 103_186_515
    assert model.get_layer("pre_logits").activation is keras.activations.tanh


@pytest.mark.parametrize("constructor", PLAIN)
def test_variant_trains_every_weight(constructor):
    """Each variant's shapes, one block deep, at 2x2 patches: all weights learn."""
    arch = ARCHITECTURE_CONFIGS[CONSTRUCTORS[constructor]]
    patch = arch["patch_size"]
    model = getattr(keras_vit, constructor)(
        image_size=2 * patch, classes=3, classifier_activation=None, num_layers=1
    )
    check_every_weight_gets_gradient(model, 2 * patch)


def check_every_weight_gets_gradient(model, size):
    rng = np.random.default_rng(0)
    # The head is zero-initialised, which would block gradients to the
    # backbone on the first step; give it random values.
    head = model.get_layer("head")
    head.kernel.assign(rng.normal(size=head.kernel.shape).astype("float32"))
    before = [to_numpy(w).copy() for w in model.trainable_weights]
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x = rng.uniform(-1, 1, (4, size, size, 3)).astype("float32")
    y = np.arange(4) % model.classes
    model.train_on_batch(x, y)
    unchanged = [
        w.path for w, old in zip(model.trainable_weights, before) if np.array_equal(to_numpy(w), old)
    ]
    assert not unchanged, f"weights without gradient: {unchanged}"


def test_tiny_model_trains_every_weight_with_pre_logits():
    model = keras_vit.ViT(**TINY, classes=4, representation_size=8, classifier_activation=None)
    check_every_weight_gets_gradient(model, 32)


def test_model_built_at_one_size_runs_at_another(rng):
    """The position embedding is resized exactly as zoom(order=1) would."""
    small = keras_vit.ViT(**TINY, classes=5)
    for w in small.weights:
        w.assign(rng.normal(scale=0.3, size=w.shape).astype("float32"))
    for size in [(48, 48), (32, 56)]:
        config = dict(TINY, image_size=size)
        big = keras_vit.ViT(**config, classes=5)
        pos = to_numpy(small.get_layer("embedding").pos_embedding)
        grid = pos[0, 1:].reshape(4, 4, -1).astype("float64")
        gh, gw = size[0] // 8, size[1] // 8
        zoomed = scipy.ndimage.zoom(grid, (gh / 4, gw / 4, 1), order=1).reshape(1, -1, grid.shape[-1])
        for src, dst in zip(small.weights, big.weights):
            value = to_numpy(src)
            if "pos_embedding" in src.path:
                value = np.concatenate([pos[:, :1], zoomed], axis=1)
            dst.assign(value.astype("float32"))
        x = rng.uniform(-1, 1, (2, *size, 3)).astype("float32")
        resized, expected = inference(lambda x: (small(x), big(x)), x)
        np.testing.assert_allclose(resized, expected, atol=1e-5)
        np.testing.assert_allclose(to_numpy(small.predict(x, verbose=0)), expected, atol=1e-5)


def test_ti16_built_at_224_runs_at_384():
    model = keras_vit.ViTTi16(num_layers=1)
    out = inference(model, np.zeros((1, 384, 384, 3), "float32"))
    assert out.shape == (1, 1000)
    assert model.input_shape == (None, 224, 224, 3)


def test_call_with_indivisible_size_is_rejected():
    model = keras_vit.ViT(**TINY, classes=2)
    with pytest.raises(ValueError, match="patch"):
        model(np.zeros((1, 36, 32, 3), "float32"))


def test_feature_extraction_from_any_block(rng):
    model = keras_vit.ViT(**TINY, classes=2)
    extractor = keras.Model(model.input, model.get_layer("encoderblock_0").output)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    assert inference(extractor, x).shape == (2, 17, 16)
    assert [b.name for b in model.encoder_blocks] == ["encoderblock_0", "encoderblock_1"]


@pytest.mark.parametrize(
    "pooling,shape", [(None, (2, 17, 16)), ("token", (2, 16)), ("avg", (2, 16)), ("max", (2, 16))]
)
def test_include_top_false_pooling(rng, pooling, shape):
    model = keras_vit.ViT(**TINY, include_top=False, pooling=pooling)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    tokens_model = keras.Model(model.input, model.get_layer("encoder_norm").output)
    out, tokens = inference(lambda x: (model(x), tokens_model(x)), x)
    assert out.shape == shape
    expected = {None: tokens, "token": tokens[:, 0], "avg": tokens[:, 1:].mean(1), "max": tokens[:, 1:].max(1)}
    np.testing.assert_allclose(out, expected[pooling], atol=1e-5)


def test_gap_classifier_has_no_class_token(rng):
    model = keras_vit.ViT(**TINY, classifier="gap", classes=3)
    names = [w.path for w in model.weights]
    assert "embedding/cls" not in names
    assert model.get_layer("embedding").pos_embedding.shape == (1, 16, 16)
    assert inference(model, rng.uniform(size=(1, 32, 32, 3)).astype("float32")).shape == (1, 3)


def test_classifier_activation_none_gives_logits(rng):
    logits_model = keras_vit.ViT(**TINY, classes=3, classifier_activation=None)
    softmax_model = keras_vit.ViT(**TINY, classes=3)
    softmax_model.set_weights(logits_model.get_weights())
    logits_model.get_layer("head").kernel.assign(rng.normal(size=(16, 3)).astype("float32"))
    softmax_model.get_layer("head").kernel.assign(to_numpy(logits_model.get_layer("head").kernel))
    x = rng.uniform(size=(2, 32, 32, 3)).astype("float32")
    logits = inference(logits_model, x)
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    np.testing.assert_allclose(inference(softmax_model, x), probs, atol=1e-6)


def test_input_shape_sets_channels(rng):
    model = keras_vit.ViTTi16(input_shape=(32, 48, 1), num_layers=1, classes=2)
    assert model.input_shape == (None, 32, 48, 1)
    assert inference(model, rng.uniform(size=(1, 32, 48, 1)).astype("float32")).shape == (1, 2)


def test_stochastic_depth_rate_grows_with_depth():
    model = keras_vit.ViT(**dict(TINY, num_layers=3), stochastic_depth_rate=0.2)
    rates = [b.stochastic_depth_rate for b in model.encoder_blocks]
    np.testing.assert_allclose(rates, [0.0, 0.1, 0.2])


BAD_ARGUMENTS = [
    (dict(image_size=30), "image_size"),
    (dict(image_size=0), "image_size"),
    (dict(patch_size=0), "patch_size"),
    (dict(classifier="cls"), "classifier"),
    (dict(pooling="mean", include_top=False), "pooling"),
    (dict(classifier="gap", pooling="token", include_top=False), "pooling"),
    (dict(classes=0), "classes"),
    (dict(classes=2.5), "classes"),
    (dict(num_heads=3), "num_heads"),
    (dict(hidden_size=0), "hidden_size"),
    (dict(num_layers=-1), "num_layers"),
    (dict(mlp_dim=0), "mlp_dim"),
    (dict(input_shape=(32, 32, 0), image_size=None), "input_shape"),
    (dict(input_shape=(32, 32), image_size=None), "input_shape"),
    (dict(input_shape=(48, 48, 3)), "input_shape"),
    (dict(dropout_rate=1.0), "dropout_rate"),
    (dict(attention_dropout_rate=-0.5), "attention_dropout_rate"),
    (dict(stochastic_depth_rate=2), "stochastic_depth_rate"),
    (dict(layer_norm_epsilon=-1e-6), "layer_norm_epsilon"),
    (dict(mlp_activation="tanh"), "mlp_activation"),
    (dict(representation_size=0), "representation_size"),
    (dict(classifier_activation="sofmax"), "classifier_activation"),
]


@pytest.mark.parametrize("kwargs,name", BAD_ARGUMENTS, ids=[n + str(i) for i, (_, n) in enumerate(BAD_ARGUMENTS)])
def test_bad_argument_is_named(kwargs, name):
    config = dict(TINY)
    config.update(kwargs)
    with pytest.raises(ValueError) as info:
        keras_vit.ViT(**config)
    message = str(info.value)
    assert name in message and "Received" in message


def test_wrong_number_of_channels_at_call_time():
    model = keras_vit.ViT(**TINY, classes=2)
    with pytest.raises(ValueError, match="3"):
        model(np.zeros((1, 32, 32, 1), "float32"))


def test_named_constructors_are_functions_of_the_table():
    """One greppable `def` per table row in variants.py, in the table's order."""
    import ast
    import pathlib

    from keras_vit.architectures import VARIANTS
    from keras_vit.models import variants

    tree = ast.parse(pathlib.Path(variants.__file__).read_text())
    defs = [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name[:1].isupper()]
    assert defs == [variant.constructor for variant in VARIANTS]
    for variant in VARIANTS:
        function = getattr(keras_vit, variant.constructor)
        assert function is getattr(variants, variant.constructor)
        assert function.architecture == variant.architecture
        assert f"Builds {variant.constructor}, the {variant.architecture} " in function.__doc__


def test_named_constructors_take_every_record_field_like_vit():
    options = dict(mlp_activation="quick_gelu", norm_kind="rmsnorm", qkv_bias=False,
                   layer_scale_init=0.1, patch_bias=False, pre_norm=True)
    model = keras_vit.ViTTi16(False, None, image_size=32, num_layers=1, pooling="avg", **options)
    reference = keras_vit.ViT(**dict(ARCHITECTURE_CONFIGS["Ti/16"], num_layers=1), image_size=32,
                              include_top=False, pooling="avg", **options)
    assert not model.include_top and model.get_config() == dict(reference.get_config(), name="vitti16")
    with pytest.raises(keras_vit.validation.UnknownArgumentError, match=r"ViTTi16\(\).*'mlp_activaton'.*'mlp_activation'"):
        keras_vit.ViTTi16(mlp_activaton="gelu")


def test_named_constructor_rejects_bad_argument():
    with pytest.raises(ValueError, match="image_size"):
        keras_vit.ViTB16(image_size=100)
    with pytest.raises(ValueError, match="classes"):
        keras_vit.ViTTi16(classes=-3)


def _jit_flags_of_predict_function(model, monkeypatch):
    """The `jit_compile` arguments of the tf.functions that predict builds."""
    import tensorflow as tf

    flags = []
    original = tf.function

    def spy(*args, **kwargs):
        flags.append(kwargs.get("jit_compile"))
        return original(*args, **kwargs)

    monkeypatch.setattr(tf, "function", spy)
    model.make_predict_function(force=True)
    monkeypatch.setattr(tf, "function", original)
    return flags


@every_backend("which predict function each backend compiles")
@pytest.mark.xla_predict
def test_inference_is_xla_compiled_on_a_tensorflow_cpu(rng, backend, monkeypatch):
    """jit_compile="auto": XLA for predict on a tensorflow CPU, Keras' choice elsewhere."""
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(**TINY, classes=4, classifier_activation=None)
    model.get_layer("head").kernel.assign(rng.normal(size=(16, 4)).astype("float32"))
    x = rng.normal(size=(3, 32, 32, 3)).astype("float32")
    eager = to_numpy(model(x))
    # Outputs up to ~10: the two implementations' float32 sums differ by a
    # few units in the sixth digit (3.9e-6 relative seen on a Zen 5 CPU).
    tolerance = dict(rtol=1e-5, atol=1e-5)
    if backend != "tensorflow":
        assert not tf_xla.uses_xla(model)
        np.testing.assert_allclose(model.predict(x, verbose=0), eager, **tolerance)
        return
    import tensorflow as tf

    on_cpu = not tf.config.list_logical_devices("GPU")
    assert tf_xla.uses_xla(model) == on_cpu
    if on_cpu:
        assert True in _jit_flags_of_predict_function(model, monkeypatch)
    np.testing.assert_allclose(model.predict(x, verbose=0), eager, **tolerance)
    assert model.jit_compile is False or not on_cpu  # training keeps Keras' choice
    # A user's explicit choice is kept.
    model.compile(jit_compile=False)
    assert not tf_xla.uses_xla(model)
    assert True not in _jit_flags_of_predict_function(model, monkeypatch)
    model.compile()
    assert tf_xla.uses_xla(model) == on_cpu


def test_for_inference_resizes_the_position_embedding_once(rng):
    """A copy built for another size equals the original resizing on the fly."""
    model = keras_vit.ViT(**TINY, classes=4, classifier_activation=None)
    for variable in model.weights:
        variable.assign(rng.normal(scale=0.3, size=variable.shape).astype("float32"))
    fast = model.for_inference(image_size=(48, 40))
    assert fast.grid_size == (6, 5) and not fast.trainable and model.trainable
    assert fast.get_layer("embedding").pos_embedding.shape == (1, 31, 16)
    x = rng.normal(size=(2, 48, 40, 3)).astype("float32")
    np.testing.assert_allclose(
        fast.predict(x, verbose=0), model.predict(x, verbose=0), atol=2e-5, rtol=1e-5
    )
    same = model.for_inference()
    np.testing.assert_array_equal(
        to_numpy(same.get_layer("embedding").pos_embedding),
        to_numpy(model.get_layer("embedding").pos_embedding),
    )
    with pytest.raises(ValueError, match="image_size"):
        model.for_inference(image_size=(48, 41))


@pytest.mark.parametrize("constructor", sorted(CONSTRUCTORS))
def test_constructor_docstring_example_uses_a_two_by_two_grid(constructor):
    """The example size is twice the effective patch: stem stride times patch."""
    import re

    from keras_vit.architectures import effective_patch_size

    row = ARCHITECTURE_CONFIGS[CONSTRUCTORS[constructor]]
    size = int(re.search(r"image_size=(\d+)", getattr(keras_vit, constructor).__doc__).group(1))
    assert size == 2 * effective_patch_size(row["patch_size"], row.get("resnet_layers"))[0]


@every_backend("each backend's trainer traces its steps")
def test_first_fit_and_evaluate_trace_their_step_once(rng, backend):
    """The optimizer's and the metrics' variables exist before the first step
    is traced (on tensorflow, a variable made while tracing makes it trace
    the step again: `keras_vit.execution.tf_build`)."""
    model = keras_vit.ViT(**TINY, classes=3)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    calls = {"train": 0, "test": 0}
    train_step, test_step = model.train_step, model.test_step

    def counted(kind, step):
        def run(*args):  # jax's steps take (state, data), the others (data)
            calls[kind] += 1
            return step(*args)
        return run

    model.train_step, model.test_step = counted("train", train_step), counted("test", test_step)
    x = rng.normal(size=(4, 32, 32, 3)).astype("float32")
    y = np.array([0, 1, 2, 0])
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    model.evaluate(x, y, batch_size=4, verbose=0)
    assert calls == {"train": 1, "test": 1}, calls
    assert model.optimizer.built
    if backend == "tensorflow":
        assert model._distribute_strategy is None  # Keras' record of a strategy is left as it was
