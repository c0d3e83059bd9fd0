"""`model.fit` over several processes: one per host on a TPU pod slice or GPU cluster.

Every process runs the same program. `initialize` joins them before any
model is built; `get_distribution("data_parallel")` or `"model_parallel"`
then spans the devices of all processes, and `model.fit` trains one model:

    from keras_vit import training
    from keras_vit.training import multiprocess

    cluster = multiprocess.initialize()        # arguments, or the environment
    dist = training.get_distribution("data_parallel")
    x, y, batch = multiprocess.shard_arrays(x, y, batch_size=64)
    with dist.scope():
        model = ...
        model.fit(x, y, batch_size=batch, callbacks=training.run_callbacks(run_dir))

| | jax | tensorflow | torch |
| --- | --- | --- | --- |
| join | `jax.distributed.initialize` | `TF_CONFIG` + `MultiWorkerMirroredStrategy` | error |
| layouts | "data_parallel", "model_parallel" | "multi_worker" (data parallel) | none |
| tf.data input | sharded by Keras (global batches) | sharded by tf.distribute | |
| NumPy input | `shard_arrays` (each process its rows) | global arrays | |

The process's place comes from the arguments or, where one is None, from
the environment: `KERAS_VIT_COORDINATOR` / `KERAS_VIT_NUM_PROCESSES` /
`KERAS_VIT_PROCESS_ID` (set by `tools/launch_local.py`), else jax's
`JAX_COORDINATOR_ADDRESS` / `JAX_NUM_PROCESSES` / `JAX_PROCESS_ID` or Keras's
`KERAS_DISTRIBUTION_JOB_ADDRESSES` / `..._NUM_PROCESSES` / `..._PROCESS_ID`.
With none of them, jax detects a TPU pod slice or a SLURM/MPI job itself,
and tensorflow reads `TF_CONFIG`.

Checkpoints: keras_vit models gather weights split over processes when
saved (`keras_vit.saving.gathered_variables`), so `save_weights` and the
callbacks of `run_callbacks` (`BackupAndRestore` included) work under
model parallelism; every process writes the same complete file, atomically.
"""

import dataclasses
import json
import os
import socket

import keras
import numpy as np

from keras_vit.execution.processes import refuse_torch_processes

ENVIRONMENT = (
    ("KERAS_VIT_COORDINATOR", "KERAS_VIT_NUM_PROCESSES", "KERAS_VIT_PROCESS_ID"),
    ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"),
    (
        "KERAS_DISTRIBUTION_JOB_ADDRESSES",
        "KERAS_DISTRIBUTION_NUM_PROCESSES",
        "KERAS_DISTRIBUTION_PROCESS_ID",
    ),
)


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The processes that train together and this one's place among them.

    Attributes:
        coordinator: "host:port" of process 0's coordination service, or
            None where the platform found it (TPU pod, SLURM, `TF_CONFIG`).
        num_processes: int, processes in the job.
        process_id: int, this process's index, 0 to `num_processes - 1`.
        backend: the Keras backend.
    """

    coordinator: object
    num_processes: int
    process_id: int
    backend: str


def _from_environment(coordinator, num_processes, process_id):
    for names in ENVIRONMENT:
        values = [os.environ.get(name) for name in names]
        if any(values):
            address = values[0].split(",")[0] if values[0] else None
            coordinator = coordinator or address
            if num_processes is None and values[1]:
                num_processes = int(values[1])
            if process_id is None and values[2]:
                process_id = int(values[2])
            break
    return coordinator, num_processes, process_id


def _split_address(coordinator):
    host, _, port = str(coordinator).rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(
            "`coordinator` must be 'host:port' (process 0's address). "
            f"Received: coordinator={coordinator!r}"
        )
    return host.strip("[]"), int(port)


def check_port_free(address):
    """Raises a clear error when process 0 cannot listen on `address`.

    jax's coordination service aborts the whole process when its port is
    taken; binding it first turns that into a `RuntimeError`.

    Args:
        address: "host:port" ("[::]:port" or "0.0.0.0:port": all interfaces).
    """
    host, port = _split_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            raise RuntimeError(
                f"Process 0 cannot start the coordinator on {address!r}: {error}. "
                "Another program (or an earlier run still shutting down) holds "
                "the port; choose another port for --coordinator."
            ) from error


def free_port(host="127.0.0.1"):
    """A TCP port on `host` that nothing listens on now (for local runs)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _check_place(num_processes, process_id):
    if num_processes is None or num_processes < 1:
        raise ValueError(f"`num_processes` must be >= 1. Received: num_processes={num_processes!r}")
    if process_id is None or not 0 <= process_id < num_processes:
        raise ValueError(
            f"`process_id` must be in [0, {num_processes - 1}]. Received: process_id={process_id!r}"
        )


