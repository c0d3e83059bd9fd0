"""`TransformerBlock` (pre-LN encoder block) and its `MlpBlock`."""

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.kernels import call_sublayer
from keras_vit.layers.attention import MultiHeadSelfAttention, tokens_shape
from keras_vit.layers.config import MLP_ACTIVATIONS, BlockConfig, expose_records
from keras_vit.layers.norms import block_norm
from keras_vit.layers.relative_position import static_grid, window_partition, window_merge
from keras_vit.layers.seeds import check_seed, derive_seed
from keras_vit.layers.swiglu import SwiGluMlp, check_mlp_fields, hidden_norm, mlp_options
from keras_vit.validation import (
    check_choice,
    check_int,
    check_positive_int,
    check_rate,
    head_width,
    pair,
)


@keras.saving.register_keras_serializable(package="keras_vit")
class MlpBlock(keras.layers.Layer):
    """Dense -> activation -> Dropout -> Dense -> Dropout (paper eq. 3).

    Args:
        mlp_dim: int, hidden width.
        dropout_rate: float in [0, 1), dropout after each Dense.
        activation: "gelu_tanh" (default: the tanh approximation of the
            official code and checkpoints), "gelu" (exact erf GELU,
            timm/DeiT) or "quick_gelu" (`x * sigmoid(1.702 x)`, OpenAI CLIP).
        seed: None (default: drawn from Keras' global generator) or an int,
            the seed of the dropout.
        use_bias: bool, default True: biases on both Dense layers.
        norm: None (default) or a float, the epsilon of a norm of the hidden
            activations before the second Dense (sublayer `norm`; EVA02's
            `scale_mlp`).
        norm_kind: the kind of that norm, a name of
            `keras_vit.layers.norms.NORMS`, default "layernorm".

    Example:

    >>> import numpy as np
    >>> tuple(MlpBlock(mlp_dim=16)(np.zeros((1, 3, 8), "float32")).shape)
    (1, 3, 8)
    >>> MlpBlock(mlp_dim=16, activation="gelu").activation
    'gelu'
    >>> mlp = MlpBlock(mlp_dim=16, use_bias=False, norm=1e-6)
    >>> _ = mlp(np.zeros((1, 3, 8), "float32"))
    >>> [w.path.split("/", 1)[1] for w in mlp.weights]
    ['Dense_0/kernel', 'norm/gamma', 'norm/beta', 'Dense_1/kernel']
    """

    def __init__(self, mlp_dim, dropout_rate=0.0, activation="gelu_tanh", seed=None, use_bias=True,
                 norm=None, norm_kind="layernorm", **kwargs):
        super().__init__(**kwargs)
        check_mlp_fields(self, mlp_dim, dropout_rate, seed, use_bias, norm, norm_kind)
        self.activation = check_choice(activation, MLP_ACTIVATIONS, "activation")

    @classmethod
    def for_block(cls, config, mlp_dim, **kwargs):
        """The MLP a block with `config` (a `BlockConfig`) holds."""
        return cls(
            mlp_dim, dropout_rate=config.dropout_rate, activation=config.mlp_activation,
            **mlp_options(config), **kwargs,
        )

    def build(self, input_shape):
        dense = dict(
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            use_bias=self.use_bias,
            dtype=self.dtype_policy,
        )
        hidden = tuple(input_shape[:-1]) + (self.mlp_dim,)
        self.dense_0 = keras.layers.Dense(self.mlp_dim, name="Dense_0", **dense)
        self.dense_0.build(input_shape)
        self.norm = hidden_norm(self, hidden)
        self.dense_1 = keras.layers.Dense(input_shape[-1], name="Dense_1", **dense)
        self.dense_1.build(hidden)
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, seed=self.seed, dtype=self.dtype_policy
        )
        self.built = True

    def call(self, x, training=None):
        if self.norm is None and not (training and self.dropout_rate):
            return kernels.project_mlp(self.dense_0, self.dense_1, x, self.activation)
        x = kernels.project(self.dense_0, x, self.activation)
        x = call_sublayer(self.dropout, x, training=training)
        if self.norm is not None:
            x = call_sublayer(self.norm, x)
        x = kernels.project(self.dense_1, x)
        return call_sublayer(self.dropout, x, training=training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "mlp_dim": self.mlp_dim,
                "dropout_rate": self.dropout_rate,
                "activation": self.activation,
                "seed": self.seed,
                "use_bias": self.use_bias,
                "norm": self.norm_epsilon,
                "norm_kind": self.norm_kind,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
@expose_records("block_config")
class TransformerBlock(keras.layers.Layer):
    """Pre-LayerNorm Transformer encoder block (paper eq. 2-3).

    `x = x + drop_path(dropout(MSA(LN(x))))`, then
    `x = x + drop_path(MLP(LN(x)))`; `norm_position="post"` moves each norm
    onto its branch's output (`x + drop_path(LN(MSA(x)))`), `parallel=True`
    runs both branches on one norm (`x + drop_path(MSA(LN(x)) + MLP(LN(x)))`). Sublayer names follow the official
    checkpoint (`LayerNorm_0`, `MultiHeadDotProductAttention_1`,
    `LayerNorm_2`, `MlpBlock_3`). With `layer_scale_init`, each branch is
    scaled per channel by a learned vector before the residual sum
    (LayerScale, Touvron et al. 2021, arXiv:2103.17239; timm's
    `init_values`): weights `attention_scale` and `mlp_scale`.

    The options every block of a model shares come as one record,
    `block_config` (a `keras_vit.layers.config.BlockConfig`: norm kind and
    epsilon, MLP activation, query/key/value biases, LayerScale, dropout
    rates); each of its fields is also accepted as a keyword (and read back as an
    attribute, `block.qkv_bias`).
    `get_config` holds the record as one dict under "block_config".

    Args:
        num_heads: int, attention heads; must divide the input width.
        mlp_dim: int, MLP hidden width.
        block_config: None (default: the defaults), a `BlockConfig` or its
            config dict.
        stochastic_depth_rate: float, probability of dropping the residual
            branches of a sample (stochastic depth); 0 disables it. Not in
            the record: a model gives each block its own rate.
        seed: None (default) or an int. Each random stream of the block
            (stochastic depth, the dropouts) has its own generator; with
            None their seeds are drawn from Keras' global generator (which
            `keras.utils.set_random_seed` seeds), with an int they are
            derived from it (`keras_vit.layers.seeds.derive_seed`).
        block_index: int, default 0: the block's place in the encoder, from
            0; differential attention's lambda starts from a value that
            depends on it.
        num_kv_heads: None (default: `num_heads`) or an int dividing it: the
            attention's key and value heads (grouped-query attention).
        grid_size: None (default) or `(h, w)`: the patch grid of the model
            the block is built for, the size of a global block's decomposed
            relative position tables (`relative_position="decomposed"`
            without `window_size`).
        **kwargs: fields of `BlockConfig` (they replace those of
            `block_config`) and Keras' layer keywords.

    Call arguments:
        x: `(batch, tokens, D)`.
        training: bool, the mode of dropout and stochastic depth.
        output_tokens: None (default: every token) or an int `n`: the
            outputs of the first `n` tokens only, computed without the other
            tokens' queries, attention outputs and MLP (their keys and
            values are still attended to): what a model whose head reads
            only its prefix tokens needs from its last block.
        attention_mask: None (default) or a boolean tensor, True where a
            query may attend to a key: `(batch, tokens)` (a key-padding
            mask), `(batch, tokens, tokens)` or `(batch, 1 or heads, tokens,
            tokens)`; see `MultiHeadSelfAttention`.
        rope: None (default) or, for a block with `rope` in its
            `block_config`, the rotary tables of every token (prefix rows
            included) that the model's `RotaryEmbedding` computed once for
            the input's grid: `(2, tokens, head_dim)`, or `(2, tokens,
            heads, head_dim)` for "mixed" (this block's slice).
        grid: None (default) or, for a block with `window_size` or
            `relative_position`, a `(batch, h, w, ...)` tensor on the patch
            grid of `x` (the patches; `x` then holds patch tokens alone).

    Returns:
        `(batch, tokens, D)` (`(batch, n, D)` with `output_tokens=n`).

    Example:

    >>> import numpy as np
    >>> block = TransformerBlock(num_heads=2, mlp_dim=16, qkv_bias=False)
    >>> tuple(block(np.zeros((1, 5, 8), "float32")).shape)
    (1, 5, 8)
    >>> tuple(block(np.zeros((1, 5, 8), "float32"), output_tokens=1).shape)
    (1, 1, 8)
    >>> padding = np.array([[True, True, True, False, False]])
    >>> tuple(block(np.zeros((1, 5, 8), "float32"), attention_mask=padding).shape)
    (1, 5, 8)
    >>> block.qkv_bias, block.get_config()["block_config"]["qkv_bias"]
    (False, False)
    """

    def __init__(self, num_heads, mlp_dim, block_config=None, stochastic_depth_rate=0.0,
                 seed=None, block_index=0, num_kv_heads=None, grid_size=None, **kwargs):
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in BlockConfig.field_names()}
        super().__init__(**kwargs)
        self.grid_size = None if grid_size is None else pair(grid_size, "grid_size")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.block_index = check_int(block_index, "block_index", minimum=0)
        self.num_kv_heads = check_positive_int(num_kv_heads, "num_kv_heads", allow_none=True)
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        self.block_config = BlockConfig.from_arguments(block_config, **options)
        self.stochastic_depth_rate = check_rate(stochastic_depth_rate, "stochastic_depth_rate")
        self.seed = check_seed(seed)
        if self.stochastic_depth_rate > 0:
            if self.block_config.remat:
                raise ValueError(
                    "`remat=True` needs `stochastic_depth_rate=0` (the recomputed forward "
                    "pass would draw other masks). Received: "
                    f"stochastic_depth_rate={self.stochastic_depth_rate}"
                )
            self.seed_generator = keras.random.SeedGenerator(derive_seed(self.seed, "drop_path"))

    def build(self, input_shape):
        dim = input_shape[-1]
        head_size = head_width(dim, self.num_heads, "hidden_size")
        config = self.block_config
        self.norm_0 = block_norm(config, "LayerNorm_0", dtype=self.dtype_policy)
        self.attention = MultiHeadSelfAttention.for_block(
            config,
            self.num_heads,
            head_size,
            block_index=self.block_index,
            num_kv_heads=self.num_kv_heads,
            seed=derive_seed(self.seed, "attention"),
            grid_size=self.grid_size,
            dtype=self.dtype_policy,
            name="MultiHeadDotProductAttention_1",
        )
        # A parallel block's MLP reads the attention's norm.
        self.norm_2 = None if config.parallel else block_norm(config, "LayerNorm_2", dtype=self.dtype_policy)
        self.mlp = (SwiGluMlp if config.mlp_kind == "swiglu" else MlpBlock).for_block(
            config,
            self.mlp_dim,
            seed=derive_seed(self.seed, "mlp"),
            dtype=self.dtype_policy,
            name="MlpBlock_3",
        )
        for layer in (self.norm_0, self.attention, self.norm_2, self.mlp):
            if layer is not None:
                layer.build(input_shape)
        self.dropout = keras.layers.Dropout(
            config.dropout_rate, seed=derive_seed(self.seed, "dropout"), dtype=self.dtype_policy
        )
        self.attention_scale = self.mlp_scale = None
        if config.layer_scale_init is not None:
            init = keras.initializers.Constant(config.layer_scale_init)
            self.attention_scale = self.add_weight(name="attention_scale", shape=(dim,), initializer=init)
            self.mlp_scale = self.add_weight(name="mlp_scale", shape=(dim,), initializer=init)
        self.built = True

    def _scale(self, y, scale):
        return y if scale is None else y * ops.cast(scale, self.compute_dtype)

    def _drop_path(self, x, training):
        if not training or self.stochastic_depth_rate == 0:
            return x
        keep = 1.0 - self.stochastic_depth_rate
        noise = keras.random.uniform(
            (ops.shape(x)[0], 1, 1), seed=self.seed_generator, dtype=x.dtype
        )
        return x * ops.floor(keep + noise) / keep

    @property
    def uses_grid(self):
        """Whether the call needs the tokens' `grid` (windows or relative positions)."""
        config = self.block_config
        return config.window_size is not None or config.relative_position == "decomposed"

    def call(self, x, training=None, output_tokens=None, attention_mask=None, rope=None, grid=None):
        if training and self.block_config.remat:
            return keras.remat(
                lambda x: self._forward(x, training, output_tokens, attention_mask, rope, grid)
            )(x)
        return self._forward(x, training, output_tokens, attention_mask, rope, grid)

    def _attend(self, y, training, output_tokens, attention_mask, rope, grid):
        """The attention branch, within windows where the block has them."""
        if not self.uses_grid:
            return call_sublayer(
                self.attention, y, training=training, query_tokens=output_tokens,
                attention_mask=attention_mask, rope=rope,
            )
        if grid is None:
            raise ValueError(
                f"Block {self.name!r} attends in windows or with relative positions: its call takes the "
                "patch tokens' `grid`."
            )
        hw = static_grid(grid)
        window = self.block_config.window_size
        if window is None:
            return call_sublayer(self.attention, y, training=training, rope=rope, grid=hw)
        windows, padded = window_partition(y, hw, window)
        y = call_sublayer(self.attention, windows, training=training, rope=rope, grid=(window, window))
        return window_merge(y, hw, padded, window)

    def _forward(self, x, training, output_tokens=None, attention_mask=None, rope=None, grid=None):
        # The sublayers through `call_sublayer`: on torch's eager path Keras'
        # `__call__` bookkeeping costs more than a small sublayer computes.
        config = self.block_config
        post = config.norm_position == "post"
        normed = x if post else call_sublayer(self.norm_0, x)
        y = self._attend(normed, training, output_tokens, attention_mask, rope, grid)
        if post:
            y = call_sublayer(self.norm_0, y)
        y = call_sublayer(self.dropout, y, training=training)
        if output_tokens is not None:
            # Only these tokens' residual stream goes on; the others were
            # needed for their keys and values alone.
            x, normed = x[:, :output_tokens], normed[:, :output_tokens]
        if config.parallel:
            m = call_sublayer(self.mlp, normed, training=training)
            branches = self._scale(y, self.attention_scale) + self._scale(m, self.mlp_scale)
            return x + self._drop_path(branches, training)
        x = x + self._drop_path(self._scale(y, self.attention_scale), training)
        y = call_sublayer(self.mlp, x if post else call_sublayer(self.norm_2, x), training=training)
        if post:
            y = call_sublayer(self.norm_2, y)
        return x + self._drop_path(self._scale(y, self.mlp_scale), training)

    def attention_probs(self, x, attention_mask=None, rope=None):
        """The block's attention probabilities for input `x` (float32)."""
        normed = x if self.block_config.norm_position == "post" else self.norm_0(x)
        return self.attention.attention_probs(normed, attention_mask=attention_mask, rope=rope)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(self, x, training=None, output_tokens=None, attention_mask=None, rope=None,
                            grid=None):
        return keras.KerasTensor(tokens_shape(x.shape, output_tokens), dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "block_config": self.block_config.get_config(),
                "stochastic_depth_rate": self.stochastic_depth_rate,
                "seed": self.seed,
                "block_index": self.block_index,
                "num_kv_heads": self.num_kv_heads,
                "grid_size": self.grid_size,
            }
        )
        return config
