"""Training over two processes on 127.0.0.1, as two hosts would.

Each case starts two processes with `tools/launch_local.py` (free ports
chosen at run time, a hard timeout, the launcher stopping by process id
only what it started) and judges them by the files they write: a jax
process may exit non-zero after success, when its peer shuts the
coordinator down first. Each runs once, in its own backend's test job,
against a one-process run of the same task in the test process: one run per
kind (jax's recovery from a lost process, jax's FSDP with LoRA and Orbax,
tensorflow's multi-worker strategy, torch's refusal, the example's
flags), each costing a few
seconds of two processes' start-up.
"""

import io
import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from keras_vit.execution.processes import torch_process_group_size
from keras_vit.training import multiprocess
from tests.conftest import ROOT, runs_once

sys.path.insert(0, str(ROOT / "tools"))
import launch_local  # noqa: E402

BACKEND = keras.backend.backend()

# A tiny ViT learning dark (0) against bright (1) 16 px images, 4 epochs of
# 4 steps of global batches of 8. The process writes its final weights (and
# in process 1 with KILL_AT=e, kills itself in epoch e, after one step).
TASK = """
import json, os, signal, sys
import numpy as np, keras, keras_vit
from keras_vit import training
from keras_vit.saving import gathered_variables

rng = np.random.default_rng(0)
y = np.tile([0, 1], 16).astype("int32")
x = (rng.normal(0, 0.3, (32, 16, 16, 3)) + np.where(y, 0.5, -0.5)[:, None, None, None]).astype("float32")
EPOCHS, BATCH = 4, 8
# Keras clips each tf.distribute replica's gradients before summing them, so
# with clipping a tensorflow multi-worker run differs from one process.
CLIP = None if keras.backend.backend() == "tensorflow" else 1.0


class KillAt(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.kill_epoch, self.epoch = epoch, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == self.kill_epoch and batch == 1:
            print("KILLED", self.epoch, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


def build(lora=False):
    # Called inside a distribution's scope.
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=16, num_layers=1,
                          num_heads=2, mlp_dim=32, classes=2, classifier_activation=None)
    if lora:
        model.enable_lora(2, verbose=False)
    training.compile_for_pretraining(model, total_steps=16, base_lr=3e-3, warmup_steps=0,
                                     weight_decay=0.0, global_batch_size=BATCH, global_clipnorm=CLIP)
    return model


def run(distribution, run_dir, kill_at=None, process_id=0, lora=False):
    # FSDP splits every weight here (the tiny model's are all under 1 MiB).
    options = dict(min_shard_bytes=0) if distribution == "fsdp" else {}
    dist = training.get_distribution(distribution, model_parallel=2, num_heads=2, mlp_dim=32, **options)
    xs, ys, batch = training.multiprocess.shard_arrays(x, y, batch_size=BATCH, distribution=dist.distribution)
    with dist.scope():
        model = build(lora)
        callbacks = training.run_callbacks(run_dir, monitor="loss", mode="min", csv=False,
                                           tensorboard=False)
        if kill_at is not None and process_id == 1:
            callbacks.append(KillAt(kill_at))
        history = model.fit(xs, ys, batch_size=batch, epochs=EPOCHS, shuffle=False, verbose=0,
                            callbacks=callbacks)
        sharded = sum(hasattr(w.value, "sharding") and not w.value.sharding.is_fully_replicated
                      for w in model.weights)
        info = dict(losses=[float(v) for v in history.history["loss"]], sharded=int(sharded))
        with gathered_variables(model.weights):
            return [keras.ops.convert_to_numpy(w) for w in model.weights], batch, info
"""

WORKER = TASK + """
cluster = training.multiprocess.initialize(timeout=60, heartbeat_timeout=10)
kill_at = int(os.environ["KILL_AT"]) if os.environ.get("KILL_AT") else None
weights, batch, _ = run(sys.argv[1], sys.argv[2], kill_at, cluster.process_id)
np.savez(os.path.join(sys.argv[3], f"weights_{cluster.process_id}.npz"), *weights)
print("DONE", json.dumps({"process": cluster.process_id, "processes": cluster.num_processes,
                          "batch": batch}), flush=True)
"""


