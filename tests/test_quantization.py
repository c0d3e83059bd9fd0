"""`model.quantize(...)` on every model family, the real weights' top-1, quantized export."""

import keras
import numpy as np
import pytest
from conftest import DEIT_NPZ, TINY, imagenet_preprocess, requires_shared

import keras_vit
from keras_vit import export
from keras_vit.layers.resnet import StdConv2D

BACKEND = keras.backend.backend()
# scikit-image's colour photos; DeiT-Tiny's float32 top-1 on them is
# 285 Egyptian cat, 967 espresso, 747 punching bag, 517 crane,
# 107 jellyfish, 911 wool, 971 bubble.
PHOTOS = ("chelsea", "coffee", "astronaut", "rocket", "retina", "immunohistochemistry", "hubble_deep_field")


def _model(family):
    config = dict(TINY, classes=10, classifier_activation=None)
    if family == "hybrid":
        model = keras_vit.ViTHybrid(resnet_layers=(1,), resnet_width=0.5, **dict(config, patch_size=2))
    else:  # "options": distillation and register tokens, LayerScale, no q/k/v bias
        model = keras_vit.ViT(**config, distillation_token=True, num_register_tokens=2,
                              layer_scale_init=0.1, qkv_bias=False)
    rng = np.random.default_rng(1)
    for head in [layer for layer in model.layers if layer.name in ("head", "head_dist")]:
        head.kernel.assign(rng.normal(size=head.kernel.shape).astype("float32"))
    return model


@pytest.mark.parametrize("mode, tolerance", [("int8", 0.1), ("float8", 0.25)])
# "options" runs every layer of the plain ViT too, which the real weights'
# check below quantizes.
@pytest.mark.parametrize("family", ["hybrid", "options"])
def test_quantize_every_family(family, mode, tolerance):
    model = _model(family)
    x = np.random.default_rng(0).normal(size=(4, 32, 32, 3)).astype("float32")
    reference = model.predict(x, verbose=0)
    model.quantize(mode)
    quantized = {type(layer).__name__ for layer in model._flatten_layers() if layer.quantization_mode == mode}
    assert {"Dense", "EinsumDense"} <= quantized  # MLP, head; q/k/v/out projections
    # Keras quantizes Dense, EinsumDense and Embedding only: the hybrid's
    # convolutions stay float.
    assert not any(getattr(layer, "quantization_mode", None) for layer in model._flatten_layers()
                   if isinstance(layer, StdConv2D))
    outputs = model.predict(x, verbose=0)
    error = np.linalg.norm(outputs - reference) / np.linalg.norm(reference)
    assert 0 < error < tolerance, error


@requires_shared
def test_int8_keeps_the_real_weights_top1():
    import skimage.data

    x = np.stack([imagenet_preprocess(getattr(skimage.data, name)()) for name in PHOTOS])
    model = keras_vit.ViTTi16(weights=str(DEIT_NPZ), gelu_approximate=False, classifier_activation=None)
    reference = model.predict(x, verbose=0)
    model.quantize("int8")
    quantized = model.predict(x, verbose=0)
    top1, ref_top1 = quantized.argmax(-1), reference.argmax(-1)
    assert ref_top1[:2].tolist()[1] == 967 and ref_top1[0] in (281, 282, 285)
    # The confident photos keep their class; at most one of the seven (the
    # rocket, float32 top-1 probability 0.21) moves to a near neighbour.
    assert (top1[:3] == ref_top1[:3]).all(), (top1, ref_top1)
    assert (top1 == ref_top1).sum() >= len(PHOTOS) - 1, (top1, ref_top1)
    top5 = np.argsort(reference, axis=-1)[:, -5:]
    assert all(t in row for t, row in zip(top1, top5))


@pytest.mark.parametrize("format", export.QUANTIZED_FORMATS.get(BACKEND, ()))
def test_quantized_model_exports(format, tmp_path):
    model = _model("options")
    model.quantize("int8")
    x = np.random.default_rng(0).normal(size=(3, 32, 32, 3)).astype("float32")
    path = export.export_model(model, str(tmp_path / f"q{export.SUFFIXES[format]}"), format)
    diff, outputs, expected = export.verify_export(path, format, model, x)
    assert diff <= 1e-4, diff
