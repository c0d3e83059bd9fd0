"""Weights loaded straight into sharded variables (jax, `keras.distribution`).

Under a distribution, Keras gives each new variable its initial value and
then places it on the devices of its layout: building a model whose weights
come from a checkpoint draws every random initial value for nothing, and a
loader that reads whole tensors holds each on the host beside the model. On
jax, with a distribution set, keras_vit loads a checkpoint this way instead:

- `deferred_variables()`, a context around the model's construction:
  variables made inside get a shape, a dtype and an initializer but no value
  (Keras' stateless scope, without its initialisation on exit);
- `assign(variable, value)`: the variable's value made in its layout by
  `jax.make_array_from_callback`, each device's slice read from the value
  (a `.safetensors` tensor is memory-mapped and only the slices of this
  process's devices are copied out, cast to the variable's dtype slice by
  slice, so a bfloat16 file loaded as bfloat16 is never widened);
- `initialize_rest(model)`: the variables a checkpoint does not give (a
  dropout's seed state) initialised as Keras would have.

On other backends, or with no distribution, `active()` is False and loading
is unchanged. `keras_vit.from_preset`, the named constructors' `weights=`
and `keras_vit.load_model` load this way under a distribution's scope:

    dist = keras_vit.training.get_distribution("fsdp")
    with dist.scope():
        model = keras_vit.from_preset("facebook/dinov3-vit7b16-pretrain-lvd1689m", dtype="bfloat16")

The peak memory it takes is measured in the training guide (docs/guides/training.md).
"""

import contextlib
import mmap

import keras
import numpy as np


def active():
    """Whether weights load by slices here: jax with a `keras.distribution` set.

    Example:

    >>> active()  # no distribution set
    False
    """
    return keras.backend.backend() == "jax" and keras.distribution.distribution() is not None


def check_mesh(distribution=None):
    """Raises a ValueError unless the distribution's mesh fits the devices jax sees.

    Args:
        distribution: a `keras.distribution.Distribution`; default the one set.

    Raises:
        ValueError: naming the mesh's shape, its device count and the devices
            available, when the mesh names more devices (or other ones) than
            jax has.

    Example (jax, 8 devices):

        mesh = keras.distribution.DeviceMesh((16,), ("batch",), [f"cpu:{i}" for i in range(16)])
        check_mesh(keras.distribution.DataParallel(device_mesh=mesh))  # ValueError: ... jax sees 8
    """
    import jax

    distribution = distribution or keras.distribution.distribution()
    mesh = getattr(distribution, "device_mesh", None)
    if mesh is None:
        return
    shape = dict(zip(mesh.axis_names, mesh.shape))
    available = jax.device_count()
    problem = None
    if mesh.devices.size > available:
        problem = f"it has {mesh.devices.size} devices; jax sees {available}"
    else:
        try:
            mesh.backend_mesh
        except ValueError as error:  # a device name jax does not know
            problem = f"{error} (jax sees {available} devices: {jax.devices()[0].platform}:0 to :{available - 1})"
    if problem:
        raise ValueError(
            f"The distribution's device mesh is larger than the devices: {problem}. "
            f"Received: mesh shape={shape}, devices={mesh.devices.size}"
        )


def _uninitialized():
    from keras.src.backend.common import global_state

    return global_state.get_global_attribute("uninitialized_variables", [], set_to_default=True)


@contextlib.contextmanager
def deferred_variables(enabled=True):
    """A context in which new variables get no value until they are assigned.

    Active on jax under a distribution when `enabled`; elsewhere it changes
    nothing. The variables made inside are left out of Keras' list of
    variables to initialise later: `assign` gives each its value and
    `initialize_rest` the others.

    Args:
        enabled: bool; False makes the context do nothing.

    Raises:
        ValueError: from `check_mesh`, before any variable is made.

    Example (jax; what `keras_vit.from_preset` does under a distribution):

        with dist.scope():
            with deferred_variables():
                model = keras_vit.ViT(**arguments)
            for variable, value in zip(model.weights, values):
                assign(variable, value)
            initialize_rest(model)
    """
    from keras.src.backend.common.stateless_scope import in_stateless_scope

    if not (enabled and active()) or in_stateless_scope():
        yield
        return
    check_mesh()
    with shapes_only():
        yield


@contextlib.contextmanager
def shapes_only():
    """A scope in which new variables get a shape and a dtype, and never a value.

    `keras.StatelessScope(initialize_variables=False)` makes variables
    without values, but leaves them on Keras' list of variables to
    initialise, which the end of the next stateless scope empties (any
    symbolic call, on jax and tensorflow): the shapes of a 1.8-billion-
    parameter model, counted, would later allocate 7 GB of random values.
    Here the variables made inside are taken off that list on exit.

    Example:

    >>> import keras_vit
    >>> with shapes_only():
    ...     model = keras_vit.ViTB16()
    >>> model.count_params()
    86567656
    """
    pending = _uninitialized()
    before = list(pending)
    try:
        with keras.StatelessScope(initialize_variables=False):
            yield
    finally:
        pending[:] = before


