"""SAM's mask decoder: a two-way transformer between prompt tokens and image
tokens, then masks from the upscaled image tokens and per-mask quality.

Kirillov et al., "Segment Anything", ICCV 2023, arXiv:2304.02643.
"""

import math

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.validation import check_positive_float, check_positive_int, head_width


def _dense(units, name, dtype, width):
    layer = keras.layers.Dense(units, name=name, dtype=dtype)
    layer.build((None, width))
    return layer


def _norm(name, epsilon, dtype, width):
    layer = keras.layers.LayerNormalization(epsilon=epsilon, name=name, dtype=dtype)
    layer.build((None, width))
    return layer


def _mlp(layers, x, last_activation=False):
    for i, layer in enumerate(layers):
        x = layer(x)
        if i < len(layers) - 1 or last_activation:
            x = ops.relu(x)
    return x


@keras.saving.register_keras_serializable(package="keras_vit")
class PromptAttention(keras.layers.Layer):
    """Attention from queries to keys and values projected to `width`
    (SAM's: the image-side attentions at half the width), heads over it.

    Args:
        num_heads: int.
        width: int, the projections' width (divisible by `num_heads`).

    Call arguments:
        query, key, value: `(batch, tokens, D)` (key and value of one count).

    Returns:
        `(batch, query tokens, D)`.

    Example:

    >>> import numpy as np
    >>> layer = PromptAttention(num_heads=2, width=4)
    >>> tuple(layer(np.ones((1, 3, 8)), np.ones((1, 5, 8)), np.ones((1, 5, 8))).shape)
    (1, 3, 8)
    """

    def __init__(self, num_heads, width, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.width = check_positive_int(width, "width")
        self.head_dim = head_width(width, num_heads, "width")

    def build(self, query_shape, key_shape=None, value_shape=None):
        dim = query_shape[-1]
        for name in ("query", "key", "value"):
            setattr(self, name, _dense(self.width, name, self.dtype_policy, dim))
        self.out = _dense(dim, "out", self.dtype_policy, self.width)
        self.built = True

    def _heads(self, layer, x):
        x = kernels.project(layer, x)
        return ops.reshape(x, (-1, x.shape[1] if x.shape[1] is not None else ops.shape(x)[1], self.num_heads,
                               self.head_dim))

    def call(self, query, key, value):
        q, k, v = self._heads(self.query, query), self._heads(self.key, key), self._heads(self.value, value)
        context = kernels.attention(q, k, v, scale=1.0 / math.sqrt(self.head_dim))
        shape = ops.shape(context)
        return kernels.project(self.out, ops.reshape(context, (-1, shape[1], self.width)))

    def compute_output_shape(self, query_shape, key_shape=None, value_shape=None):
        return tuple(query_shape)

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "width": self.width})
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class TwoWayBlock(keras.layers.Layer):
    """One block of SAM's two-way transformer: the prompt tokens attend to
    themselves (`self_attention`, `norm_1`), to the image tokens
    (`token_to_image`, `norm_2`), pass an MLP (`mlp_0`, `mlp_1`, ReLU;
    `norm_3`), and the image tokens attend to them (`image_to_token`,
    `norm_4`); positional embeddings are added to queries and keys, not to
    values (post-norm residuals).

    Args:
        num_heads, mlp_dim: ints.
        downsample_rate: int, default 2: the image-side attentions' width
            is the tokens' divided by it.
        skip_first_position: bool, default False: the self-attention
            replaces the tokens, without their positional embedding (SAM's
            first block).
        layer_norm_epsilon: float, default 1e-6.

    Call arguments:
        tokens: `(batch, n, D)` prompt tokens; image: `(batch, hw, D)`;
        token_positions, image_positions: their positional embeddings.

    Returns:
        `(tokens, image)`, updated.
    """

    def __init__(self, num_heads, mlp_dim, downsample_rate=2, skip_first_position=False, layer_norm_epsilon=1e-6,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        self.downsample_rate = check_positive_int(downsample_rate, "downsample_rate")
        self.skip_first_position = bool(skip_first_position)
        self.layer_norm_epsilon = check_positive_float(layer_norm_epsilon, "layer_norm_epsilon")

    def build(self, tokens_shape, image_shape=None, token_positions_shape=None, image_positions_shape=None):
        dim, dtype = tokens_shape[-1], self.dtype_policy
        narrow = dim // self.downsample_rate
        self.self_attention = PromptAttention(self.num_heads, dim, name="self_attention", dtype=dtype)
        self.token_to_image = PromptAttention(self.num_heads, narrow, name="token_to_image", dtype=dtype)
        self.image_to_token = PromptAttention(self.num_heads, narrow, name="image_to_token", dtype=dtype)
        for layer in (self.self_attention, self.token_to_image, self.image_to_token):
            layer.build((None, None, dim))
        self.mlp = [_dense(self.mlp_dim, "mlp_0", dtype, dim), _dense(dim, "mlp_1", dtype, self.mlp_dim)]
        self.norms = [_norm(f"norm_{i}", self.layer_norm_epsilon, dtype, dim) for i in range(1, 5)]
        self.built = True

    def call(self, tokens, image, token_positions, image_positions):
        if self.skip_first_position:
            tokens = self.self_attention(tokens, tokens, tokens)
        else:
            query = tokens + token_positions
            tokens = tokens + self.self_attention(query, query, tokens)
        tokens = self.norms[0](tokens)
        keys = image + image_positions
        tokens = self.norms[1](tokens + self.token_to_image(tokens + token_positions, keys, image))
        tokens = self.norms[2](tokens + _mlp(self.mlp, tokens))
        image = self.norms[3](image + self.image_to_token(keys, tokens + token_positions, tokens))
        return tokens, image

    def compute_output_spec(self, tokens, image, token_positions, image_positions):
        return (keras.KerasTensor(tokens.shape, dtype=self.compute_dtype),
                keras.KerasTensor(image.shape, dtype=self.compute_dtype))

    def get_config(self):
        config = super().get_config()
        config.update({"num_heads": self.num_heads, "mlp_dim": self.mlp_dim, "downsample_rate": self.downsample_rate,
                       "skip_first_position": self.skip_first_position,
                       "layer_norm_epsilon": self.layer_norm_epsilon})
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskDecoder(keras.layers.Layer):
    """SAM's mask decoder.

    An IoU token and `num_multimask_outputs + 1` mask tokens (weights
    `iou_token`, `mask_tokens`) are put before the sparse prompt
    embeddings; with the image embedding plus the dense prompt embedding
    they pass `num_layers` `TwoWayBlock`s (`two_way_{i}`), a last attention
    from the tokens to the image (`final_attention`) and a LayerNorm
    (`final_norm`, epsilon 1e-5). The image tokens are upscaled four times
    by two 2 x 2 stride-2 transposed convolutions (`upscale_0`, a LayerNorm
    `upscale_norm` and GELU, `upscale_1` and GELU); each mask token through
    its MLP (`hyper_{k}_{0,1,2}`) gives the weights of its mask over
    their channels, and the IoU token through `iou_head_{i}` the
    predicted quality of each mask.

    Args:
        num_layers, num_heads, mlp_dim: the two-way transformer's depth,
            heads and MLP width (SAM's 2, 8, 2048).
        num_multimask_outputs: int, default 3.
        iou_head_depth, iou_head_hidden_dim: the IoU head's layers and width.
        downsample_rate: int, default 2: the image-side attentions' width
            divisor.
        layer_norm_epsilon: float, default 1e-6.

    Call arguments:
        image: `(batch, gh, gw, D)` image embeddings (dense prompt added);
        image_positions: `(1 or batch, gh, gw, D)`;
        sparse: `(batch, n, D)` sparse prompt embeddings.

    Returns:
        `(masks (batch, masks, 4 gh, 4 gw), iou_scores (batch, masks))`, every
        mask: the single-mask output first, then the `num_multimask_outputs`.
    """

    def __init__(self, num_layers=2, num_heads=8, mlp_dim=2048, num_multimask_outputs=3, iou_head_depth=3,
                 iou_head_hidden_dim=256, downsample_rate=2, layer_norm_epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.num_layers = check_positive_int(num_layers, "num_layers")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        self.num_multimask_outputs = check_positive_int(num_multimask_outputs, "num_multimask_outputs")
        self.iou_head_depth = check_positive_int(iou_head_depth, "iou_head_depth")
        self.iou_head_hidden_dim = check_positive_int(iou_head_hidden_dim, "iou_head_hidden_dim")
        self.downsample_rate = check_positive_int(downsample_rate, "downsample_rate")
        self.layer_norm_epsilon = check_positive_float(layer_norm_epsilon, "layer_norm_epsilon")

    @property
    def num_masks(self):
        """Masks per prompt: the single-mask output and the multimask ones."""
        return self.num_multimask_outputs + 1

    def build(self, image_shape, image_positions_shape=None, sparse_shape=None):
        dim, dtype = image_shape[-1], self.dtype_policy
        if dim % 8:
            raise ValueError(f"The image embedding's width must be divisible by 8 (the upscaling). Received: {dim}")
        self.iou_token = self.add_weight(name="iou_token", shape=(1, dim), initializer="zeros")
        self.mask_tokens = self.add_weight(name="mask_tokens", shape=(self.num_masks, dim), initializer="zeros")
        self.blocks = []
        for i in range(self.num_layers):
            block = TwoWayBlock(self.num_heads, self.mlp_dim, self.downsample_rate, skip_first_position=i == 0,
                                layer_norm_epsilon=self.layer_norm_epsilon, name=f"two_way_{i}", dtype=dtype)
            block.build((None, None, dim))
            self.blocks.append(block)
        self.final_attention = PromptAttention(self.num_heads, dim // self.downsample_rate, name="final_attention",
                                               dtype=dtype)
        self.final_attention.build((None, None, dim))
        self.final_norm = _norm("final_norm", 1e-5, dtype, dim)
        # A 2 x 2 stride-2 transposed convolution is one product per input cell.
        self.upscale_0 = _dense(4 * (dim // 4), "upscale_0", dtype, dim)
        self.upscale_norm = _norm("upscale_norm", 1e-6, dtype, dim // 4)
        self.upscale_1 = _dense(4 * (dim // 8), "upscale_1", dtype, dim // 4)
        widths = (dim, dim, dim // 8)
        self.hyper = [[_dense(w, f"hyper_{k}_{i}", dtype, dim) for i, w in enumerate(widths)]
                      for k in range(self.num_masks)]
        widths = (self.iou_head_hidden_dim,) * (self.iou_head_depth - 1) + (self.num_masks,)
        inputs = (dim,) + widths[:-1]
        self.iou_head = [_dense(w, f"iou_head_{i}", dtype, n) for i, (w, n) in enumerate(zip(widths, inputs))]
        self.built = True

    @staticmethod
    def _upscale(layer, x):
        """A 2 x 2 stride-2 transposed convolution of `(batch, h, w, C)`."""
        height, width = x.shape[1], x.shape[2]
        y = layer(x)
        channels = y.shape[-1] // 4
        y = ops.reshape(y, (-1, height, width, 2, 2, channels))
        y = ops.transpose(y, (0, 1, 3, 2, 4, 5))
        return ops.reshape(y, (-1, 2 * height, 2 * width, channels))

    def _transformer(self, tokens, image, image_positions):
        height, width, dim = image.shape[1], image.shape[2], image.shape[3]
        image = ops.reshape(image, (-1, height * width, dim))
        positions = ops.reshape(image_positions, (-1, height * width, dim))
        queries = tokens
        for block in self.blocks:
            queries, image = block(queries, image, tokens, positions)
        keys = image + positions
        queries = self.final_norm(queries + self.final_attention(queries + tokens, keys, image))
        return queries, ops.reshape(image, (-1, height, width, dim))

    def call(self, image, image_positions, sparse):
        dtype = image.dtype
        outputs = ops.concatenate([ops.cast(self.iou_token, dtype), ops.cast(self.mask_tokens, dtype)], axis=0)
        outputs = ops.broadcast_to(outputs[None], (ops.shape(sparse)[0],) + tuple(outputs.shape))
        queries, image = self._transformer(ops.concatenate([outputs, sparse], axis=1), image, image_positions)
        upscaled = kernels.activation(self.upscale_norm(self._upscale(self.upscale_0, image)), "gelu")
        upscaled = kernels.activation(self._upscale(self.upscale_1, upscaled), "gelu")
        weights = ops.stack([_mlp(self.hyper[k], queries[:, 1 + k]) for k in range(self.num_masks)], axis=1)
        masks = ops.einsum("bkc,byxc->bkyx", weights, upscaled)
        return masks, _mlp(self.iou_head, queries[:, 0])

    def compute_output_spec(self, image, image_positions, sparse):
        size = tuple(None if s is None else 4 * s for s in image.shape[1:3])
        return (keras.KerasTensor((image.shape[0], self.num_masks) + size, dtype=self.compute_dtype),
                keras.KerasTensor((image.shape[0], self.num_masks), dtype=self.compute_dtype))

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_layers": self.num_layers, "num_heads": self.num_heads, "mlp_dim": self.mlp_dim,
            "num_multimask_outputs": self.num_multimask_outputs, "iou_head_depth": self.iou_head_depth,
            "iou_head_hidden_dim": self.iou_head_hidden_dim, "downsample_rate": self.downsample_rate,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        })
        return config
