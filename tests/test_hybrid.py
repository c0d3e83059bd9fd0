"""`ViTHybrid` and the R+Ti/R26/R50 variants: sizes, parity, saving, loading."""

import keras
import numpy as np
import pytest
import scipy.ndimage

import keras_vit
import reference
import reference_resnet
import synthetic
from keras_vit.models import ARCHITECTURE_CONFIGS, CONSTRUCTORS, ViTHybrid
from keras_vit.architectures import architecture_name
from keras_vit.execution.sharded_load import shapes_only
from conftest import spread

pytestmark = spread("the hybrids' sizes, parity and files: the ResNet layers are held on every backend by "
                    "test_resnet_layers and the model contract; each case once")

POSEMB = "Transformer/posembed_input/pos_embedding"
HYBRIDS = sorted(n for n, a in CONSTRUCTORS.items() if "resnet_layers" in ARCHITECTURE_CONFIGS[a])

# Counted from the parameter shapes of the official Flax model (vit_jax
# models_vit.VisionTransformer under jax.eval_shape, see docs/checkpoints.md):
# the 224 px grid and parameter counts for some head configurations (the
# registry tests cover those of every published checkpoint).
OFFICIAL = {
    "R+Ti/16": (7, {"1k": 6_337_704, "1k@384": 6_355_944, "i21k+pre_logits": 10_397_459, "no head": 6_144_704}),
    "R26+S/32": (7, {"1k": 36_431_912}),
    "R26+B/32": (7, {"1k": 101_383_976}),
    "R50+B/16": (14, {"1k": 98_659_112, "1k@384": 98_950_952}),
    "R50+L/32": (7, {"1k": 328_994_856}),
}
HEADS = {
    "1k": dict(classes=1000),
    "1k@384": dict(classes=1000, image_size=384),
    "i21k+pre_logits": dict(classes=21843, representation_size="hidden"),
    "no head": dict(include_top=False),
}

# Two stages at width 0.5: a projected first unit (stride 1, 32 -> 128
# channels) and a strided one; 32 px -> a 4x4 grid of 1x1 patches.
TINY_HYBRID = dict(
    resnet_layers=(1, 2),
    resnet_width=0.5,
    image_size=32,
    patch_size=1,
    hidden_size=16,
    num_layers=2,
    num_heads=2,
    mlp_dim=32,
    classes=5,
    classifier_activation=None,
)


def test_every_hybrid_variant_is_checked():
    assert {CONSTRUCTORS[n] for n in HYBRIDS} == set(OFFICIAL)


@pytest.mark.parametrize("constructor", HYBRIDS)
def test_official_parameter_counts(constructor):
    arch = CONSTRUCTORS[constructor]
    grid, counts = OFFICIAL[arch]
    hidden = ARCHITECTURE_CONFIGS[arch]["hidden_size"]
    for column, expected in counts.items():
        kwargs = dict(HEADS[column])
        if kwargs.get("representation_size") == "hidden":
            kwargs["representation_size"] = hidden
        # Shapes only: no memory or time spent on random initial values.
        with shapes_only():
            model = getattr(keras_vit, constructor)(**kwargs)
            assert model.count_params() == expected, (arch, column)
        if kwargs.get("image_size") is None:
            assert model.grid_size == (grid, grid)
            pos = model.get_layer("embedding").pos_embedding
            assert tuple(pos.shape) == (1, 1 + grid * grid, hidden)
        config = {k: getattr(model, k) for k in ARCHITECTURE_CONFIGS[arch]}
        assert architecture_name(config) == arch
        del model
        keras.utils.clear_session()