def _layout(variable):
    layout = getattr(variable, "_layout", None)
    if layout is None:
        layout = keras.distribution.distribution().get_variable_layout(variable)
    return layout


def _device_array(value, shape, dtype, sharding):
    import jax

    if keras.ops.is_tensor(value):
        # A copy: jax's training steps donate a variable's buffer.
        return jax.device_put(jax.numpy.array(value, dtype=dtype, copy=True), sharding)
    mapped = getattr(value, "mapped", None)
    context = mapped() if callable(mapped) else contextlib.nullcontext(np.asarray(value))
    with context as source:
        if tuple(source.shape) != shape:
            raise ValueError(f"A value of shape {tuple(source.shape)} cannot be loaded into shape {shape}.")

        def read(index):
            # A copy of this device's slice only, cast on its own.
            view = source[index]
            part = _aligned_empty(view.shape, dtype)
            for chunk in _chunks(view):
                np.copyto(part[chunk], view[chunk], casting="unsafe")
                _release_pages(source)
            return part

        return jax.make_array_from_callback(shape, sharding, read)


# The span of a memory-mapped file one chunk of a copy reads before its
# pages are dropped.
_CHUNK_BYTES = 8 * 2**20


def _chunks(view):
    """Indices that cover `view` in pieces, each a short span of its memory.

    Split along the axis of the largest stride (rows of the file): a slice of
    columns of a transposed tensor then maps a few rows at a time, not every
    page of the tensor.
    """
    if view.ndim == 0 or view.size == 0:
        yield ...
        return
    axis = max(range(view.ndim), key=lambda a: abs(view.strides[a]) if view.shape[a] > 1 else -1)
    step = max(1, _CHUNK_BYTES // max(1, abs(view.strides[axis])))
    for start in range(0, view.shape[axis], step):
        yield (slice(None),) * axis + (slice(start, start + step),)


def _aligned_empty(shape, dtype, alignment=64):
    """An empty array at an address `alignment` divides: jax's CPU devices
    then use its memory as it is, where they would copy another."""
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(size + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + size].view(dtype).reshape(shape)


def _release_pages(array):
    """Drops the pages of a memory-mapped file `array` views from this
    process's memory (they stay in the page cache): a tensor read slice by
    slice never holds more than one slice's pages."""
    while isinstance(array, np.ndarray):
        array = array.base
    if isinstance(array, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        array.madvise(mmap.MADV_DONTNEED)


def assign(variable, value):
    """Gives `variable` the value `value`, made slice by slice in its layout.

    Args:
        variable: a Keras variable, made under `deferred_variables` (no value
            yet) or already placed.
        value: an array, a backend tensor, or a lazily read tensor with a
            `mapped()` context (`keras_vit.weights.files.LazyTensor`).
    """
    import jax

    layout = _layout(variable)
    sharding = getattr(layout, "backend_layout", layout)
    dtype = jax.numpy.dtype(keras.backend.standardize_dtype(variable.dtype))
    array = _device_array(value, tuple(variable.shape), dtype, sharding)
    if variable._value is None:
        variable._layout = layout
        variable._value = array
        variable._initializer = None
    else:
        variable.assign(array)


def _zeros(variable):
    import jax

    layout = _layout(variable)
    dtype = jax.numpy.dtype(keras.backend.standardize_dtype(variable.dtype))
    sharding = getattr(layout, "backend_layout", layout)
    variable._layout = layout
    variable._value = jax.make_array_from_callback(
        tuple(variable.shape), sharding, lambda index: np.zeros(_sliced(variable.shape, index), dtype))
    variable._initializer = None


def _sliced(shape, index):
    return tuple(len(range(*part.indices(size))) for size, part in zip(shape, index))


def initialize_rest(model, zeros=False):
    """Initialises the variables of `model` still without a value.

    Args:
        model: a Keras model.
        zeros: False (default): each by its initializer, as Keras would;
            True: the weights as zeros made in their layouts (for a loader
            that assigns whole values next, Keras' own `load_weights`), the
            other variables by their initializers.
    """
    weights = {id(w) for w in model.weights} if zeros else set()
    for variable in model.variables:
        if getattr(variable, "_value", 0) is None:
            if id(variable) in weights:
                _zeros(variable)
            else:
                variable._deferred_initialize()
