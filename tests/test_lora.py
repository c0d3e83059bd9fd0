"""LoRA: trainable counts, adapters saved and loaded alone, merge, one training step."""

import numpy as np
import pytest

import keras
import keras_vit
from conftest import TINY, spread, to_numpy
from keras_vit.models import lora
from keras_vit.training import compile_for_finetuning

pytestmark = spread("LoRA's adapters are Keras layers held on every backend by the model contract; each case "
                    "once")

CLASSES = 3
D, H, MLP, L = TINY["hidden_size"], TINY["num_heads"], TINY["mlp_dim"], TINY["num_layers"]


def _model(seed=0):
    model = keras_vit.ViT(**TINY, classes=CLASSES, classifier_activation=None)
    rng = np.random.default_rng(seed)
    for variable in model.weights:  # the head starts at zero: give every weight a value
        variable.assign(rng.normal(scale=0.2, size=variable.shape).astype("float32"))
    return model


def _adapter_size(target, rank):
    """Parameters of Keras' LoRA on one projection, from its kernel shape:
    A takes every kernel axis but the last (then the rank), B maps the rank
    to the last axis."""
    kernel = {"query": (D, H, D // H), "key": (D, H, D // H), "value": (D, H, D // H),
              "out": (H, D // H, D), "Dense_0": (D, MLP), "Dense_1": (MLP, D)}[target]
    return int(np.prod(kernel[:-1])) * rank + rank * kernel[-1]


def _randomise_adapters(model, seed):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        if "lora_kernel" in variable.path:
            variable.assign(rng.normal(scale=0.3, size=variable.shape).astype("float32"))


def _images(seed=1):
    return np.random.default_rng(seed).normal(size=(2, 32, 32, 3)).astype("float32")


@pytest.mark.parametrize("targets,rank,train_head", [
    (("query", "value"), 2, True), (lora.TARGETS, 3, False), (("out", "Dense_1"), 1, True),
])
def test_trainable_count(targets, rank, train_head, capsys):
    model = _model()
    count = model.enable_lora(rank, targets=targets, train_head=train_head)
    expected = L * sum(_adapter_size(t, rank) for t in targets)
    expected += (D * CLASSES + CLASSES) if train_head else 0
    assert count == expected == sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    assert f"{expected:,} trainable parameters" in capsys.readouterr().out


@pytest.mark.parametrize("targets", [("query", "qkv"), (), "mlp"])
def test_invalid_targets_list_the_valid_ones(targets):
    with pytest.raises(ValueError, match="Dense_0.*Received: targets"):
        _model().enable_lora(2, targets=targets)


@pytest.mark.parametrize("rank", [0, 1.5, None])
def test_invalid_rank(rank):
    with pytest.raises(ValueError, match="rank"):
        _model().enable_lora(rank)


def test_adapters_round_trip(tmp_path):
    base = tmp_path / "base.weights.h5"
    model = _model()
    model.save_weights(base)
    model.enable_lora(2, targets=("query", "value", "Dense_0"), verbose=False)
    _randomise_adapters(model, 5)
    path = tmp_path / "adapters.lora.h5"
    model.save_lora_weights(path)
    # A new model from the base weights: loading enables LoRA with the file's settings.
    other = keras_vit.ViT(**TINY, classes=CLASSES, classifier_activation=None)
    other.load_weights(base)
    other.load_lora_weights(path)
    assert other._lora_settings == model._lora_settings
    np.testing.assert_allclose(to_numpy(other(_images())), to_numpy(model(_images())), rtol=0, atol=1e-6)
    # The adapters change the output: the round trip is not trivially equal.
    assert np.abs(to_numpy(other(_images())) - to_numpy(_model()(_images()))).max() > 1e-3


def test_adapter_file_errors(tmp_path):
    model = _model()
    with pytest.raises(ValueError, match="enable_lora"):
        model.save_lora_weights(tmp_path / "a.lora.h5")
    model.enable_lora(2, verbose=False)
    with pytest.raises(ValueError, match=r"\.lora\.h5"):
        model.save_lora_weights(tmp_path / "a.h5")
    model.save_lora_weights(tmp_path / "a.lora.h5")
    other = _model()
    other.enable_lora(4, verbose=False)
    with pytest.raises(ValueError, match="rank=2"):
        other.load_lora_weights(tmp_path / "a.lora.h5")
    with pytest.raises(ValueError, match="already enabled"):
        model.enable_lora(2)


def test_merged_equals_unmerged_and_is_a_plain_model(tmp_path):
    model = _model()
    model.enable_lora(2, targets=lora.TARGETS, verbose=False)
    _randomise_adapters(model, 7)
    with pytest.raises(ValueError, match="merge_lora"):
        model.export(str(tmp_path / "model.onnx"), format="onnx")
    with pytest.raises(ValueError, match="merge_lora"):
        model.for_inference()
    x = _images()
    unmerged = to_numpy(model(x))
    model.merge_lora()
    np.testing.assert_allclose(to_numpy(model(x)), unmerged, rtol=0, atol=1e-5)
    np.testing.assert_allclose(to_numpy(model.for_inference()(x)), unmerged, rtol=0, atol=1e-5)
    np.testing.assert_allclose(model.predict(x, verbose=0), unmerged, rtol=0, atol=1e-5)
    plain = keras_vit.ViT(**TINY, classes=CLASSES, classifier_activation=None)
    assert [v.path for v in model.weights] == [v.path for v in plain.weights]
    assert all(keras_vit.kernels.runs_plain(l) for l in lora.projection_layers(model).values())
    path = tmp_path / "merged.weights.h5"
    model.save_weights(path)
    plain.load_weights(path)
    np.testing.assert_allclose(to_numpy(plain(x)), unmerged, rtol=0, atol=1e-5)


def _step_changes(model, compile_fn):
    compile_fn(model)
    before = {v.path: to_numpy(v).copy() for v in model.weights}
    model.train_on_batch(_images(), np.array([0, 2]))
    return {p for p, value in before.items() if not np.array_equal(value, to_numpy(_get_weight(model, p)))}


def _get_weight(model, path):
    return next(v for v in model.weights if v.path == path)


@pytest.mark.parametrize("train_head", [False, True])
def test_one_training_step_changes_only_the_adapters(train_head):
    model = _model()
    model.enable_lora(2, targets=("query", "value", "out"), train_head=train_head, verbose=False)
    _randomise_adapters(model, 3)  # B = 0 would leave A's gradient at zero
    adapters = {v.path for v in model.weights if "lora_kernel" in v.path}
    head = {"head/kernel", "head/bias"} if train_head else set()
    changed = _step_changes(model, lambda m: m.compile(
        keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True)))
    assert changed == adapters | head


def test_recipe_trains_only_the_adapters_and_the_head():
    model = _model()
    changed = _step_changes(model, lambda m: compile_for_finetuning(
        m, total_steps=4, warmup_steps=0, lora_rank=2, global_batch_size=2, base_lr=0.1))
    # Keras initialises B at zero: the first step moves B and the head only.
    expected = {f"encoderblock_{i}/MultiHeadDotProductAttention_1/{t}/lora_kernel_b"
                for i in range(L) for t in ("query", "value")}
    assert changed == expected | {"head/kernel", "head/bias"}


def test_finetune_example_trains_lora_with_layer_decay(tmp_path):
    import importlib.util

    from conftest import ROOT

    pytest.importorskip("tensorflow", reason="the example's input pipeline needs TensorFlow")
    pytest.importorskip("sklearn", reason="the example's offline dataset comes from scikit-learn")
    spec = importlib.util.spec_from_file_location("finetune_example", ROOT / "examples" / "finetune.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    results = example.main([
        "--smoke", "--optimizer", "sgd", "--lora-rank", "2", "--lora-targets", "query,Dense_0",
        "--layer-decay", "0.75", "--run-dir", str(tmp_path), "--verbose", "0",
    ])
    assert results["updates"] == example.SMOKE["total_steps"]


def test_merged_model_exports_to_onnx_with_the_adapters(tmp_path):
    from keras_vit import export
    from keras_vit.export import serving

    if "onnx" not in export.BACKEND_FORMATS.get(keras.backend.backend(), ()):
        pytest.skip(f"no ONNX exporter for the {keras.backend.backend()} backend")
    model = _model()
    model.enable_lora(2, targets=("query", "value", "Dense_1"), verbose=False)
    _randomise_adapters(model, 9)
    x = _images()
    expected = to_numpy(model(x))
    path = model.merge_lora().export(str(tmp_path / "merged.onnx"), format="onnx")
    np.testing.assert_allclose(serving.run_exported(path, "onnx", x), expected, rtol=0, atol=1e-4)