@pytest.mark.parametrize(
    "resnet_layers, stride", [((), 4), ((1,), 4), ((1, 1), 8), ((1, 1, 1), 16)]
)
def test_feature_map_stride(resnet_layers, stride):
    with shapes_only():
        model = ViTHybrid(**dict(TINY_HYBRID, resnet_layers=resnet_layers, image_size=64))
    last = f"block{len(resnet_layers)}" if resnet_layers else "pool_root"
    channels = 128 * 2 ** (len(resnet_layers) - 1) if resnet_layers else 32
    assert model.get_layer(last).output.shape == (None, 64 // stride, 64 // stride, channels)
    assert model.grid_size == (64 // stride, 64 // stride)


def test_stem_only_with_patches():
    # R+Ti/16's layout: the stem alone (stride 4), then 8x8 patches.
    with shapes_only():
        model = ViTHybrid(**dict(TINY_HYBRID, resnet_layers=(), patch_size=8, image_size=224))
    assert model.get_layer("pool_root").output.shape == (None, 56, 56, 32)
    assert model.grid_size == (7, 7)
    assert tuple(model.get_layer("embedding").kernel.shape) == (8, 8, 32, 16)


def hybrid_params(rng, resnet_layers, resnet_width, grid, patch_size=1, **vit):
    """A random official-layout hybrid checkpoint (docs/checkpoints.md §2).

    GroupNorm parameters alternate between `(C,)` and the `(1, 1, 1, C)` of
    the released files.
    """
    p = {}
    count = [0]

    def conv(key, k, cin, cout):
        scale = rng.uniform(0.5, 2.0, cout)
        p[key + "/kernel"] = (rng.standard_normal((k, k, cin, cout)) * scale + 0.1).astype("float32")

    def norm(key, c):
        count[0] += 1
        shape = (1, 1, 1, c) if count[0] % 2 else (c,)
        p[key + "/scale"] = (1 + 0.2 * rng.standard_normal(shape)).astype("float32")
        p[key + "/bias"] = (0.2 * rng.standard_normal(shape)).astype("float32")

    width = int(64 * resnet_width)
    conv("conv_root", 7, 3, width)
    norm("gn_root", width)
    cin = width
    for s, units in enumerate(resnet_layers):
        f = width * 2**s
        for u in range(units):
            b = f"block{s + 1}/unit{u + 1}/"
            if u == 0:
                conv(b + "conv_proj", 1, cin, 4 * f)
                norm(b + "gn_proj", 4 * f)
            conv(b + "conv1", 1, cin if u == 0 else 4 * f, f)
            norm(b + "gn1", f)
            conv(b + "conv2", 3, f, f)
            norm(b + "gn2", f)
            conv(b + "conv3", 1, f, 4 * f)
            norm(b + "gn3", 4 * f)
        cin = 4 * f
    # The Transformer part: tests/synthetic.py on the feature map.
    p.update(
        synthetic.official_params(
            rng, image_size=tuple(g * patch_size for g in grid), patch_size=patch_size,
            channels=cin, **vit,
        )
    )
    return p


def _official_key(path):
    # Independent of keras_vit.weights: the renames of docs/checkpoints.md §2.
    head, leaf = path.rsplit("/", 1)
    key = f"{head}/{ {'gamma': 'scale', 'beta': 'bias'}.get(leaf, leaf)}"
    if key.startswith(("encoderblock_", "encoder_norm/")):
        return "Transformer/" + key
    return {"embedding/cls": "cls", "embedding/pos_embedding": POSEMB}.get(key, key)


def _tiny_checkpoint(rng, config=TINY_HYBRID):
    grid = tuple(s // (8 * config["patch_size"]) for s in keras_vit.validation.pair(config["image_size"], "s"))
    return hybrid_params(
        rng, config["resnet_layers"], config["resnet_width"], grid, config["patch_size"],
        hidden_size=config["hidden_size"], num_layers=config["num_layers"],
        num_heads=config["num_heads"], mlp_dim=config["mlp_dim"], classes=config["classes"],
    )


def _assign(model, params):
    variables = {_official_key(v.path): v for v in model.weights}
    assert set(variables) == set(params)  # every variable has a key, no extra
    for key, variable in variables.items():
        variable.assign(np.reshape(params[key], variable.shape))
        assert np.size(params[key]) == np.prod(variable.shape)


def _predict(model, x):
    # One compiled call: jax's op-by-op eager mode compiles every op of the
    # ResNet separately, which is far slower for these many small ops.
    return model.predict(x, batch_size=len(x), verbose=0)


def _reference(params, x, resnet_layers=TINY_HYBRID["resnet_layers"]):
    return reference.forward(params, x, stem=reference_resnet.stem(resnet_layers))


@pytest.fixture(scope="module")
def tiny():
    """`(model, official params)`: one tiny hybrid with random weights.

    Built once for the module: on jax, creating the variables compiles one
    initializer per shape, the slowest part of these tests.
    """
    params = _tiny_checkpoint(np.random.default_rng(1))
    model = ViTHybrid(**TINY_HYBRID)
    _assign(model, params)
    return model, params


def test_matches_reference(tiny, rng):
    model, params = tiny
    x = synthetic.images(rng, 32)
    np.testing.assert_allclose(_predict(model, x), _reference(params, x), atol=2e-5, rtol=1e-5)


def test_runs_at_larger_non_square_size(tiny, rng):
    # Built for 32x32 px (a 4x4 grid), run on 48x64 px (a 6x8 grid): the
    # position embedding is resized as the official loader does.
    model, params = tiny
    x = synthetic.images(rng, (48, 64))
    pos = params[POSEMB]
    grid = pos[0, 1:].reshape(4, 4, -1).astype(np.float64)
    grid = scipy.ndimage.zoom(grid, (6 / 4, 8 / 4, 1), order=1)
    resized = dict(params)
    resized[POSEMB] = np.concatenate([pos[:, :1], grid.reshape(1, 48, -1)], axis=1)
    np.testing.assert_allclose(_predict(model, x), _reference(resized, x), atol=2e-5, rtol=1e-5)


def test_for_inference_standardises_once(tiny, rng):
    """The inference copy folds the weight standardisation into its kernels."""
    from keras_vit.layers import StdConv2D

    model, params = tiny
    fast = model.for_inference()
    convs = [layer for layer in fast._flatten_layers() if isinstance(layer, StdConv2D)]
    assert convs and not any(conv.standardize for conv in convs)
    assert fast.get_config()["weight_standardization"] is False and not fast.trainable
    assert all(
        layer.standardize for layer in model._flatten_layers() if isinstance(layer, StdConv2D)
    )
    x = synthetic.images(rng, 32)
    np.testing.assert_allclose(_predict(fast, x), _reference(params, x), atol=2e-5, rtol=1e-5)


def test_for_inference_at_another_size(tiny, rng):
    """Built for 48x64 px, the copy equals the original run on 48x64 px."""
    model, _ = tiny
    fast = model.for_inference(image_size=(48, 64))
    assert fast.grid_size == (6, 8) and fast.image_size == (48, 64)
    x = synthetic.images(rng, (48, 64))
    np.testing.assert_allclose(_predict(fast, x), _predict(model, x), atol=2e-5, rtol=1e-5)


def test_keras_file_round_trip(tiny, tmp_path):
    model, _ = tiny
    path = str(tmp_path / "hybrid.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored) is ViTHybrid
    assert restored.get_config() == model.get_config()
    assert restored.resnet_layers == (1, 2) and restored.resnet_width == 0.5
    # Same layers and weights, hence the same outputs (the outputs of this
    # architecture are checked against the reference above).
    assert [layer.name for layer in restored.layers] == [layer.name for layer in model.layers]
    saved = {v.path: keras.ops.convert_to_numpy(v) for v in model.weights}
    loaded = {v.path: keras.ops.convert_to_numpy(v) for v in restored.weights}
    assert saved.keys() == loaded.keys()
    for key, value in saved.items():
        np.testing.assert_array_equal(loaded[key], value)


def test_config_round_trip():
    model = ViTHybrid(**TINY_HYBRID)
    config = model.get_config()
    assert config["resnet_layers"] == [1, 2] and config["resnet_width"] == 0.5
    assert ViTHybrid.from_config(config).get_config() == config


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(resnet_layers=(1, 0)), "resnet_layers"),
        (dict(resnet_layers=3), "resnet_layers"),
        (dict(resnet_width=0.3), "resnet_width"),
        (dict(resnet_width=True), "resnet_width"),
        (dict(image_size=36), "stem stride"),
        (dict(weight_standardization="yes"), "weight_standardization"),
    ],
)
def test_invalid_arguments(overrides, message):
    with pytest.raises(ValueError, match=message):
        ViTHybrid(**dict(TINY_HYBRID, **overrides))


def _load_weights_available():
    try:
        from keras_vit.weights import load_weights  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _load_weights_available(), reason="keras_vit.weights.load_weights is not available")
