"""Training over several processes: what the torch backend cannot do.

Keras 3 has no torch distribution: under a torch process group of several
processes each process would train its own copy of the model,
unsynchronised. keras_vit refuses that, in `fit` and where processes are
joined (`keras_vit.training.multiprocess`).
"""

import sys

import keras


def torch_process_group_size():
    """Processes in an initialised torch process group (1 when there is none).

    Reads `torch.distributed` only when it was imported: no group can
    exist otherwise.

    Example:

    >>> torch_process_group_size()
    1
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size()


def refuse_torch_processes(why):
    """Raises the error for training over several processes with torch."""
    raise RuntimeError(
        f"keras_vit cannot train over several processes on the torch backend ({why}): "
        "Keras 3 has no torch distribution, so each process would train its "
        "own copy of the model, unsynchronised. Train in one process (one "
        "device), or use KERAS_BACKEND=jax (data or model parallel over "
        "processes) or tensorflow (MultiWorkerMirroredStrategy)."
    )


def check_training_processes():
    """Refuses to train on torch under a process group of several processes."""
    if keras.backend.backend() == "torch" and torch_process_group_size() > 1:
        refuse_torch_processes(f"a torch process group of {torch_process_group_size()} is initialised")
