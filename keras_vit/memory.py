"""How much memory a model takes per device, planned from shapes alone.

`plan_memory(model, distribution, devices, batch_size)` builds the model's
variables without values (`keras_vit.execution.sharded_load.shapes_only`:
no weight is created, then or later), lays each out as the distribution would
(`keras_vit.execution.fsdp` for "fsdp", `ViT.get_layout_map` for
"model_parallel", whole copies for "data_parallel" and "none") over a mesh
of `devices` named devices, which need not exist here, and adds the bytes
each device holds:

- weights: each variable's shard;
- optimizer state: the optimizer's slots per trainable weight (AdamW: two
  moments), laid out as their weight, as Keras' optimizers create them;
- activations: an estimate, the tensors one training step keeps for the
  backward pass of each block (inputs of the norms and projections, the
  attention scores and probabilities, the MLP's hidden activations) at the
  batch each replica computes, with no rematerialisation.

So a user knows the mesh a model needs before renting it.
"""

import dataclasses

import keras
import numpy as np

from keras_vit.execution.sharded_load import shapes_only
from keras_vit.validation import check_choice

DISTRIBUTIONS = ("none", "data_parallel", "model_parallel", "fsdp")
# The state an optimizer keeps per trainable weight, in copies of the weight.
OPTIMIZER_SLOTS = {"adamw": 2, "adam": 2, "lion": 1, "sgd": 0, "sgd_momentum": 1}


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """Bytes per device, the largest over the devices (`plan_memory`).

    Attributes:
        distribution: the distribution's name.
        mesh: the mesh's shape, `(batch,)` or `(batch, model)`.
        weights: bytes of weights a device holds.
        optimizer: bytes of optimizer state a device holds.
        activations: estimated bytes of activations a training step keeps.
        total_weights: bytes of all the weights (one copy).
        parameters: the number of parameters.
    """

    distribution: str
    mesh: tuple
    weights: int
    optimizer: int
    activations: int
    total_weights: int
    parameters: int

    @property
    def total(self):
        """Bytes per device: weights, optimizer state and activations."""
        return self.weights + self.optimizer + self.activations

    def __str__(self):
        gib = 2.0**30
        return (f"{self.distribution} over a {' x '.join(map(str, self.mesh))} mesh, "
                f"{self.parameters:,} parameters: per device {self.weights / gib:.2f} GiB weights, "
                f"{self.optimizer / gib:.2f} GiB optimizer state, ~{self.activations / gib:.2f} GiB "
                f"activations, ~{self.total / gib:.2f} GiB in all")


def _itemsize(dtype):
    dtype = keras.backend.standardize_dtype(dtype)
    if dtype == "bfloat16":
        return 2
    if dtype.startswith("float8"):
        return 1
    return np.dtype(dtype).itemsize


def _variables(model, dtype):
    """`(model config or None, [(path, shape, dtype, trainable)])` with no weight created."""
    from keras_vit.architectures import ARCHITECTURE_CONFIGS
    from keras_vit.models.vit import ViT

    if isinstance(model, keras.Model):
        config = model.get_config() if isinstance(model, ViT) else None
        return config, [(v.path, tuple(v.shape), v.dtype, v.trainable) for v in model.weights]
    if isinstance(model, str):
        check_choice(model, tuple(ARCHITECTURE_CONFIGS), "model")
        model = ARCHITECTURE_CONFIGS[model]
    if not isinstance(model, dict):
        raise TypeError(
            "plan_memory takes a model, an architecture name (keras_vit.architectures.ARCHITECTURE_CONFIGS) "
            f"or a dict of ViT arguments. Received: model of type {type(model).__name__}")
    kwargs = dict(model)
    if dtype is not None:
        kwargs["dtype"] = dtype
    with shapes_only():
        built = ViT(**kwargs)
        found = [(v.path, tuple(v.shape), v.dtype, v.trainable) for v in built.weights]
        config = built.get_config()
    return config, found


def _mesh(distribution, devices, model_parallel):
    from keras_vit.training.distribute import _mesh_shape

    if distribution == "none":
        return None, (1,)
    if distribution == "data_parallel" or (distribution == "fsdp" and model_parallel in (None, 1)):
        shape, names = (devices,), ("batch",)
    else:
        least = 1 if distribution == "fsdp" else 2
        default = 1 if distribution == "fsdp" else 2
        shape = _mesh_shape(devices, default if model_parallel is None else model_parallel, None, None, least)
        names = ("batch", "model")
    names_of_devices = [f"cpu:{i}" for i in range(int(np.prod(shape)))]
    return keras.distribution.DeviceMesh(shape, names, names_of_devices), shape


def _shard_bytes(layout, mesh, shape, itemsize):
    """Bytes a device holds of a variable laid out as `layout` (None: replicated)."""
    local = list(shape)
    if layout is not None:
        for i, axis in enumerate(layout.axes):
            if axis is not None:
                local[i] //= mesh.shape[mesh.axis_names.index(axis)]
    return int(np.prod(local, dtype=np.int64)) * itemsize