def _jax_cluster_detected():
    """Whether jax would find a TPU pod slice, SLURM or Open MPI job by itself."""
    import jax

    if jax.distributed.is_initialized():
        return True
    try:  # jax's detectors, private: checks of local files and variables
        from jax._src.clusters import ClusterEnv
    except ImportError:
        return False
    return any(not env.opt_in_only_method and env.is_env_present() for env in ClusterEnv._cluster_types)


def _initialize_jax(coordinator, num_processes, process_id, bind_address, timeout, heartbeat_timeout):
    import jax

    if jax.distributed.is_initialized():
        return Cluster(coordinator, jax.process_count(), jax.process_index(), "jax")
    kwargs = dict(
        initialization_timeout=int(timeout),
        heartbeat_timeout_seconds=int(heartbeat_timeout),
        shutdown_timeout_seconds=int(timeout),
    )
    if coordinator is not None:
        _check_place(num_processes, process_id)
        if process_id == 0:
            check_port_free(bind_address or f"[::]:{_split_address(coordinator)[1]}")
        kwargs.update(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)
        if bind_address:
            kwargs["coordinator_bind_address"] = bind_address
    # Without a coordinator, jax detects TPU pod slices, SLURM and Open MPI.
    jax.distributed.initialize(**kwargs)
    from keras.src.backend.jax import distribution_lib

    # One seed for all processes, as keras.distribution.initialize does.
    distribution_lib.initialize_rng()
    return Cluster(coordinator, jax.process_count(), jax.process_index(), "jax")


def tf_config(coordinator, num_processes, process_id):
    """`TF_CONFIG` for one host: worker i listens on the coordinator's port + i."""
    host, port = _split_address(coordinator)
    workers = [f"{host}:{port + i}" for i in range(num_processes)]
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": process_id}}


def _initialize_tensorflow(coordinator, num_processes, process_id):
    if coordinator is not None:
        _check_place(num_processes, process_id)
        if "TF_CONFIG" not in os.environ:
            os.environ["TF_CONFIG"] = json.dumps(tf_config(coordinator, num_processes, process_id))
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    workers = config.get("cluster", {}).get("worker", [])
    index = config.get("task", {}).get("index", 0)
    return Cluster(coordinator, max(len(workers), 1), int(index), "tensorflow")


def initialize(
    coordinator=None,
    num_processes=None,
    process_id=None,
    bind_address=None,
    timeout=120,
    heartbeat_timeout=60,
):
    """Joins this process to the others of a multi-process training job.

    Call it first, before creating any model, data or distribution.

    Args:
        coordinator: "host:port" of process 0 (all processes pass the same
            address); None: from the environment (module docstring), or
            detected by jax on TPU pod slices and SLURM/MPI jobs.
        num_processes: int, processes in the job; None: from the environment.
        process_id: int, this process's index; None: from the environment.
        bind_address: jax: where process 0's coordinator listens, default
            "[::]:port" (every interface, the coordinator's port).
        timeout: seconds, default 120, that jax waits for all processes to
            join (and for them all to finish at shutdown); a missing process
            then fails the job instead of letting it wait 5 minutes.
        heartbeat_timeout: seconds, default 60, after which jax declares a
            silent process lost and stops the others.

    Returns:
        A `Cluster`.

    Raises:
        RuntimeError: on torch with several processes, or when process 0's
            coordinator port is taken.
        ValueError: for an invalid address, process count or id.

    Example:

    >>> initialize(num_processes=1, process_id=0).num_processes
    1
    """
    coordinator, num_processes, process_id = _from_environment(coordinator, num_processes, process_id)
    backend = keras.backend.backend()
    if backend == "jax":
        alone = (coordinator, num_processes, process_id) == (None, None, None) and not _jax_cluster_detected()
        if alone or (num_processes == 1 and process_id in (None, 0)):
            return Cluster(coordinator, 1, 0, backend)
        return _initialize_jax(coordinator, num_processes, process_id, bind_address, timeout, heartbeat_timeout)
    if backend == "tensorflow":
        return _initialize_tensorflow(coordinator, num_processes, process_id)
    if (num_processes or 1) > 1 or coordinator is not None:
        refuse_torch_processes(f"{num_processes or 'several'} processes were asked for")
    return Cluster(None, 1, 0, backend)


