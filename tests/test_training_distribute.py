"""Distributions: tf.distribute and jax data/model parallelism, TPU errors.

Multi-device runs need the device count fixed before the framework starts
(logical CPU devices for TensorFlow, XLA_FLAGS for jax), so they run in
subprocesses with their own KERAS_BACKEND. Each takes about a minute on two
shared cores, so it runs once, in the test session of its own backend.
"""

import functools
import json
import os
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import training
from keras_vit.training import distribute
from tests.conftest import ROOT, TINY, runs_once

pytest.importorskip("tensorflow", reason="the subprocess runs need TensorFlow")
pytest.importorskip("jax", reason="the subprocess runs need jax")

# A task a tiny ViT learns in a few steps: dark images are class 0, bright 1.
TASK = """
import json, numpy as np, keras, keras_vit
from keras_vit import training
rng = np.random.default_rng(0)
y = np.tile([0, 1], 16).astype("int32")
x = (rng.normal(0, 0.3, (32, 16, 16, 3)) + np.where(y, 0.5, -0.5)[:, None, None, None]).astype("float32")

def build():
    # Called inside a distribution's scope.
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=16, num_layers=1,
                          num_heads=2, mlp_dim=32, classes=2, classifier_activation=None)
    training.compile_for_pretraining(model, total_steps=40, base_lr=3e-3, warmup_steps=0,
                                     weight_decay=0.0, global_batch_size=8)
    return model

def fit(dist):
    with dist.scope():
        model = build()
        history = model.fit(x, y, batch_size=8, epochs=10, verbose=0, shuffle=False)
    return model, history.history["loss"]

# Masked patch prediction on images of one colour each: the model learns to
# copy a corrupted patch's colour from the visible ones.
def pretrain(dist):
    from keras_vit import pretraining
    images = np.broadcast_to(rng.integers(0, 256, (8, 1, 1, 3)), (8, 32, 32, 3)).astype("uint8")
    with dist.scope():
        keras.utils.set_random_seed(0)
        encoder = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1,
                                num_heads=2, mlp_dim=32, include_top=False)
        task = pretraining.MaskedPatchPrediction(encoder, seed=0)
        training.compile_for_masked_patch_prediction(task, total_steps=24, base_lr=1e-2,
                                                     warmup_steps=0, global_batch_size=8)
        loss = task.fit(np.tile(images, (3, 1, 1, 1)), batch_size=8, epochs=8, verbose=0).history["loss"]
        return {"loss": loss, "eval": float(task.evaluate(images, batch_size=8, verbose=0))}
"""

TF_MIRRORED = """
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
""" + TASK + """
dist = training.get_distribution("mirrored")
model, loss = fit(dist)
kinds = sorted({type(w.value).__name__ for w in model.trainable_weights})
print(json.dumps({"replicas": dist.num_replicas, "loss": loss, "kinds": kinds, "mpp": pretrain(dist)}))
"""

