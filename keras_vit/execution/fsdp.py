"""Fully sharded data parallelism (FSDP) on jax's `keras.distribution`.

Data parallelism keeps a whole copy of every weight and of its optimizer
state on every device; FSDP splits each large weight along one of its axes
over the devices of the mesh's batch axis, so that each device holds about
`1 / devices` of the model, and XLA gathers a weight where a step needs it.
The rule (the one big_vision trains its largest ViTs with): a weight of at
least `min_shard_bytes` is split along its largest axis that the batch
axis's size divides; smaller weights (norms, biases, tokens) and weights no
axis of which divides are replicated.

On a 2-D `("batch", "model")` mesh the tensor-parallel layout of
`ViT.get_layout_map` comes first (heads and MLP columns over "model") and
FSDP then splits another axis of each large weight over "batch".

    dist = keras_vit.training.get_distribution("fsdp")
    with dist.scope():
        model = keras_vit.ViTL16(classes=10)

Keras' own `ModelParallel` looks a weight's layout up by its path alone;
the FSDP rule needs the weight's shape, so it lives in `FSDP.get_variable_layout`.
"""

import keras
import numpy as np

MIN_SHARD_BYTES = 2**20


def fsdp_axis(shape, itemsize, axis_size, min_shard_bytes=MIN_SHARD_BYTES, taken=()):
    """The axis of a weight of `shape` that FSDP splits, or None to replicate it.

    Args:
        shape: the weight's shape.
        itemsize: bytes per element.
        axis_size: devices along the mesh's batch axis.
        min_shard_bytes: smaller weights are replicated.
        taken: axes already split (by the tensor-parallel layout).

    Returns:
        The largest axis (the first of equal ones) that `axis_size` divides,
        or None.

    Example:

    >>> fsdp_axis((768, 3072), 4, 8, min_shard_bytes=0)
    1
    >>> fsdp_axis((768,), 4, 8) is None  # 3 KiB: replicated
    True
    """
    size = itemsize
    for dim in shape:
        size *= dim
    if axis_size < 2 or size < min_shard_bytes:
        return None
    candidates = [i for i, dim in enumerate(shape) if i not in taken and dim and dim % axis_size == 0]
    if not candidates:
        return None
    return max(candidates, key=lambda i: (shape[i], -i))


def _itemsize(dtype):
    dtype = keras.backend.standardize_dtype(dtype)
    if dtype == "bfloat16" or dtype.startswith("float8"):
        return 2 if dtype == "bfloat16" else 1
    return np.dtype(dtype).itemsize


class FSDPLayoutMap(keras.distribution.LayoutMap):
    """A `LayoutMap` of tensor-parallel entries plus the FSDP rule.

    Its entries (path regular expressions to layouts, as in any `LayoutMap`)
    give the tensor-parallel axes; `variable_layout` adds the FSDP axis of
    each large weight. Use it with `FSDP` (which `get_distribution("fsdp")`
    builds): a plain `keras.distribution.ModelParallel` reads only its entries.

    Args:
        device_mesh: a `keras.distribution.DeviceMesh` with an axis named
            `fsdp_axis`.
        fsdp_axis: str, default "batch".
        min_shard_bytes: int, default 1 MiB: smaller weights are replicated.

    Example:

    >>> import keras
    >>> mesh = keras.distribution.DeviceMesh((8,), ("batch",), [f"cpu:{i}" for i in range(8)])
    >>> layout_map = FSDPLayoutMap(mesh, min_shard_bytes=0)
    >>> layout_map.variable_layout("head/kernel", (768, 1000), "float32").axes
    (None, 'batch')
    >>> layout_map.variable_layout("head/bias", (1000,), "bfloat16").axes
    ('batch',)
    """

    def __init__(self, device_mesh, fsdp_axis="batch", min_shard_bytes=MIN_SHARD_BYTES):
        super().__init__(device_mesh)
        if fsdp_axis not in device_mesh.axis_names:
            raise ValueError(
                f"`device_mesh` has no axis named {fsdp_axis!r} to shard over. "
                f"Received: fsdp_axis={fsdp_axis!r}, axis_names={device_mesh.axis_names!r}"
            )
        if min_shard_bytes < 0:
            raise ValueError(f"min_shard_bytes must be >= 0. Received: min_shard_bytes={min_shard_bytes!r}")
        self.fsdp_axis = fsdp_axis
        self.min_shard_bytes = int(min_shard_bytes)

    def variable_layout(self, path, shape, dtype):
        """The `TensorLayout` of a weight: its entry's axes, then the FSDP axis."""
        entry = self[path]
        axes = list(entry.axes) if entry is not None else [None] * len(shape)
        if len(axes) != len(shape):
            raise ValueError(
                f"The layout {tuple(axes)} of {path!r} has {len(axes)} axes; the weight has shape {tuple(shape)}."
            )
        mesh = self.device_mesh
        size = mesh.shape[mesh.axis_names.index(self.fsdp_axis)]
        taken = [i for i, axis in enumerate(axes) if axis is not None]
        # The model-axis shard is what this device holds of a split axis.
        local = list(shape)
        for i in taken:
            local[i] //= mesh.shape[mesh.axis_names.index(axes[i])]
        axis = fsdp_axis(local, _itemsize(dtype), size, self.min_shard_bytes, taken)
        if axis is not None:
            axes[axis] = self.fsdp_axis
        return keras.distribution.TensorLayout(axes, mesh)


class FSDP(keras.distribution.ModelParallel):
    """`ModelParallel` whose weights follow an `FSDPLayoutMap` (jax).

    Args:
        layout_map: an `FSDPLayoutMap` (`ViT.get_layout_map(mesh,
            fsdp_axis="batch")`).
        batch_dim_name: the mesh axis the batch is split over; default the
            layout map's `fsdp_axis`.
        auto_shard_dataset: as `keras.distribution.ModelParallel`'s.

    Example (jax; `get_distribution("fsdp")` builds the same over every device):

        devices = keras.distribution.list_devices()
        mesh = keras.distribution.DeviceMesh((len(devices),), ("batch",), devices)
        with FSDP(FSDPLayoutMap(mesh)).scope():
            model = keras_vit.ViTL16(classes=10)
    """

    def __init__(self, layout_map, batch_dim_name=None, auto_shard_dataset=True):
        if not isinstance(layout_map, FSDPLayoutMap):
            raise TypeError(
                "FSDP needs an FSDPLayoutMap (ViT.get_layout_map(mesh, fsdp_axis='batch')). "
                f"Received: layout_map of type {type(layout_map).__name__}"
            )
        super().__init__(
            layout_map=layout_map,
            batch_dim_name=batch_dim_name or layout_map.fsdp_axis,
            auto_shard_dataset=auto_shard_dataset,
        )

    def get_variable_layout(self, variable):
        if getattr(variable, "_layout", None) is not None:
            return variable._layout
        return self._layout_map.variable_layout(variable.path, variable.shape, variable.dtype)
