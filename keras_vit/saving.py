"""Atomic file writes: a checkpoint is either the previous one or the new one.

Keras writes `.weights.h5` and `.keras` files in place, so a process killed
while saving leaves a truncated file where the last good checkpoint was.
`atomic_path` writes to a temporary file in the same folder and renames it
over the target only once the write has finished and reached the disk; the
rename is atomic on POSIX and Windows file systems. keras_vit models save
this way (`save_model` and `save_weights`, which their `save` and
`save_weights` methods call), and so do the callbacks of
`keras_vit.training.run_callbacks`.

`load_weights` restores an Orbax checkpoint (`keras.callbacks.OrbaxCheckpoint`)
onto the current distribution's mesh, however many devices and processes
wrote it.
"""

import contextlib
import os
import uuid

import keras

_DOUBLE_SUFFIXES = (".weights.h5", ".weights.json")


def _suffix(name):
    for suffix in _DOUBLE_SUFFIXES:
        if name.endswith(suffix):
            return suffix
    return os.path.splitext(name)[1]


def _sync(path):
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path to write; moves it to `path` when the block succeeds.

    The temporary file sits beside `path` (so the rename stays on one file
    system), is hidden, and ends with the same suffix (Keras checks it).
    When the block raises, or is interrupted, the temporary file is removed
    and `path` is left as it was.

    Args:
        path: the file to write.

    Yields:
        The temporary path.

    Example:

    >>> import pathlib, tempfile
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "run.weights.h5"
    >>> with atomic_path(target) as temporary:
    ...     _ = pathlib.Path(temporary).write_bytes(b"new")
    >>> target.read_bytes()
    b'new'
    >>> try:
    ...     with atomic_path(target) as temporary:
    ...         _ = pathlib.Path(temporary).write_bytes(b"partial")
    ...         raise KeyboardInterrupt
    ... except KeyboardInterrupt:
    ...     pass
    >>> target.read_bytes(), sorted(p.name for p in target.parent.iterdir())
    (b'new', ['run.weights.h5'])
    """
    path = os.path.abspath(os.fspath(path))
    folder, name = os.path.split(path)
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    temporary = os.path.join(folder, f".{name}.{token}.tmp{_suffix(name)}")
    try:
        yield temporary
        _sync(temporary)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temporary)
        raise


def _split_over_processes(variables):
    if keras.backend.backend() != "jax":
        return []
    import jax

    if jax.process_count() == 1:
        return []
    split = []
    for variable in variables:
        value = variable.value
        if isinstance(value, jax.Array) and not (value.is_fully_addressable or value.is_fully_replicated):
            split.append(variable)
    return split


@contextlib.contextmanager
def gathered_variables(variables):
    """Within the block, variables split over several jax processes hold their whole value.

    A jax model-parallel layout over several processes leaves each process
    only its shards, which Keras cannot write to a file. On entry every
    process gathers the whole values (`process_allgather`, a collective:
    all processes must enter together, as they do when the same callback
    saves in each); on exit the variables get their shards back. Elsewhere
    (one process, other backends) it does nothing.

    Args:
        variables: the Keras variables about to be saved.

    Example:

    >>> import keras
    >>> v = keras.Variable([1.0, 2.0])
    >>> with gathered_variables([v]):
    ...     keras.ops.convert_to_numpy(v).tolist()
    [1.0, 2.0]
    """
    split = _split_over_processes(variables)
    if not split:
        yield
        return
    import jax
    from jax.experimental import multihost_utils

    originals = [variable._value for variable in split]
    wholes = multihost_utils.process_allgather(originals, tiled=True)
    local = jax.local_devices()[0]
    try:
        for variable, whole in zip(split, wholes):
            variable._value = jax.device_put(whole, local)
        yield
    finally:
        for variable, original in zip(split, originals):
            variable._value = original


def saved_variables(model):
    """Every variable a save of `model` writes: its own, its metrics' and its optimizer's."""
    variables = list(model.variables) + list(getattr(model, "metrics_variables", []))
    if getattr(model, "optimizer", None) is not None:
        variables += list(model.optimizer.variables)
    return variables


def save_model(model, save, filepath, overwrite=True, **kwargs):
    """`save(filepath, ...)`, Keras' `Model.save` of `model`, made atomic.

    A `.keras` file that may be overwritten is written beside the target and
    renamed over it (`atomic_path`); Keras handles every other case itself
    (its prompt before overwriting, the legacy formats). The variables split
    over jax processes are gathered first (`gathered_variables`).

    Args:
        model: the model being saved.
        save: Keras' own `save`, bound to the model.
        filepath, overwrite, **kwargs: as `keras.Model.save` takes them.

    Returns:
        What `save` returns.
    """
    if not overwrite or not str(filepath).endswith(".keras"):
        return save(filepath, overwrite=overwrite, **kwargs)
    with gathered_variables(saved_variables(model)), atomic_path(filepath) as temporary:
        return save(temporary, overwrite=True, **kwargs)


def save_weights(model, save, filepath, overwrite=True, max_shard_size=None):
    """`save(filepath, ...)`, Keras' `Model.save_weights` of `model`, made atomic.

    Written to a temporary file and renamed, unless Keras must ask before
    overwriting or shards the weights over several files; the variables
    split over jax processes are gathered first.

    Args:
        model: the model being saved.
        save: Keras' own `save_weights`, bound to the model.
        filepath, overwrite, max_shard_size: as `keras.Model.save_weights`
            takes them.

    Example:

    >>> import keras, pathlib, tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "m.weights.h5"
    >>> save_weights(model, model.save_weights, target)
    >>> sorted(p.name for p in target.parent.iterdir())
    ['m.weights.h5']
    """
    with gathered_variables(saved_variables(model)):
        if not overwrite or max_shard_size is not None:
            return save(filepath, overwrite=overwrite, max_shard_size=max_shard_size)
        with atomic_path(filepath) as temporary:
            return save(temporary, overwrite=True)


def load_weights(model, load, filepath, skip_mismatch=False, **kwargs):
    """`keras.Model.load_weights`, with Orbax checkpoints restored onto this mesh.

    On jax under a distribution, Keras gives Orbax each variable's current
    layout, read from the model's state; state the model has not made yet
    (its compiled metrics' totals, before the first step) gets none, and
    Orbax then puts it back on the devices that saved it: a checkpoint
    written by two processes fails to load in one. Here such state is
    restored replicated over the distribution's mesh. Everything else is
    `load(filepath, ...)` (the model's `keras.Model.load_weights`).

    Args:
        model: the model to restore.
        load: the `keras.Model.load_weights` bound to `model`.
        filepath: a weights file or an Orbax checkpoint folder.
        skip_mismatch: passed on to `load`.
        **kwargs: passed on to `load`.

    Example:

    >>> import tempfile, keras, numpy as np, keras_vit
    >>> model = keras_vit.ViT(image_size=8, patch_size=4, hidden_size=8, num_layers=1,
    ...                       num_heads=2, mlp_dim=16, classes=2)
    >>> path = tempfile.mkdtemp() + "/m.weights.h5"
    >>> model.save_weights(path)
    >>> model.load_weights(path)
    """
    from keras.src.saving import orbax_util

    distribution = keras.distribution.distribution()
    if keras.backend.backend() != "jax" or distribution is None or not orbax_util.is_orbax_checkpoint(str(filepath)):
        return load(filepath, skip_mismatch=skip_mismatch, **kwargs)
    import jax
    from keras.src.utils.module_utils import ocp

    path = str(filepath)
    if any(name.isdigit() and os.path.isdir(os.path.join(path, name)) for name in os.listdir(path)):
        path = orbax_util.find_latest_orbax_checkpoint(path)
    replicated = jax.sharding.NamedSharding(distribution.device_mesh.backend_mesh, jax.sharding.PartitionSpec())
    abstract = jax.tree_util.tree_map(
        lambda leaf: leaf if leaf.sharding is not None else jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                                                                 sharding=replicated),
        orbax_util.build_orbax_abstract_pytree(path, model.get_state_tree()),
    )
    model.set_state_tree(ocp.load_checkpointables(path, dict(pytree=abstract))["pytree"])
