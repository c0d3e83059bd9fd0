"""The dense heads' layers: the bilinear resize against torch's
`interpolate`, CHMv2's depth from bins against transformers' own module, and
the contract of the layers keras_vit's single-tensor harness cannot drive
(`DptNeck`, `EomtHead`, `DepthBins`: several inputs or outputs, float32
outputs): config round trips, `.keras` saving inside a model, outputs under
mixed bfloat16 close to float32's, and a gradient reaching every weight."""

import keras
import numpy as np
import pytest

from keras_vit import kernels
from keras_vit.layers.depth_head import BIN_NORMALIZATIONS, BIN_STRATEGIES, DepthBins
from keras_vit.layers.dpt import DptNeck
from keras_vit.layers.eomt import EomtHead
from keras_vit.layers.resize import resize_bilinear

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("old, new", [((5, 7), (13, 4)), ((19, 19), (37, 37)), ((16, 16), (4, 4)), ((1, 3), (4, 1))])
def test_resize_is_torchs_interpolate(old, new, align_corners):
    x = RNG.normal(size=(2, *old, 3)).astype("float32")
    expected = torch.nn.functional.interpolate(
        torch.from_numpy(x).permute(0, 3, 1, 2), size=new, mode="bilinear", align_corners=align_corners,
    ).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(resize_bilinear(x, new, align_corners)), expected,
                               atol=2e-5)
    with kernels.export_mode():  # the exporters' gather (torch: index_select)
        exported = keras.ops.convert_to_numpy(resize_bilinear(x, new, align_corners))
    np.testing.assert_allclose(exported, expected, atol=2e-5)


@pytest.mark.parametrize("strategy", BIN_STRATEGIES)
@pytest.mark.parametrize("normalization", BIN_NORMALIZATIONS)
def test_depth_bins_are_chmv2s(strategy, normalization):
    transformers = pytest.importorskip("transformers")
    from transformers.models.chmv2.modeling_chmv2 import CHMv2FeaturesToDepth

    config = transformers.CHMv2Config(backbone_config={"model_type": "dinov3_vit"}, min_depth=0.01, max_depth=40.0,
                                      bins_strategy=strategy, norm_strategy=normalization)
    logits = (3 * RNG.normal(size=(2, 6, 5, 4)) + 1).astype("float32")
    expected = CHMv2FeaturesToDepth(config)(torch.from_numpy(logits))[:, 0].numpy()
    layer = DepthBins(0.01, 40.0, strategy, normalization)
    ours = keras.ops.convert_to_numpy(layer(logits.transpose(0, 2, 3, 1)))
    np.testing.assert_allclose(ours, expected.transpose(0, 1, 2), rtol=1e-4, atol=1e-4)


def _neck(**kw):
    return DptNeck(8, (4, 8, 8), (2, 1, 0.5), 4, readout="project", fusion_upsample="next", name="neck", **kw)


def _head(**kw):
    return EomtHead(3, 2, 1, num_upscale_blocks=2, mask_probabilities=(1.0,), name="eomt_head", **kw)


# name: (layer factory, symbolic inputs -> outputs of the layer, input arrays)
CASES = {
    "DptNeck": (
        _neck,
        lambda layer, x: layer(x[:3], class_tokens=x[3:]),
        [RNG.normal(size=(2, 4, 4, 8)).astype("float32") for _ in range(3)]
        + [RNG.normal(size=(2, 8)).astype("float32") for _ in range(3)],
    ),
    "EomtHead": (
        _head,
        lambda layer, x: layer(x),
        [RNG.normal(size=(2, 3 + 1 + 6, 8)).astype("float32"), np.zeros((2, 2, 3, 1), "float32")],
    ),
}


def _model(layer, call, arrays):
    inputs = [keras.Input(a.shape[1:]) for a in arrays]
    return keras.Model(inputs, call(layer, inputs))


def _numpy(outputs):
    return [keras.ops.convert_to_numpy(o) for o in keras.tree.flatten(outputs)]


@pytest.mark.parametrize("name", list(CASES))
def test_contract(name, tmp_path):
    make, call, arrays = CASES[name]
    layer = make()
    model = _model(layer, call, arrays)
    expected = _numpy(model(arrays))
    # Config round trip and `.keras` saving inside a model.
    assert type(layer).from_config(layer.get_config()).get_config() == layer.get_config()
    model.save(str(tmp_path / "model.keras"))
    for a, b in zip(expected, _numpy(keras.saving.load_model(str(tmp_path / "model.keras"))(arrays))):
        np.testing.assert_allclose(b, a, atol=1e-6)
    # Under mixed bfloat16, with the same weights, the outputs stay close.
    half = make(dtype="mixed_bfloat16")
    half_model = _model(half, call, arrays)
    for target, source in zip(half.weights, layer.weights):
        target.assign(source)
    for a, b in zip(expected, _numpy(half_model(arrays))):
        assert np.abs(b.astype("float32") - a).max() <= 0.2 * max(1.0, np.abs(a).max())
    assert not any(v.path.endswith("mask_probabilities") for v in layer.trainable_weights)
    # One SGD step moves every trainable weight (but the first fusion block's
    # residual unit, which DPT's checkpoints keep and never use).
    before = [keras.ops.convert_to_numpy(w).copy() for w in layer.trainable_weights]
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    targets = [RNG.normal(size=e.shape).astype("float32") for e in expected]
    model.fit(arrays, targets, epochs=1, batch_size=2, verbose=0)
    for weight, old in zip(layer.trainable_weights, before):
        moved = not np.array_equal(keras.ops.convert_to_numpy(weight), old)
        assert moved == ("fusion_0_unit_1" not in weight.path), weight.path