JAX_PARALLEL = """
import os
# The job's own XLA flags (tools/run_tests.py: no LLVM optimisations) stay.
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
""" + TASK + """
out = {}
dist = training.get_distribution("data_parallel")
model, out["dp_loss"] = fit(dist)
out["dp_replicas"] = dist.num_replicas
out["mpp"] = pretrain(dist)
dist = training.get_distribution("model_parallel", model_parallel=2, num_heads=2, mlp_dim=32)
model, out["mp_loss"] = fit(dist)
out["mp_replicas"] = dist.num_replicas
out["mp_mpp"] = pretrain(dist)
out["specs"] = {w.path: [list(s) if isinstance(s, tuple) else s for s in w.value.sharding.spec]
                for w in model.weights}
out["shard_shapes"] = {w.path: list(w.value.addressable_shards[0].data.shape) for w in model.weights}

def layouts(model):
    variables = [*model.weights, *model.optimizer.variables]
    return {v.path: {"shape": list(v.shape), "spec": [s for s in v.value.sharding.spec] + [None] * (
                len(v.shape) - len(v.value.sharding.spec)),
                     "shard": list(v.value.addressable_shards[0].data.shape),
                     "devices": len(v.value.sharding.device_set)} for v in variables}

# FSDP over the 4 devices (every weight large enough: min_shard_bytes=0),
# and on a 2 x 2 (batch, model) mesh with tensor parallelism.
dist = training.get_distribution("fsdp", min_shard_bytes=0)
model, out["fsdp_loss"] = fit(dist)
out["fsdp_replicas"] = dist.num_replicas
out["fsdp"] = layouts(model)

def device_bytes(variables):
    held = {}
    for v in variables:
        for shard in v.value.addressable_shards:
            held[str(shard.device)] = held.get(str(shard.device), 0) + shard.data.nbytes
    return max(held.values())

out["fsdp_bytes"] = [device_bytes(model.weights), device_bytes(model.optimizer.variables)]
dist = training.get_distribution("fsdp", model_parallel=2, num_heads=2, mlp_dim=32, min_shard_bytes=0)
model, out["fsdp2_loss"] = fit(dist)
out["fsdp2_replicas"] = dist.num_replicas
out["fsdp2"] = layouts(model)
out["fsdp2_bytes"] = [device_bytes(model.weights), device_bytes(model.optimizer.variables)]

# Orbax: 6 steps on one batch under FSDP over 4 devices, against 3 steps
# checkpointed by keras.callbacks.OrbaxCheckpoint and resumed in a new model
# over 2 of the devices.
import tempfile, jax

def steps(dist, start, stop, model=None, callbacks=()):
    with dist.scope():
        model = build() if model is None else model
        loss = model.fit(x[:8], y[:8], batch_size=8, epochs=stop, initial_epoch=start, verbose=0,
                         shuffle=False, callbacks=list(callbacks)).history["loss"]
    return model, loss

four = training.get_distribution("fsdp", min_shard_bytes=0)
_, out["orbax_whole"] = steps(four, 0, 6)
folder = tempfile.mkdtemp()
_, out["orbax_first"] = steps(four, 0, 3, callbacks=[
    keras.callbacks.OrbaxCheckpoint(folder, save_freq="epoch", save_on_background=False)])
two = training.get_distribution("fsdp", devices=jax.devices()[:2], min_shard_bytes=0)
with two.scope():
    resumed = build()
    resumed.optimizer.build(resumed.trainable_variables)
    resumed.load_weights(folder)
out["orbax_iterations"] = int(resumed.optimizer.iterations.numpy())
out["orbax_devices"] = len(resumed.weights[0].value.sharding.device_set)
_, out["orbax_rest"] = steps(two, 3, 6, model=resumed)
print(json.dumps(out))
"""


# A reduced-depth DINOv3-7B in transformers' layout (SwiGLU, head width 128),
# narrower: the files are written here and loaded by a process of its own, so
# that its peak memory counts nothing but the load.
DINOV3_CONFIG = {"architectures": ["DINOv3ViTModel"], "model_type": "dinov3_vit", "hidden_size": 1024,
                 "num_attention_heads": 8, "intermediate_size": 2048, "num_hidden_layers": 2,
                 "use_gated_mlp": True, "hidden_act": "silu", "num_register_tokens": 4, "layerscale_value": 1e-5,
                 "image_size": 32, "patch_size": 16, "key_bias": False}


def _dinov3_state(config, rng):
    """A random state dict with the tensor names and shapes transformers' DINOv3ViTModel saves."""
    width, hidden = config["hidden_size"], config["intermediate_size"]
    shapes = {"embeddings.cls_token": (1, 1, width), "embeddings.mask_token": (1, 1, width),
              "embeddings.register_tokens": (1, config["num_register_tokens"], width),
              "embeddings.patch_embeddings.weight": (width, 3, 16, 16), "embeddings.patch_embeddings.bias": (width,),
              "norm.weight": (width,), "norm.bias": (width,)}
    for i in range(config["num_hidden_layers"]):
        block = {"norm1.weight": (width,), "norm1.bias": (width,), "norm2.weight": (width,), "norm2.bias": (width,),
                 "layer_scale1.lambda1": (width,), "layer_scale2.lambda1": (width,),
                 "attention.k_proj.weight": (width, width)}
        for name in ("q", "v", "o"):
            block.update({f"attention.{name}_proj.weight": (width, width), f"attention.{name}_proj.bias": (width,)})
        for name, shape in (("gate", (hidden, width)), ("up", (hidden, width)), ("down", (width, hidden))):
            block.update({f"mlp.{name}_proj.weight": shape, f"mlp.{name}_proj.bias": shape[:1]})
        shapes.update({f"layer.{i}.{key}": shape for key, shape in block.items()})
    return {key: rng.standard_normal(shape, dtype="float32") for key, shape in shapes.items()}


