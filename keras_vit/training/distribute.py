"""One-argument choice of how `model.fit` spreads over devices.

`get_distribution(name)` returns a `TrainingDistribution` whose `scope()`
must enclose building, compiling and fitting the model:

    dist = get_distribution("data_parallel")
    with dist.scope():
        model = keras_vit.ViTB16(weights=..., classes=10)
        compile_for_finetuning(model, total_steps=500)
        model.fit(train_ds, ...)

| name | tensorflow | jax | torch |
| --- | --- | --- | --- |
| "none" | default strategy | one device | one device |
| "auto" | "mirrored" on 2+ GPUs, else "none" | "data_parallel" on 2+ devices, else "none" | "none" |
| "data_parallel" / "mirrored" / "data" | `MirroredStrategy` | `keras.distribution.DataParallel` | error |
| "multi_worker" | `MultiWorkerMirroredStrategy` (`TF_CONFIG`) | `multiprocess.initialize()` + `DataParallel` | error |
| "model_parallel" / "model" | error | `ModelParallel` with `ViT.get_layout_map` | error |
| "fsdp" | error | `fsdp.FSDP`: large weights split over the batch axis (with `model_parallel > 1`, a (batch, model) mesh with tensor parallelism too) | error |
| "tpu" | `TPUStrategy` (`TPUClusterResolver`) | `DataParallel` over the TPU cores | error |

Batches are global: each step's batch is split evenly over the replicas, so
the batch size must be a multiple of `num_replicas`. The paper's learning
rates belong to its global batch (512 for fine-tuning); keep the global batch
(use gradient accumulation when memory is short) or scale the learning rate
linearly with it (`keras_vit.training.scaled_learning_rate`).

Over several processes (one per host): call
`keras_vit.training.multiprocess.initialize` first; "data_parallel" and
"model_parallel" then span every process's devices on jax, and
"multi_worker" is tensorflow's way (with a workaround for Keras 3,
`keras_vit.training.tf_multi_worker`).

Strategies that cannot be created fail at once with a `RuntimeError` that
says why (no TPU, fewer than two devices, an unreachable TPU address), rather
than waiting on a resolver that never answers.
"""

import contextlib
import glob
import os
import socket
import threading

import keras

from keras_vit.execution import sharded_load
from keras_vit.validation import check_choice

NAMES = ("none", "auto", "data_parallel", "mirrored", "multi_worker", "model_parallel", "fsdp", "tpu", "data",
         "model")
# Short names, as in `examples/finetune.py --distribution data|model`.
ALIASES = {"data": "data_parallel", "model": "model_parallel"}


class TrainingDistribution:
    """A created distribution: `name`, `backend`, `num_replicas`, `scope()`.

    Attributes:
        name: the resolved name ("none", "data_parallel", ...).
        backend: the Keras backend.
        num_replicas: replicas each global batch is split over.
        strategy: the `tf.distribute.Strategy` (tensorflow) or None.
        distribution: the `keras.distribution.Distribution` (jax) or None.
    """

    def __init__(self, name, num_replicas=1, strategy=None, distribution=None):
        self.name = name
        self.backend = keras.backend.backend()
        self.num_replicas = num_replicas
        self.strategy = strategy
        self.distribution = distribution

    def scope(self):
        """The context in which to build, compile and fit the model."""
        if self.strategy is not None:
            return self.strategy.scope()
        if self.distribution is not None:
            return self.distribution.scope()
        return contextlib.nullcontext()

    def __repr__(self):
        return (
            f"TrainingDistribution(name={self.name!r}, backend={self.backend!r}, "
            f"num_replicas={self.num_replicas})"
        )


def _fail(message):
    raise RuntimeError(message)


def local_tpu_present():
    """Whether this machine is a Cloud TPU VM (TPU device files exist)."""
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def _resolve_tpu_name(tpu):
    if tpu in (None, "", "auto"):
        if os.environ.get("COLAB_TPU_ADDR"):
            return "grpc://" + os.environ["COLAB_TPU_ADDR"]
        if local_tpu_present():
            return "local"
        if os.environ.get("TPU_NAME"):
            return os.environ["TPU_NAME"]
        _fail(
            "No TPU found: this is not a Cloud TPU VM (no /dev/accel* or "
            "/dev/vfio devices), and neither COLAB_TPU_ADDR nor TPU_NAME is "
            "set. Pass the TPU name or address (tpu='grpc://10.0.0.2:8470'), "
            "or choose another distribution."
        )
    if tpu == "local" and not local_tpu_present():
        _fail("tpu='local' needs a Cloud TPU VM, but no /dev/accel* or /dev/vfio TPU devices exist.")
    return tpu


