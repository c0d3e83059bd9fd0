"""`SwiGluMlp`: the gated MLP of DINOv2-giant (SwiGLU), and the options it
shares with the plain MLP (`mlp_options`, `hidden_norm`)."""

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.kernels import call_sublayer
from keras_vit.layers.norms import check_norm_kind, norm_layer
from keras_vit.layers.seeds import check_seed
from keras_vit.validation import check_bool, check_positive_float, check_positive_int, check_rate


def mlp_options(config):
    """The keywords of either MLP for a `BlockConfig`: biases and inner norm.

    Example:

    >>> from keras_vit.layers.config import BlockConfig
    >>> mlp_options(BlockConfig(mlp_bias=False, mlp_norm=True, norm_kind="rmsnorm"))
    {'use_bias': False, 'norm': 1e-06, 'norm_kind': 'rmsnorm'}
    """
    return dict(
        use_bias=config.mlp_bias,
        norm=config.layer_norm_epsilon if config.mlp_norm else None,
        norm_kind=config.norm_kind,
    )


def check_mlp_fields(layer, mlp_dim, dropout_rate, seed, use_bias, norm, norm_kind):
    """Checks the arguments every MLP of a block takes and sets them on
    `layer` (`norm` becomes `norm_epsilon`)."""
    layer.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
    layer.dropout_rate = check_rate(dropout_rate, "dropout_rate")
    layer.seed = check_seed(seed)
    layer.use_bias = check_bool(use_bias, "use_bias")
    layer.norm_epsilon = None if norm is None else check_positive_float(norm, "norm")
    layer.norm_kind = check_norm_kind(norm_kind)


def hidden_norm(layer, hidden_shape):
    """The built norm of an MLP's hidden activations (sublayer `norm`), or
    None: for an MLP `layer` with `norm_epsilon` and `norm_kind`."""
    if layer.norm_epsilon is None:
        return None
    norm = norm_layer(layer.norm_kind, layer.norm_epsilon, "norm", dtype=layer.dtype_policy)
    norm.build(hidden_shape)
    return norm


def swiglu_hidden_width(hidden_size, mlp_ratio):
    """The hidden width of DINOv2's SwiGLU MLP for a width and an MLP ratio.

    transformers' `Dinov2SwiGLUFFN` (and the original DINOv2 code) keep two
    thirds of the plain MLP's width `int(hidden_size * mlp_ratio)`, rounded
    up to a multiple of 8, so that the gated MLP has about the plain one's
    parameters.

    Args:
        hidden_size: int, the token width.
        mlp_ratio: float, the plain MLP's hidden width over the token width.

    Returns:
        int, the width of the gate and of the up projection.

    Example:

    >>> swiglu_hidden_width(1536, 4.0)  # DINOv2-giant
    4096
    >>> swiglu_hidden_width(20, 4.0)
    56
    """
    hidden_size = check_positive_int(hidden_size, "hidden_size")
    mlp_ratio = check_positive_float(mlp_ratio, "mlp_ratio")
    plain = int(hidden_size * mlp_ratio)
    return (int(plain * 2 / 3) + 7) // 8 * 8


@keras.saving.register_keras_serializable(package="keras_vit")
class SwiGluMlp(keras.layers.Layer):
    """`down(silu(gate(x)) * up(x))`, then dropout (Shazeer 2020).

    The MLP of DINOv2-giant: two projections to the hidden width, one of them
    through SiLU gating the other, and one back to the token width. Weights
    `gate`, `up` (kernels `(D, mlp_dim)`) and `down` (kernel `(mlp_dim, D)`),
    each with a bias: transformers' `gate_proj`, `up_proj` and `down_proj`;
    timm's `fc1` holds `gate` and `up` stacked (in that order) and `fc2` is
    `down`; the original DINOv2 code's `w12` and `w3` likewise.

    Args:
        mlp_dim: int, the hidden width (`swiglu_hidden_width` gives DINOv2's
            from an MLP ratio).
        dropout_rate: float in [0, 1), dropout after the gating and after
            the output projection (as `MlpBlock`).
        seed: None (default: drawn from Keras' global generator) or an int,
            the seed of the dropout.
        use_bias: bool, default True: biases on the three projections
            (AIMv2's and DINOv3-7B's gated MLPs may have none).
        norm: None (default) or a float, the epsilon of a norm of the gated
            activations before `down` (sublayer `norm`; EVA02's
            `scale_mlp`).
        norm_kind: the kind of that norm, a name of
            `keras_vit.layers.norms.NORMS`, default "layernorm".

    Input shape:
        `(..., D)`.

    Returns:
        `(..., D)`.

    Example:

    >>> import numpy as np
    >>> mlp = SwiGluMlp(mlp_dim=swiglu_hidden_width(8, 4.0))
    >>> tuple(mlp(np.zeros((1, 3, 8), "float32")).shape), tuple(mlp.gate.kernel.shape)
    ((1, 3, 8), (8, 24))

    Reference:
        Shazeer, "GLU Variants Improve Transformer", arXiv:2002.05202;
        Oquab et al., "DINOv2", arXiv:2304.07193.
    """

    def __init__(self, mlp_dim, dropout_rate=0.0, seed=None, use_bias=True, norm=None,
                 norm_kind="layernorm", **kwargs):
        super().__init__(**kwargs)
        check_mlp_fields(self, mlp_dim, dropout_rate, seed, use_bias, norm, norm_kind)

    @classmethod
    def for_block(cls, config, mlp_dim, **kwargs):
        """The MLP a block with `config` (a `BlockConfig`, `mlp_kind="swiglu"`) holds."""
        return cls(mlp_dim, dropout_rate=config.dropout_rate, **mlp_options(config), **kwargs)

    def build(self, input_shape):
        dense = dict(dtype=self.dtype_policy, kernel_initializer="glorot_uniform", use_bias=self.use_bias)
        hidden = tuple(input_shape[:-1]) + (self.mlp_dim,)
        self.gate = keras.layers.Dense(self.mlp_dim, name="gate", **dense)
        self.up = keras.layers.Dense(self.mlp_dim, name="up", **dense)
        self.down = keras.layers.Dense(input_shape[-1], name="down", **dense)
        self.gate.build(input_shape)
        self.up.build(input_shape)
        self.norm = hidden_norm(self, hidden)
        self.down.build(hidden)
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, seed=self.seed, dtype=self.dtype_policy
        )
        self.built = True

    def call(self, x, training=None):
        y = ops.silu(kernels.project(self.gate, x)) * kernels.project(self.up, x)
        y = call_sublayer(self.dropout, y, training=training)
        if self.norm is not None:
            y = call_sublayer(self.norm, y)
        return call_sublayer(self.dropout, kernels.project(self.down, y), training=training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"mlp_dim": self.mlp_dim, "dropout_rate": self.dropout_rate, "seed": self.seed,
             "use_bias": self.use_bias, "norm": self.norm_epsilon, "norm_kind": self.norm_kind}
        )
        return config