SHARDED_LOAD = """
import os, sys, json
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
import numpy as np, keras, keras_vit
from keras_vit import training
from keras_vit.presets import loading
from keras_vit.weights.mapping import model_variables
folder, out = sys.argv[1], {}

def status():
    with open("/proc/self/status") as f:
        return {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.startswith(("VmHWM", "VmRSS"))}

dist = training.get_distribution("fsdp")
for name, dtype in (("f32", "float32"), ("bf16", "bfloat16")):
    directory = os.path.join(folder, name)
    size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory) if f.endswith(".safetensors"))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak starts again from here
    before = status()["VmRSS"]
    with dist.scope():
        model = keras_vit.from_preset(directory, dtype=dtype)
    grown = (status()["VmHWM"] - before) / size
    # What a single-device load assigns: each tensor read whole by
    # safetensors, in the canonical layout, cast to the model's dtype.
    params = loading.describe_preset(directory).read(model).params
    out[name] = {"growth": grown, "equal": all(
        np.array_equal(np.asarray(v.value), np.asarray(params[key]).astype(v.value.dtype))
        for key, v in model_variables(model).items()),
        "dtypes": sorted({str(w.value.dtype) for w in model.weights}),
        "split": sum(not w.value.sharding.is_fully_replicated for w in model.weights)}
    del model, params
print(json.dumps(out))
"""


@runs_once("jax", "keras.distribution's variables are jax arrays; other backends load as before")
def test_fsdp_loads_a_checkpoint_slice_by_slice(tmp_path):
    """A float32 checkpoint in shards and a bfloat16 one, loaded under 8-way
    FSDP: the process's peak memory grows by at most 1.2 x the files' bytes
    (the 8 host devices together hold one copy of the weights), and the
    weights are the tensors a single-device load assigns, bit for bit."""
    import ml_dtypes
    from safetensors.numpy import save_file

    from keras_vit.weights import files, shards

    state = _dinov3_state(DINOV3_CONFIG, np.random.default_rng(0))
    for name in ("f32", "bf16"):
        os.mkdir(tmp_path / name)
        files.write_json(tmp_path / name / "config.json", DINOV3_CONFIG)
    shards.write_state(str(tmp_path / "f32"), state, max_shard_size="30MB")
    save_file({k: v.astype(ml_dtypes.bfloat16) for k, v in state.items()}, str(tmp_path / "bf16" / "model.safetensors"))
    del state
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", SHARDED_LOAD, str(tmp_path)], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(os.listdir(tmp_path / "f32")) >= 4  # shards and their index
    for name, dtype in (("f32", "float32"), ("bf16", "bfloat16")):
        assert out[name]["equal"], out
        assert out[name]["dtypes"] == [dtype], out
        assert out[name]["split"] >= 15, out  # every kernel of both blocks and the patch embedding
        assert out[name]["growth"] <= 1.2, out


def _config_only(folder, shards=()):
    """A transformers directory of `DINOV3_CONFIG` whose index lists `shards`, none of them written."""
    from keras_vit.weights import files

    files.write_json(folder / "config.json", DINOV3_CONFIG)
    if shards:
        files.write_json(folder / "model.safetensors.index.json",
                         {"weight_map": {f"w{i}": shard for i, shard in enumerate(shards)}})
    return str(folder)