def _only_under(backend):
    return runs_once(backend, f"training over processes with the {backend} backend's own distribution")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The task trained in this one process: its final weights and losses."""
    namespace = {}
    exec(TASK, namespace)
    weights, _, info = namespace["run"]("none", str(tmp_path_factory.mktemp("reference")))
    return weights, info["losses"]


def _launch(tmp_path, command, devices=1, timeout=240, env=None):
    """Runs `command` in two processes; returns their prefixed output."""
    out = io.StringIO()
    old = dict(os.environ)
    os.environ.update(env or {}, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    try:
        start = time.time()
        failure, codes = launch_local.launch(command, 2, timeout=timeout, devices_per_process=devices,
                                             grace=5, out=out)
    finally:
        os.environ.clear()
        os.environ.update(old)
    noise = ("I0000", "WARNING: All log messages", "    @ ", "oneDNN", "cuda drivers")
    text = "\n".join(line for line in out.getvalue().splitlines() if not any(n in line for n in noise))
    print(f"{time.time() - start:.1f}s, exit codes {codes}\n{text[-6000:]}")
    return failure, codes, text


def _final_weights(folder):
    return [[f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]
            for f in (np.load(folder / f"weights_{i}.npz") for i in range(2))]


def _check_equal(folder, reference):
    first, second = _final_weights(folder)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)  # both processes hold one model
    gap = max(float(np.max(np.abs(a - r))) for a, r in zip(first, reference))
    assert gap <= 1e-5, gap
    moved = max(float(np.max(np.abs(a - r))) for a, r in zip(first, _initial_weights()))
    assert moved > 1e-2, moved  # it trained


def _initial_weights():
    keras.utils.set_random_seed(0)
    import keras_vit

    model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=16, num_layers=1,
                          num_heads=2, mlp_dim=32, classes=2, classifier_activation=None)
    return [keras.ops.convert_to_numpy(w) for w in model.weights]


# Model parallel: one device per process, a (1, 2) mesh whose model axis
# spans the processes, so every sharded weight is split between them and
# each process feeds the whole batch. Data parallel over processes (the
# batch split between them) is held by the example's run below.
LAYOUTS = {"model_parallel": 8}  # per-process batch


@_only_under("jax")
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_jax_two_processes_equal_one_after_a_lost_process(layout, reference, tmp_path):
    """Process 1 dies in epoch 2 (of 0-3); both restart from the end of epoch 1,
    and the final weights equal the one-process run's: epochs 0-1 as first
    launched, 2-3 as resumed."""
    command = [sys.executable, "-c", WORKER, layout, str(tmp_path / "run"), str(tmp_path)]
    failure, _, text = _launch(tmp_path, command, env={"KILL_AT": "2"})
    assert "[1] KILLED 2" in text and failure != 0, text[-6000:]
    assert not list(tmp_path.glob("weights_*.npz"))
    for i in range(2):
        with open(tmp_path / "run" / "backup" / f"process_{i}" / "training_metadata.json") as f:
            assert json.load(f)["epoch"] == 2
    _, _, text = _launch(tmp_path, command)
    done = [json.loads(line.split("DONE ", 1)[1]) for line in text.splitlines() if "DONE " in line]
    assert sorted(d["process"] for d in done) == [0, 1], text[-6000:]
    assert {d["batch"] for d in done} == {LAYOUTS[layout]} and done[0]["processes"] == 2
    _check_equal(tmp_path, reference[0])
    assert os.path.exists(tmp_path / "run" / "final.weights.h5")


FSDP_WORKER = TASK + """
cluster = training.multiprocess.initialize(timeout=60, heartbeat_timeout=10)
for lora in (False, True):
    run_dir = os.path.join(sys.argv[1], "lora" if lora else "full")
    weights, batch, info = run("fsdp", run_dir, process_id=cluster.process_id, lora=lora)
    np.savez(os.path.join(sys.argv[2], f"{'lora' if lora else 'full'}_{cluster.process_id}.npz"), *weights)
    print("DONE", json.dumps(dict(info, process=cluster.process_id, lora=lora, batch=batch)), flush=True)

# Orbax: 6 steps on one global batch uninterrupted, then 3 of them again,
# checkpointed by both processes into one folder for ORBAX_RESUME to go on.
def orbax_fit(epochs, callbacks=()):
    dist = training.get_distribution("fsdp", min_shard_bytes=0)
    xs, ys, batch = training.multiprocess.shard_arrays(x[:BATCH], y[:BATCH], batch_size=BATCH,
                                                       distribution=dist.distribution)
    with dist.scope():
        return build().fit(xs, ys, batch_size=batch, epochs=epochs, shuffle=False, verbose=0,
                           callbacks=list(callbacks)).history["loss"]