def process_index():
    """This process's index in a multi-process job (0 when alone)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.process_index()
    if backend == "tensorflow" and os.environ.get("TF_CONFIG"):
        return int(json.loads(os.environ["TF_CONFIG"]).get("task", {}).get("index", 0))
    return 0


def process_count():
    """The number of processes in the job (1 when alone)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.process_count()
    if backend == "tensorflow" and os.environ.get("TF_CONFIG"):
        return max(len(json.loads(os.environ["TF_CONFIG"]).get("cluster", {}).get("worker", [])), 1)
    return 1


def _multi_process(distribution):
    return getattr(distribution, "num_processes", 1) > 1


def process_rows(global_batch_size, distribution=None):
    """The rows of every global batch that this process feeds, as a slice.

    Under a jax `keras.distribution` spanning several processes, each
    process passes only the rows of the batch that its devices hold
    (all of them when the batch is not split across processes, as with a
    model axis spanning the processes).

    Args:
        global_batch_size: int, examples per step over all processes.
        distribution: a `keras.distribution.Distribution`; default: the
            one in scope.

    Returns:
        A `slice` of `range(global_batch_size)`.
    """
    distribution = distribution or keras.distribution.distribution()
    if keras.backend.backend() != "jax" or distribution is None:
        return slice(0, global_batch_size)
    import jax

    if jax.process_count() == 1:
        return slice(0, global_batch_size)
    layout = distribution.get_data_layout((global_batch_size,)).backend_layout
    rows = set()
    for index in layout.addressable_devices_indices_map((global_batch_size,)).values():
        rows.update(range(global_batch_size)[index[0]])
    start, stop = min(rows), max(rows) + 1
    if len(rows) != stop - start:
        raise RuntimeError(f"This process's rows of the batch are not contiguous: {sorted(rows)}.")
    return slice(start, stop)


def shard_arrays(*arrays, batch_size, distribution=None):
    """Each process's part of NumPy inputs, for `fit(..., shuffle=False)`.

    Keras shards `tf.data` input over processes itself, but not arrays.
    Every process passes the same global arrays here; each gets back, for
    every global batch of `batch_size` rows, the rows its devices hold, in
    order, and the per-process batch size to give `fit`. The distribution
    is marked as fed with sharded input (`auto_shard_dataset = False`), so
    a `tf.data` input given to the same distribution must then be sharded
    per process too (`dataset.shard(num_processes, process_id)`). A last partial
    batch is dropped (every process must step the same number of times).
    Shuffle the global arrays the same way in every process beforehand.

    Args:
        *arrays: NumPy arrays with the same first dimension (x, y, ...).
        batch_size: int, the global batch size.
        distribution: default: the `keras.distribution` in scope.

    Returns:
        A tuple: the per-process arrays, then the per-process batch size.

    Example:

    >>> x, y, batch = shard_arrays(np.zeros((10, 2)), np.arange(10), batch_size=4)
    >>> x.shape, y.tolist(), batch
    ((8, 2), [0, 1, 2, 3, 4, 5, 6, 7], 4)
    """
    if not arrays:
        raise ValueError("`shard_arrays` needs at least one array.")
    length = len(arrays[0])
    if any(len(a) != length for a in arrays):
        raise ValueError(f"The arrays' lengths differ: {[len(a) for a in arrays]}.")
    if batch_size < 1 or length < batch_size:
        raise ValueError(
            f"`batch_size` must be in [1, {length}] (the number of examples). "
            f"Received: batch_size={batch_size!r}"
        )
    distribution = distribution or keras.distribution.distribution()
    if distribution is None and keras.backend.backend() == "jax" and process_count() > 1:
        raise ValueError(
            "`shard_arrays` over several processes needs the distribution: pass "
            "`distribution=` or call it inside `dist.scope()` (tensorflow's "
            "strategies shard global arrays themselves)."
        )
    rows = process_rows(batch_size, distribution)
    if rows.stop - rows.start < batch_size or _multi_process(distribution):
        # Keras refuses arrays under auto-sharding; these are sharded now.
        distribution.auto_shard_dataset = False
    steps = length // batch_size
    index = (np.arange(steps)[:, None] * batch_size + np.arange(batch_size)[rows]).reshape(-1)
    return (*[np.asarray(a)[index] for a in arrays], rows.stop - rows.start)