def _check_address(tpu, timeout):
    address = tpu[len("grpc://"):] if tpu.startswith("grpc://") else tpu
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as error:
        _fail(f"The TPU at {tpu!r} is unreachable within {timeout}s: {error}")


def _run_with_timeout(function, timeout, what):
    result = {}

    def target():
        try:
            result["value"] = function()
        except BaseException as error:  # re-raised in the caller's thread
            result["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        _fail(f"{what} did not finish within {timeout}s.")
    if "error" in result:
        raise RuntimeError(f"{what} failed: {result['error']}") from result["error"]
    return result["value"]


def connect_tpu(tpu=None, timeout=120):
    """Connects to a TPU and returns a `tf.distribute.TPUStrategy`.

    Args:
        tpu: None/"auto" (Colab's COLAB_TPU_ADDR, else a Cloud TPU VM's
            local TPU, else the TPU_NAME environment variable), "local", a
            Cloud TPU name or a "grpc://host:port" address.
        timeout: seconds allowed for resolving and initialising the TPU,
            default 120.

    Returns:
        A `tf.distribute.TPUStrategy`.

    Raises:
        RuntimeError: at once when no TPU can be found or reached.
    """
    tpu = _resolve_tpu_name(tpu)
    if tpu != "local" and ":" in tpu:
        _check_address(tpu, timeout=min(timeout, 10))
    import tensorflow as tf

    def connect():
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        if tpu != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)

    return _run_with_timeout(connect, timeout, f"Connecting to the TPU {tpu!r}")


def _tf_distribution(name, tpu, devices, timeout):
    import tensorflow as tf

    if name == "auto":
        name = "mirrored" if len(tf.config.list_logical_devices("GPU")) > 1 else "none"
    if name == "none":
        return TrainingDistribution("none", 1, strategy=tf.distribute.get_strategy())
    if name in ("mirrored", "data_parallel"):
        if devices is None:
            devices = [d.name for d in tf.config.list_logical_devices("GPU")]
            if len(devices) < 2:
                devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        if len(devices) < 2:
            _fail(
                f"distribution={name!r} needs at least 2 devices; TensorFlow "
                f"sees {len(devices)}. Use distribution='none' for one device."
            )
        strategy = tf.distribute.MirroredStrategy(devices=devices)
        return TrainingDistribution("mirrored", strategy.num_replicas_in_sync, strategy=strategy)
    if name == "multi_worker":
        from keras_vit.training import tf_multi_worker

        tf_multi_worker.install()
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        return TrainingDistribution(name, strategy.num_replicas_in_sync, strategy=strategy)
    if name == "tpu":
        strategy = connect_tpu(tpu, timeout=timeout)
        return TrainingDistribution("tpu", strategy.num_replicas_in_sync, strategy=strategy)
    _fail(
        f"distribution={name!r} (sharded weights) is available on the "
        "jax backend; with tensorflow use 'mirrored', 'multi_worker' or 'tpu'."
    )