def _activations(config, batch, itemsize, model_parallel):
    """The tensors of each block a training step keeps for the backward pass."""
    if config is None:
        return 0
    def pair(value):
        return (value, value) if isinstance(value, int) else tuple(value)

    (rows, cols), (patch_rows, patch_cols) = pair(config["image_size"]), pair(config["patch_size"])
    prefix = int(config.get("classifier") == "token") + int(config.get("num_register_tokens") or 0)
    tokens = (rows // patch_rows) * (cols // patch_cols) + prefix
    width, heads, mlp = config["hidden_size"], config["num_heads"], config["mlp_dim"]
    # Per token: the block's input and the two norms' outputs, queries, keys,
    # values and the attention's output, the residual after attention (7
    # widths); the MLP's hidden activations before and after the activation
    # (2 x mlp_dim); the scores and probabilities (2 x heads x tokens).
    split = max(1, model_parallel)
    per_token = 7 * width + (2 * mlp + 2 * heads * tokens) // split
    return int(config["num_layers"]) * batch * tokens * per_token * itemsize


def plan_memory(model, distribution="none", devices=1, batch_size=None, model_parallel=None, optimizer="adamw",
                dtype=None, min_shard_bytes=None):
    """Plans a model's bytes per device, from shapes alone.

    Args:
        model: a keras_vit model, an architecture name ("B/16", "g/14", ...:
            `keras_vit.architectures.ARCHITECTURE_CONFIGS`) or a dict of
            `keras_vit.ViT` arguments.
        distribution: "none" (default), "data_parallel", "model_parallel"
            or "fsdp", as `keras_vit.training.get_distribution` builds them.
        devices: the number of devices (they need not exist here).
        batch_size: the global batch of a training step; default one image
            per replica.
        model_parallel: devices per model replica ("model" axis): default 2
            for "model_parallel", 1 for "fsdp".
        optimizer: "adamw" (default), "adam", "lion", "sgd" or
            "sgd_momentum": the state kept per trainable weight.
        dtype: the variables' dtype policy for a config ("bfloat16", ...);
            default the model's or float32.
        min_shard_bytes: for "fsdp", the size below which a weight is
            replicated (default 1 MiB).

    Returns:
        A `MemoryPlan`: bytes per device of weights, optimizer state and
        activations (an estimate), the largest over the devices.

    Example:

    >>> plan = plan_memory("B/16", "fsdp", devices=8, batch_size=64)
    >>> plan.parameters
    86567656
    >>> round(plan.weights / plan.total_weights, 2)
    0.13
    """
    check_choice(distribution, DISTRIBUTIONS, "distribution")
    check_choice(optimizer, tuple(OPTIMIZER_SLOTS), "optimizer")
    for value, name in ((devices, "devices"), (batch_size, "batch_size")):
        if value is None and name == "batch_size":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1. Received: {name}={value!r}")
    if distribution == "none" and devices != 1:
        raise ValueError(f"distribution='none' runs on one device. Received: devices={devices}")
    config, variables = _variables(model, dtype)
    mesh, shape = _mesh(distribution, int(devices), model_parallel)
    replicas = shape[0]
    batch_size = replicas if batch_size is None else int(batch_size)
    if batch_size % replicas:
        raise ValueError(
            f"batch_size={batch_size} is not divisible by the {replicas} replicas of a {distribution!r} "
            f"mesh of shape {shape}.")
    layout_map = None
    if distribution == "fsdp":
        from keras_vit.models.vit import ViT
        from keras_vit.execution import fsdp

        layout_map = ViT.get_layout_map(mesh, fsdp_axis="batch", min_shard_bytes=(
            fsdp.MIN_SHARD_BYTES if min_shard_bytes is None else min_shard_bytes))
    elif distribution == "model_parallel":
        from keras_vit.models.vit import ViT

        if config is not None:
            for name in ("num_heads", "mlp_dim"):
                if config[name] % shape[1]:
                    raise ValueError(f"The model's {name}={config[name]} is not divisible by "
                                     f"model_parallel={shape[1]}.")
        layout_map = ViT.get_layout_map(mesh)
    weights = optimizer_bytes = total = parameters = 0
    slots = OPTIMIZER_SLOTS[optimizer]
    compute_itemsize = 4
    for path, var_shape, var_dtype, trainable in variables:
        itemsize = _itemsize(var_dtype)
        if distribution == "fsdp":
            layout = layout_map.variable_layout(path, var_shape, var_dtype)
        elif distribution == "model_parallel":
            layout = layout_map[path]
        else:
            layout = None
        held = _shard_bytes(layout, mesh, var_shape, itemsize)
        weights += held
        if trainable:
            optimizer_bytes += slots * held
        count = int(np.prod(var_shape, dtype=np.int64))
        total += count * itemsize
        parameters += count
    if config is not None:
        policy = keras.dtype_policies.get(config.get("dtype") or "float32")
        compute_itemsize = _itemsize(policy.compute_dtype)
    activations = _activations(config, batch_size // replicas, compute_itemsize,
                               shape[1] if len(shape) > 1 else 1)
    return MemoryPlan(distribution, tuple(shape), int(weights), int(optimizer_bytes), int(activations),
                      int(total), int(parameters))