whole = orbax_fit(6)
first = orbax_fit(3, [keras.callbacks.OrbaxCheckpoint(os.path.join(sys.argv[1], "orbax"), save_freq="epoch",
                                                      save_on_background=False)])
print("ORBAX", json.dumps(dict(process=cluster.process_id, whole=whole, first=first)), flush=True)
"""

# One process of 4 devices resumes the two processes' Orbax checkpoint.
ORBAX_RESUME = """
import os
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
""" + TASK + """
dist = training.get_distribution("fsdp", min_shard_bytes=0)
with dist.scope():
    model = build()
    model.optimizer.build(model.trainable_variables)
    model.load_weights(sys.argv[1])
    iterations = int(model.optimizer.iterations.numpy())
    rest = model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, epochs=6, initial_epoch=3, shuffle=False,
                     verbose=0).history["loss"]
print("RESUMED", json.dumps(dict(iterations=iterations, rest=rest,
                                 devices=len(model.weights[0].value.sharding.device_set))), flush=True)
"""


@pytest.fixture(scope="module")
def lora_reference(tmp_path_factory):
    """The task with LoRA (rank 2) trained in this one process: weights and losses."""
    namespace = {}
    exec(TASK, namespace)
    weights, _, info = namespace["run"]("none", str(tmp_path_factory.mktemp("lora")), lora=True)
    return weights, info["losses"]


@_only_under("jax")
def test_jax_fsdp_over_two_processes_equals_one_device(reference, lora_reference, tmp_path):
    """FSDP with tensor parallelism, a (4, 2) mesh over 2 processes of 4
    devices each, every weight split: full fine-tuning and then LoRA, each
    the one-device run's losses (1e-5 relative) and final weights (1e-5).
    Then FSDP alone over the 8 devices with `keras.callbacks.OrbaxCheckpoint`,
    stopped after step 3 and resumed by one process of 4 devices: steps 4-6
    those of the uninterrupted run."""
    command = [sys.executable, "-c", FSDP_WORKER, str(tmp_path / "run"), str(tmp_path)]
    _, _, text = _launch(tmp_path, command, devices=4)
    done = [json.loads(line.split("DONE ", 1)[1]) for line in text.splitlines() if "DONE " in line]
    assert sorted((d["lora"], d["process"]) for d in done) == [(False, 0), (False, 1), (True, 0), (True, 1)], \
        text[-6000:]
    for name, (expected, losses) in (("full", reference), ("lora", lora_reference)):
        runs = [d for d in done if d["lora"] == (name == "lora")]
        # Each process feeds the rows of its 2 of the batch axis's 4 devices: 4 of the global 8.
        assert all(d["batch"] == 4 and d["sharded"] > 0 for d in runs), runs
        assert runs[0]["losses"] == runs[1]["losses"]
        np.testing.assert_allclose(runs[0]["losses"], losses, rtol=1e-5)
        first, second = ([f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]
                         for f in (np.load(tmp_path / f"{name}_{i}.npz") for i in range(2)))
        assert len(first) == len(expected)
        for a, b, r in zip(first, second, expected):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, r, rtol=0, atol=1e-5)
    # Orbax: stopped after step 3 on 8 devices in 2 processes, resumed in 1 process of 4.
    orbax = [json.loads(line.split("ORBAX ", 1)[1]) for line in text.splitlines() if "ORBAX " in line]
    assert len(orbax) == 2 and orbax[0]["whole"] == orbax[1]["whole"], text[-6000:]
    whole = orbax[0]["whole"]
    np.testing.assert_allclose(orbax[0]["first"], whole[:3], rtol=1e-6)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", ORBAX_RESUME, str(tmp_path / "run" / "orbax")], env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = json.loads(proc.stdout.split("RESUMED ", 1)[1])
    assert resumed["iterations"] == 3 and resumed["devices"] == 4, resumed
    np.testing.assert_allclose(resumed["rest"], whole[3:], rtol=1e-6)


@_only_under("jax")
def test_jax_coordinator_port_in_use_is_a_clear_error(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"{port}.*already in use|holds the port"):
            multiprocess.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=0, timeout=5)


TF_WORKER = TASK.replace("training.run_callbacks(run_dir", "training.run_callbacks(run_dir, save_best=False") + """
import tensorflow as tf
cluster = training.multiprocess.initialize()
if os.environ.get("UNPATCHED"):
    from keras_vit.training import tf_multi_worker
    tf_multi_worker.install = lambda: None
