"""Seeds of the random streams inside keras_vit layers.

Every layer that draws random numbers (dropout, stochastic depth, the
pre-training corruption) owns its own `keras.random.SeedGenerator`, so that
the streams of two layers are independent. A layer built with `seed=None`
lets Keras draw its seed from the global generator, which
`keras.utils.set_random_seed` seeds: a seeded program is reproducible. A
layer built with an int `seed` derives one seed per stream from it with
`derive_seed`.
"""

import zlib

from keras_vit.validation import check_int


def check_seed(seed):
    """Checks that `seed` is None or an int >= 0."""
    return check_int(seed, "seed", minimum=0, allow_none=True)


def derive_seed(seed, *keys):
    """The seed of one random stream, derived from a layer's `seed`.

    Args:
        seed: None or an int.
        *keys: what tells the streams apart (a block index, a name).

    Returns:
        None for `seed=None` (Keras then draws a seed from its global
        generator), else an int in [0, 2**31 - 1), the same in every process.

    Example:

    >>> derive_seed(None, 3) is None
    True
    >>> derive_seed(42, "dropout") == derive_seed(42, "dropout") != derive_seed(42, "drop_path")
    True
    """
    if seed is None:
        return None
    return zlib.crc32(repr((seed,) + keys).encode()) % (2**31 - 1)