@runs_once("torch", "the index is read before any model is built, whatever the backend")
def test_a_missing_shard_is_named_before_any_weight(tmp_path, monkeypatch):
    from keras_vit.presets import loading

    folder = _config_only(tmp_path, ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"])
    monkeypatch.setattr(loading, "_build", lambda *a: pytest.fail("a model was built"))
    with pytest.raises(ValueError, match="Shard 'model-00001-of-00002.safetensors' listed in .*index.json' is missing"):
        keras_vit.from_preset(folder)


@runs_once("jax", "only jax's distributions name devices by mesh")
def test_a_mesh_larger_than_the_devices_is_named_before_any_weight(tmp_path, monkeypatch):
    from safetensors.numpy import save_file

    from keras_vit.execution import fsdp
    from keras_vit.presets import loading

    folder = _config_only(tmp_path)
    names = [f"cpu:{i}" for i in range(64)]
    with pytest.raises(ValueError, match="device mesh is larger than the devices.*shape=\\{'batch': 64\\}"):
        training.get_distribution("fsdp", devices=names)
    mesh = keras.distribution.DeviceMesh((64,), ("batch",), names)
    monkeypatch.setattr(loading, "_build", lambda *a: pytest.fail("a model was built"))
    with fsdp.FSDP(fsdp.FSDPLayoutMap(mesh)).scope():
        with pytest.raises(ValueError, match="64 devices; jax sees"):
            keras_vit.from_preset(folder)
        file = os.path.join(folder, "model.safetensors")
        save_file({"cls_token": np.zeros((1, 1, 768), "float32")}, file)
        with pytest.raises(ValueError, match="64 devices; jax sees"):
            keras_vit.ViTB16(weights=file)


@functools.lru_cache(maxsize=None)  # one run serves every test of its backend
def _run(script, backend, timeout=300):
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _falls(loss):
    return loss[-1] < 0.5 * loss[0]


def _only_under(backend):
    return runs_once(backend, f"the {backend} backend's own distribution over several devices")


@_only_under("tensorflow")
def test_tensorflow_mirrored_over_two_logical_cpus():
    out = _run(TF_MIRRORED, "tensorflow")
    assert out["replicas"] == 2
    assert _falls(out["loss"]), out["loss"]
    assert all("Mirrored" in kind for kind in out["kinds"]), out["kinds"]


# (script, replicas, the pre-training runs it makes: data parallel, and on
# jax also model parallel)
SEVERAL_DEVICES = {"tensorflow": (TF_MIRRORED, 2, ("mpp",)), "jax": (JAX_PARALLEL, 4, ("mpp", "mp_mpp"))}


@pytest.mark.skipif(
    keras.backend.backend() not in SEVERAL_DEVICES,
    reason="several-device runs exist for tensorflow (mirrored) and jax (data and model parallel)",
)
def test_masked_patch_prediction_over_several_devices():
    """The replicas' losses are averaged, not summed.

    Before training the loss is near log(512) = 6.24 (random head): summing
    the replicas' losses would report `replicas` times that.
    """
    backend = keras.backend.backend()
    script, replicas, runs = SEVERAL_DEVICES[backend]
    out = _run(script, backend)
    assert out.get("replicas", out.get("dp_replicas")) == replicas
    for run in runs:
        loss, evaluated = out[run]["loss"], out[run]["eval"]
        assert abs(loss[0] - np.log(512)) < 1.0, (run, loss)
        assert loss[-1] < 0.7 * loss[0], (run, loss)
        assert np.isfinite(evaluated) and evaluated < loss[0], (run, evaluated)


@_only_under("jax")
def test_jax_data_and_model_parallel_over_four_host_devices():
    out = _run(JAX_PARALLEL, "jax")
    assert out["dp_replicas"] == 4 and out["mp_replicas"] == 2
    assert _falls(out["dp_loss"]), out["dp_loss"]
    assert _falls(out["mp_loss"]), out["mp_loss"]
    specs, shards = out["specs"], out["shard_shapes"]
    attention = "encoderblock_0/MultiHeadDotProductAttention_1/"
    mlp = "encoderblock_0/MlpBlock_3/"
    expected = {
        attention + "query/kernel": ([None, "model", None], [16, 1, 8]),
        attention + "key/kernel": ([None, "model", None], [16, 1, 8]),
        attention + "value/kernel": ([None, "model", None], [16, 1, 8]),
        attention + "value/bias": (["model", None], [1, 8]),
        attention + "out/kernel": (["model", None, None], [1, 8, 16]),
        mlp + "Dense_0/kernel": ([None, "model"], [16, 16]),
        mlp + "Dense_0/bias": (["model"], [16]),
        mlp + "Dense_1/kernel": (["model", None], [16, 16]),
    }
    for path, (spec, shard) in expected.items():
        assert specs[path] == spec, (path, specs[path])
        assert shards[path] == shard, (path, shards[path])
    for path in ("embedding/kernel", "head/kernel", mlp + "Dense_1/bias", attention + "out/bias"):
        assert all(axis is None for axis in specs[path]), (path, specs[path])


def _split_axis(shape, devices):
    # FSDP's rule, as the docs state it: the largest axis the device count
    # divides, the first of equal ones; none, replicated.
    best = None
    for i, dim in enumerate(shape):
        if dim % devices == 0 and (best is None or dim > shape[best]):
            best = i
    return best


@_only_under("jax")
def test_jax_fsdp_splits_every_weight_and_its_optimizer_state_and_trains_as_data_parallel():
    out = _run(JAX_PARALLEL, "jax")
    assert out["fsdp_replicas"] == 4 and out["fsdp2_replicas"] == 2
    # The same steps as data parallelism over the same devices.
    np.testing.assert_allclose(out["fsdp_loss"][:3], out["dp_loss"][:3], rtol=1e-5)
    np.testing.assert_allclose(out["fsdp2_loss"][:3], out["dp_loss"][:3], rtol=1e-5)
    split = 0
    for path, v in out["fsdp"].items():
        axis = _split_axis(v["shape"], 4)
        spec = [None] * len(v["shape"])
        if axis is not None:
            spec[axis] = "batch"
            split += 1
        assert v["spec"] == spec, (path, v)
        assert v["shard"] == [d // 4 if i == axis else d for i, d in enumerate(v["shape"])], (path, v)
    assert split > 20, split
    # The optimizer's moments follow their weights.
    kernel = "encoderblock_0/MlpBlock_3/Dense_0/kernel"
    moments = [p for p in out["fsdp"] if p.endswith(("encoderblock_0_MlpBlock_3_Dense_0_kernel_momentum",
                                                     "encoderblock_0_MlpBlock_3_Dense_0_kernel_velocity"))]
    assert len(moments) == 2, [p for p in out["fsdp"] if "Dense_0_kernel" in p]
    assert all(out["fsdp"][p]["spec"] == out["fsdp"][kernel]["spec"] for p in moments), moments
    # On (batch 2, model 2): the tensor-parallel axis first, then FSDP's
    # largest remaining one over "batch".
    two = out["fsdp2"]
    assert two[kernel]["spec"] == ["batch", "model"] and two[kernel]["shard"] == [8, 16], two[kernel]
    query = "encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"
    assert two[query]["spec"] == ["batch", "model", None] and two[query]["shard"] == [8, 1, 8], two[query]
    assert two["head/bias"]["spec"] == ["batch"], two["head/bias"]


@_only_under("jax")
def test_orbax_checkpoint_resumes_fsdp_training_on_another_mesh():
    """`keras.callbacks.OrbaxCheckpoint` in `fit` under FSDP over 4 devices,
    stopped after step 3 and resumed over 2 devices in a new model in the
    same process: steps 4-6 as the uninterrupted run's. (The recipes'
    optimizers have fixed names: Keras numbers unnamed ones per process,
    and the state saved under one name was not restored under the next.)"""
    out = _run(JAX_PARALLEL, "jax")
    assert out["orbax_first"] == out["orbax_whole"][:3]
    assert out["orbax_iterations"] == 3 and out["orbax_devices"] == 2
    np.testing.assert_allclose(out["orbax_rest"], out["orbax_whole"][3:], rtol=1e-6)


@_only_under("jax")
def test_plan_memory_gives_the_bytes_each_device_holds():
    """`plan_memory`, from shapes alone, against the shards the FSDP runs
    above hold: the weights and the AdamW state of the busiest device."""
    out = _run(JAX_PARALLEL, "jax")
    config = dict(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, classes=2,
                  classifier_activation=None)
    for key, model_parallel in (("fsdp_bytes", 1), ("fsdp2_bytes", 2)):
        plan = keras_vit.plan_memory(config, "fsdp", devices=4, batch_size=8, model_parallel=model_parallel,
                                     min_shard_bytes=0)
        weights, optimizer = out[key]
        assert abs(plan.weights - weights) <= 0.05 * weights, (key, plan, weights)
        assert abs(plan.optimizer - optimizer) <= 0.05 * optimizer, (key, plan, optimizer)
        assert plan.weights < 0.5 * plan.total_weights, plan


@runs_once("torch", "sums over shapes made with no weight; the layouts are held against jax's shards above")
def test_plan_memory_scales_and_refuses():
    """Weights split 8 ways under FSDP, whole under data parallelism; the
    activations follow each replica's batch; bad arguments are named; no
    variable is left for Keras to give a value later."""
    from keras.src.backend.common import global_state

    pending = len(global_state.get_global_attribute("uninitialized_variables", []))
    keras_vit.plan_memory("G/14", "fsdp", devices=64, batch_size=256)
    # A G/14's shapes left pending would take 7 GB at the next symbolic call.
    assert len(global_state.get_global_attribute("uninitialized_variables", [])) == pending
    one = keras_vit.plan_memory("Ti/16", "none", batch_size=8)
    data = keras_vit.plan_memory("Ti/16", "data_parallel", devices=8, batch_size=64)
    fsdp = keras_vit.plan_memory("Ti/16", "fsdp", devices=8, batch_size=64, min_shard_bytes=0)
    assert one.parameters == data.parameters == fsdp.parameters == 5_717_416
    assert one.total_weights == data.weights == one.weights == 4 * one.parameters
    assert one.optimizer == 2 * one.weights  # AdamW's two moments
    assert one.activations == data.activations == fsdp.activations > 0
    assert fsdp.weights <= 1.15 * fsdp.total_weights / 8, fsdp
    assert keras_vit.plan_memory("Ti/16", "none", batch_size=16).activations == 2 * one.activations
    assert keras_vit.plan_memory("Ti/16", "none", optimizer="sgd").optimizer == 0
    half = keras_vit.plan_memory("Ti/16", "none", dtype="bfloat16")
    assert half.weights == one.weights // 2 and half.activations == keras_vit.plan_memory("Ti/16").activations // 2
    with pytest.raises(ValueError, match="distribution"):
        keras_vit.plan_memory("Ti/16", "zero3")
    with pytest.raises(ValueError, match="batch_size=12 is not divisible by the 8 replicas"):
        keras_vit.plan_memory("Ti/16", "fsdp", devices=8, batch_size=12)
    with pytest.raises(ValueError, match="num_heads=3 is not divisible by model_parallel=2"):
        keras_vit.plan_memory("Ti/16", "model_parallel", devices=8)
    with pytest.raises(ValueError, match="devices=8"):
        keras_vit.plan_memory("Ti/16", "none", devices=8)
    with pytest.raises(ValueError, match="T/16"):
        keras_vit.plan_memory("T/16")


def test_fsdp_refusals(monkeypatch):
    """"fsdp" off jax, a model axis the devices or the heads do not divide,
    and a layout map of the wrong kind: errors naming the value."""
    from keras_vit.execution import fsdp

    if keras.backend.backend() != "jax":
        with pytest.raises(RuntimeError, match="'fsdp'.*jax"):
            training.get_distribution("fsdp")
        assert fsdp.fsdp_axis((4, 8), 4, 4, min_shard_bytes=0) == 1
        return
    devices = [f"cpu:{i}" for i in range(4)]
    monkeypatch.setattr(keras.distribution, "list_devices", lambda *a: devices)
    with pytest.raises(RuntimeError, match="model_parallel=3 .*divides the number of devices \\(4\\)"):
        training.get_distribution("fsdp", model_parallel=3)
    with pytest.raises(RuntimeError, match="num_heads=3 must be divisible by model_parallel=2"):
        training.get_distribution("fsdp", model_parallel=2, num_heads=3)
    mesh = keras.distribution.DeviceMesh((4,), ("batch",), devices)
    with pytest.raises(TypeError, match="FSDPLayoutMap"):
        fsdp.FSDP(keras.distribution.LayoutMap(mesh))
    with pytest.raises(ValueError, match="no axis named 'data'"):
        fsdp.FSDPLayoutMap(mesh, fsdp_axis="data")
    with pytest.raises(ValueError, match="min_shard_bytes=-1"):
        fsdp.FSDPLayoutMap(mesh, min_shard_bytes=-1)
    # Below min_shard_bytes (default 1 MiB) a weight is replicated.
    layout_map = keras_vit.ViT.get_layout_map(mesh, fsdp_axis="batch")
    assert layout_map.variable_layout("x/kernel", (256, 1024), "float32").axes == (None, "batch")
    assert layout_map.variable_layout("x/kernel", (256, 1025), "float32").axes == ("batch", None)
    assert layout_map.variable_layout("x/kernel", (256, 512), "float32").axes == (None, None)
    assert layout_map.variable_layout("x/kernel", (256, 512), "bfloat16").axes == (None, None)


def test_tpu_without_a_tpu_fails_fast(monkeypatch):
    for name in ("COLAB_TPU_ADDR", "TPU_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(distribute, "local_tpu_present", lambda: False)
    start = time.time()
    with pytest.raises(RuntimeError, match="No TPU found"):
        training.connect_tpu()
    with pytest.raises(RuntimeError, match="tpu='local'"):
        training.connect_tpu("local")
    with pytest.raises(RuntimeError, match="unreachable"):
        training.connect_tpu("grpc://127.0.0.1:1", timeout=5)
    with pytest.raises(RuntimeError, match="(?i)tpu"):
        training.get_distribution("tpu")
    assert time.time() - start < 30


def test_unavailable_distributions_explain(monkeypatch):
    with pytest.raises(ValueError, match="name"):
        training.get_distribution("horovod")
    with pytest.raises(RuntimeError, match="divisible"):
        distribute._mesh_shape(4, 2, num_heads=3, mlp_dim=8)
    with pytest.raises(RuntimeError, match="divide"):
        distribute._mesh_shape(4, 3, num_heads=3, mlp_dim=3)
    assert distribute._mesh_shape(8, 4, num_heads=16, mlp_dim=4096) == (2, 4)
    monkeypatch.setattr(distribute.keras.backend, "backend", lambda: "torch")
    with pytest.raises(RuntimeError, match="single device"):
        training.get_distribution("data_parallel")
    assert training.get_distribution("auto").name == "none"


def test_fit_in_the_single_device_scope(rng):
    keras.utils.set_random_seed(0)
    dist = training.get_distribution("none")
    y = np.tile([0, 1], 8)
    x = (rng.normal(0, 0.3, (16, 32, 32, 3)) + np.where(y, 0.5, -0.5)[:, None, None, None]).astype("float32")
    with dist.scope():
        model = keras_vit.ViT(**TINY, classes=2, classifier_activation=None)
        training.compile_for_pretraining(
            model, total_steps=40, base_lr=3e-3, warmup_steps=0, weight_decay=0.0, global_batch_size=8
        )
        # 40 updates: the loss falls to about 0.2x its start (0.5x needs ~20).
        loss = model.fit(x, y, batch_size=8, epochs=20, verbose=0).history["loss"]
    assert _falls(loss), loss
    assert keras.backend.backend() == dist.backend


@runs_once("jax", "the guide's steps are jax's keras.distribution; each is held on its own by the tests above")
def test_big_models_guide_runs(tmp_path):
    """docs/guides/big-models.md, its blocks in one process of 4 virtual CPU
    devices as it says: the plans, a LoRA fine-tune under FSDP with Orbax
    checkpoints, and the run resumed over 2 of the devices."""
    sys.path.insert(0, str(ROOT / "tests"))
    from docs_blocks import python_blocks

    blocks = [b.code for b in python_blocks(ROOT / "docs" / "guides" / "big-models.md")
              if b.run_by and b.run_by.endswith("::test_big_models_guide_runs")]
    assert len(blocks) == 4
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", "\n".join(blocks)], env=env, cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "4 devices", lines
    from keras_vit.execution.sharded_load import shapes_only

    with shapes_only():
        parameters = keras_vit.ViTGigantic14().count_params()
    plans = [line for line in lines if line.startswith("fsdp over a")]
    assert [p.split(",")[0] for p in plans] == ["fsdp over a 8 mesh", "fsdp over a 32 mesh", "fsdp over a 8 x 4 mesh"]
    assert all(f"{parameters:,} parameters" in p for p in plans), plans
    assert "an MLP kernel (64, 128) split as PartitionSpec(None, 'batch')" in proc.stdout or \
        "an MLP kernel (64, 128) split as P(None, 'batch')" in proc.stdout, proc.stdout
    assert "resumed at step 6" in lines, lines
    losses = [float(v) for v in next(line for line in lines if line.startswith("losses:"))[9:-1].split()]
    resumed = float(lines[-1].split(":")[1])
    assert np.isfinite(resumed) and resumed < losses[-1] < losses[0], lines