try:
    weights, _, _ = run("multi_worker", sys.argv[2])
except Exception as error:
    print("FAILED", type(error).__name__, str(error)[:200].replace("\\n", " "), flush=True)
    raise
np.savez(os.path.join(sys.argv[3], f"weights_{cluster.process_id}.npz"), *weights)
print("DONE", cluster.process_id, flush=True)
"""


@_only_under("tensorflow")
def test_tensorflow_multi_worker_equals_one_process(reference, tmp_path):
    command = [sys.executable, "-c", TF_WORKER, "multi_worker", str(tmp_path / "run"), str(tmp_path)]
    _, _, text = _launch(tmp_path, command)
    assert text.count("DONE ") == 2, text[-6000:]
    _check_equal(tmp_path, reference[0])


@_only_under("tensorflow")
def test_tensorflow_multi_worker_fails_without_the_workaround(tmp_path):
    """The fault the workaround removes is still there in the installed Keras."""
    command = [sys.executable, "-c", TF_WORKER, "multi_worker", str(tmp_path / "run"), str(tmp_path)]
    failure, _, text = _launch(tmp_path, command, env={"UNPATCHED": "1"})
    assert failure != 0 and "DONE " not in text
    assert "PerReplica" in text or "reduction dimension" in text, text[-6000:]


TORCH_WORKER = """
import os, sys
import numpy as np, torch.distributed as dist, keras, keras_vit
host, port = os.environ["KERAS_VIT_COORDINATOR"].split(":")
dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}",
                        world_size=int(os.environ["KERAS_VIT_NUM_PROCESSES"]),
                        rank=int(os.environ["KERAS_VIT_PROCESS_ID"]))
model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
                      mlp_dim=32, classes=2)
model.compile("sgd", "sparse_categorical_crossentropy")
try:
    model.fit(np.zeros((4, 16, 16, 3), "float32"), np.zeros(4, "int32"), verbose=0)
    print("TRAINED", flush=True)
except RuntimeError as error:
    print("REFUSED", str(error).replace(chr(10), " "), flush=True)