def _mesh_shape(num_devices, model_parallel, num_heads, mlp_dim, least=2):
    if not isinstance(model_parallel, int) or model_parallel < least or num_devices % model_parallel:
        _fail(
            f"model_parallel={model_parallel!r} must be an integer >= {least} that divides the "
            f"number of devices ({num_devices})."
        )
    for value, what in ((num_heads, "num_heads"), (mlp_dim, "mlp_dim")):
        if value is not None and value % model_parallel:
            _fail(
                f"The model's {what}={value} must be divisible by "
                f"model_parallel={model_parallel} to shard it."
            )
    return (num_devices // model_parallel, model_parallel)


def _jax_distribution(name, tpu, devices, model_parallel, num_heads, mlp_dim, min_shard_bytes=None):
    from keras import distribution as kd

    if name == "multi_worker":
        from keras_vit.training import multiprocess

        multiprocess.initialize()
        name = "data_parallel"
    if name == "tpu":
        import jax

        try:
            devices = jax.devices("tpu")
        except RuntimeError:
            devices = []
        if not devices:
            _fail("No TPU found: jax sees no TPU devices (jax.devices('tpu') is empty).")
        name = "data_parallel"
    devices = devices or kd.list_devices()
    if name == "auto":
        name = "data_parallel" if len(devices) > 1 else "none"
    if name == "none":
        return TrainingDistribution("none", 1)
    if len(devices) < 2:
        _fail(
            f"distribution={name!r} needs at least 2 devices; jax sees "
            f"{len(devices)}. Use distribution='none' for one device (on CPU, "
            "XLA_FLAGS=--xla_force_host_platform_device_count=N creates N)."
        )
    if name in ("data_parallel", "mirrored"):
        dist = kd.DataParallel(devices=devices)
        sharded_load.check_mesh(dist)
        return TrainingDistribution("data_parallel", len(devices), distribution=dist)
    from keras_vit.models.vit import ViT

    if name == "fsdp":
        from keras_vit.execution import fsdp

        shape = _mesh_shape(len(devices), 1 if model_parallel is None else model_parallel, num_heads, mlp_dim,
                            least=1)
        if shape[1] == 1:
            mesh = kd.DeviceMesh((shape[0],), axis_names=("batch",), devices=devices)
        else:
            mesh = kd.DeviceMesh(shape, axis_names=("batch", "model"), devices=devices)
        dist = fsdp.FSDP(ViT.get_layout_map(mesh, fsdp_axis="batch", min_shard_bytes=min_shard_bytes))
        sharded_load.check_mesh(dist)
        return TrainingDistribution("fsdp", shape[0], distribution=dist)
    shape = _mesh_shape(len(devices), 2 if model_parallel is None else model_parallel, num_heads, mlp_dim)
    mesh = kd.DeviceMesh(shape, axis_names=("batch", "model"), devices=devices)
    dist = kd.ModelParallel(layout_map=ViT.get_layout_map(mesh), batch_dim_name="batch")
    sharded_load.check_mesh(dist)
    return TrainingDistribution("model_parallel", shape[0], distribution=dist)


def get_distribution(
    name="auto",
    tpu=None,
    devices=None,
    model_parallel=None,
    num_heads=None,
    mlp_dim=None,
    timeout=120,
    min_shard_bytes=None,
):
    """Creates the distribution called `name` for the current backend.

    Args:
        name: one of "none", "auto" (default), "data_parallel" (alias
            "mirrored", "data"), "multi_worker", "model_parallel" (alias
            "model"), "tpu"; see the
            module table.
        tpu: for "tpu" on tensorflow: None (auto-detect), "local", a Cloud
            TPU name or "grpc://host:port".
        devices: optional device list (tensorflow names or jax devices).
        model_parallel: int, devices per model replica (the "model" axis
            of a (batch, model) mesh): default 2 for "model_parallel", 1 for
            "fsdp" (a mesh of one "batch" axis).
        num_heads, mlp_dim: optional model sizes, checked to be divisible
            by `model_parallel` before any weight is created.
        timeout: seconds allowed to connect to a TPU, default 120.
        min_shard_bytes: for "fsdp", the size below which a weight is
            replicated; default 1 MiB (`keras_vit.execution.fsdp`).

    Returns:
        A `TrainingDistribution`.

    Raises:
        RuntimeError: when the distribution cannot be created here.
        ValueError: for an unknown `name`.

    Example:

    >>> get_distribution("none").num_replicas
    1
    """
    check_choice(name, NAMES, "name")
    name = ALIASES.get(name, name)
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return _tf_distribution(name, tpu, devices, timeout)
    if backend == "jax":
        return _jax_distribution(name, tpu, devices, model_parallel, num_heads, mlp_dim, min_shard_bytes)
    if name in ("none", "auto"):
        return TrainingDistribution("none", 1)
    if name == "fsdp":
        _fail(
            "distribution='fsdp' (weights sharded over the devices) is available on the jax backend "
            "(keras.distribution); Keras offers no distribution on the torch backend. Use KERAS_BACKEND=jax."
        )
    _fail(
        f"distribution={name!r} is not available on the {backend} backend: "
        "keras_vit trains with torch on a single device. Use the jax or "
        "tensorflow backend (KERAS_BACKEND) for multi-device training."
    )