def test_loads_synthetic_official_checkpoint(rng, tmp_path):
    params = _tiny_checkpoint(rng)
    assert params["gn_root/scale"].shape == (1, 1, 1, 32)  # the released layout
    assert params["block1/unit1/gn_proj/scale"].shape == (128,)
    path = str(tmp_path / "R_tiny.npz")
    np.savez(path, **params)
    config = {k: v for k, v in TINY_HYBRID.items() if k not in ("image_size", "classes")}
    model = ViTHybrid(**config, weights=path, mlp_activation="gelu_tanh")  # size and classes from the file
    assert model.image_size == (32, 32) and model.classes == 5
    x = synthetic.images(rng, 32)
    np.testing.assert_allclose(_predict(model, x), _reference(params, x), atol=2e-5, rtol=1e-5)
    # Strict: a missing ResNet key fails loudly.
    del params["block2/unit2/conv2/kernel"]
    np.savez(path, **params)
    with pytest.raises(ValueError, match="block2/unit2/conv2"):
        ViTHybrid(**config, weights=path, mlp_activation="gelu_tanh")


def test_registered_hybrid_weights():
    from keras_vit.weights.registry import list_records

    records = {r.key: r for r in list_records() if "resnet_layers" in ARCHITECTURE_CONFIGS[r.architecture]}
    # docs/checkpoints.md §1: the original paper's hybrid files and the
    # recommended AugReg hybrids with their ImageNet-1k fine-tunes.
    assert set(records) == {
        ("R50+B/16", "imagenet21k"),
        ("R50+B/16", "imagenet21k+imagenet2012"),
        ("R26+B/32", "imagenet21k"),
        ("R50+L/32", "imagenet21k"),
        *((a, n) for a in ("R26+S/32", "R50+L/32", "R+Ti/16") for n in ("augreg-i21k", "augreg-i21k+imagenet2012")),
    }
    for (arch, name), record in records.items():
        url = record.urls[0]
        if name.startswith("imagenet21k"):
            # Original files: "R50+ViT-B_16.npz", "+" percent-encoded.
            resnet, vit = arch.split("+")
            assert url.endswith("/" + f"{resnet}%2BViT-{vit.replace('/', '_')}.npz")
            assert (record.representation_size is not None) == (name == "imagenet21k")
        else:
            # AugReg files: the model name with "+" and "/" as "_".
            stem = arch.replace("+", "_").replace("/", "_")
            assert url.startswith(f"https://storage.googleapis.com/vit_models/augreg/{stem}-i21k-300ep-")
            assert record.representation_size is None
        assert record.image_size == (224 if record.classes == 21843 else 384)