dist.destroy_process_group()
"""


@_only_under("torch")
def test_torch_fit_under_a_process_group_is_refused(tmp_path):
    _, _, text = _launch(tmp_path, [sys.executable, "-c", TORCH_WORKER])
    refused = [line for line in text.splitlines() if line[4:].startswith("REFUSED")]
    assert len(refused) == 2 and "TRAINED" not in text, text[-6000:]
    assert "process group of 2" in refused[0] and "KERAS_BACKEND=jax" in refused[0]


@_only_under("torch")
def test_torch_refuses_several_processes(monkeypatch):
    with pytest.raises(RuntimeError, match="torch backend"):
        multiprocess.initialize("127.0.0.1:1234", num_processes=2, process_id=0)
    assert multiprocess.initialize(num_processes=1, process_id=0).num_processes == 1
    assert torch_process_group_size() == 1


@runs_once("jax", "the sharding of NumPy arrays is the same under every backend")
def test_shard_arrays_in_one_process():
    x, y = np.arange(20).reshape(10, 2), np.arange(10)
    xs, ys, batch = multiprocess.shard_arrays(x, y, batch_size=4)
    assert batch == 4 and ys.tolist() == list(range(8)) and xs.shape == (8, 2)
    with pytest.raises(ValueError, match="batch_size"):
        multiprocess.shard_arrays(x, batch_size=11)
    with pytest.raises(ValueError, match="lengths"):
        multiprocess.shard_arrays(x, y[:5], batch_size=2)


@runs_once("jax", "the places are checked before any backend's initialisation (torch refuses before, above)")
def test_bad_places_are_named(monkeypatch):
    for name in ("KERAS_VIT_COORDINATOR", "JAX_COORDINATOR_ADDRESS", "TF_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="process_id"):
        multiprocess.initialize("127.0.0.1:1234", num_processes=2, process_id=2)
    with pytest.raises(ValueError, match="coordinator"):
        multiprocess.initialize("nohost", num_processes=2, process_id=0)
    assert multiprocess.tf_config("127.0.0.1:1000", 2, 1) == {
        "cluster": {"worker": ["127.0.0.1:1000", "127.0.0.1:1001"]},
        "task": {"type": "worker", "index": 1},
    }


@runs_once("tensorflow", "the environment is read with os.environ alone")
def test_environment_gives_the_place(monkeypatch):
    for names in multiprocess.ENVIRONMENT:
        for name in names:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "4")
    monkeypatch.setenv("JAX_PROCESS_ID", "3")
    assert multiprocess._from_environment(None, None, None) == ("10.0.0.1:1234", 4, 3)
    monkeypatch.setenv("KERAS_VIT_COORDINATOR", "127.0.0.1:99")
    monkeypatch.setenv("KERAS_VIT_NUM_PROCESSES", "2")
    monkeypatch.setenv("KERAS_VIT_PROCESS_ID", "1")
    assert multiprocess._from_environment(None, None, 0) == ("127.0.0.1:99", 2, 0)


@runs_once("tensorflow", "the launcher starts plain Python processes, no Keras backend")
def test_launcher_stops_the_others_when_one_fails(tmp_path):
    """Process 1 fails at once; process 0 (sleeping 60 s) is stopped, by its id."""
    script = (
        "import os, sys, time\n"
        "print(os.environ['KERAS_VIT_PROCESS_ID'], os.environ['KERAS_VIT_COORDINATOR'], os.getpid(), flush=True)\n"
        "if os.environ['KERAS_VIT_PROCESS_ID'] == '1': sys.exit(3)\n"
        "time.sleep(60)\n"
    )
    start = time.time()
    failure, codes, text = _launch(tmp_path, [sys.executable, "-c", script, "{process_id}"], timeout=30)
    assert failure == 3 and codes[1] == 3 and codes[0] in (None, -signal.SIGTERM), (codes, text)
    assert time.time() - start < 25
    lines = sorted(line for line in text.splitlines() if line.startswith(("[0] 0 ", "[1] 1 ")))
    assert len(lines) == 2 and lines[0].split()[2] == lines[1].split()[2]  # one coordinator
    failure, codes, _ = _launch(tmp_path, [sys.executable, "-c", "import time; time.sleep(60)"], timeout=2)
    assert failure == 124


@runs_once("jax", "the example's flags and files; tensorflow's multi-worker training is held by "
                  "test_tensorflow_multi_worker_equals_one_process")
def test_example_over_two_processes(tmp_path):
    """examples/finetune.py under the launcher: its tf.data input sharded by
    Keras over two processes (jax's data parallelism; under tensorflow "data"
    means multi_worker)."""
    command = [sys.executable, str(ROOT / "examples" / "finetune.py"), "--smoke", "--distribution", "data",
               "--run-dir", str(tmp_path / "run"), "--verbose", "0", "--init-timeout", "60",
               "--heartbeat-timeout", "10"]
    _, _, text = _launch(tmp_path, command)
    finished = sorted(line for line in text.splitlines() if "held-out accuracy" in line)
    assert len(finished) == 2, text[-6000:]
    assert finished[0].split()[3] == finished[1].split()[3]  # one model, one accuracy
    name = "multi_worker" if BACKEND == "tensorflow" else "data_parallel"
    assert text.count(f"distribution={name} replicas=2") == 2
    # Process 0 writes the run's presets; both took part in saving them.
    assert os.path.exists(tmp_path / "run" / "preset" / "model.weights.h5")
    assert os.path.exists(tmp_path / "run" / "best" / "model.weights.h5")


@_only_under("jax")
def test_jax_lone_process_fails_within_its_timeout():
    """Process 1 of 2 with no process 0: a failure after `timeout`, not jax's 5 minutes."""
    script = (
        "from keras_vit.training import multiprocess\n"
        f"multiprocess.initialize('127.0.0.1:{multiprocess.free_port()}', 2, 1, timeout=2)\n"
        "print('JOINED', flush=True)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    start = time.time()
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode != 0 and "JOINED" not in proc.stdout
    assert "DEADLINE_EXCEEDED" in proc.stderr, proc.stderr[-2000:]
    assert time.time() - start < 60, time.time() - start
