"""What a model is fed, known before any batch is read."""

import sys

import keras


def input_spec_of(x):
    """`(shape, dtype)` of the batches `x` feeds, when known without reading data.

    Arrays and tensors of any library, and `tf.data.Dataset`s (of images, or
    of tuples whose first element is the images); None otherwise (Python
    generators, dicts, lists).

    Example:

    >>> import numpy as np
    >>> input_spec_of(np.zeros((2, 32, 32, 3), "uint8"))
    ((2, 32, 32, 3), 'uint8')
    >>> input_spec_of([np.zeros(3)]) is None
    True
    """
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(x, tf.data.Dataset):
        spec = x.element_spec
        spec = spec[0] if isinstance(spec, (tuple, list)) and spec else spec
        if not isinstance(spec, tf.TensorSpec) or spec.shape.rank is None:
            return None
        return tuple(spec.shape), spec.dtype.name
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None or isinstance(x, (dict, list, tuple)):
        return None
    try:
        dtype = keras.backend.standardize_dtype(dtype)
    except ValueError:
        dtype = str(dtype)
    return tuple(shape), dtype
