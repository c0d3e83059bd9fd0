"""EoMT's head: learned queries joined to a ViT's last blocks, and the mask
and class predictions read from them (`QueryTokens`, `EomtHead`).

"Your ViT is Secretly an Image Segmentation Model" (Kerssies et al. 2025,
arXiv:2503.19108): `num_queries` learned tokens are put before the class
token for the last blocks of a plain ViT. After the final norm each query
gives class logits (a Dense to `classes + 1`, the last "no object") and a
mask embedding (an MLP of three Dense layers with GELU between); the patch
tokens, laid on their grid, are upscaled `num_upscale_blocks` times by 2
(each a transposed 2x2 convolution, GELU, a depthwise 3x3 convolution
without bias and a channel LayerNorm); each query's mask logits are the dot
products of its embedding with the upscaled map. The maps are NHWC.
"""

import keras
from keras import ops

from keras_vit import kernels

from keras_vit.layers.resize import spatial_size
from keras_vit.validation import check_int, check_positive_int

NHWC = "channels_last"


@keras.saving.register_keras_serializable(package="keras_vit")
class QueryTokens(keras.layers.Layer):
    """Learned query tokens put before a token sequence (weight `queries`).

    Args:
        num_queries: int, the number of queries.

    Example:

    >>> import numpy as np
    >>> tuple(QueryTokens(3)(np.zeros((2, 5, 4), "float32")).shape)
    (2, 8, 4)
    """

    def __init__(self, num_queries, **kwargs):
        super().__init__(**kwargs)
        self.num_queries = check_positive_int(num_queries, "num_queries")

    def build(self, input_shape):
        self.queries = self.add_weight(
            name="queries", shape=(self.num_queries, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=1.0),
        )
        self.built = True

    def call(self, tokens):
        queries = ops.cast(self.queries, tokens.dtype)[None]
        queries = ops.broadcast_to(queries, (ops.shape(tokens)[0],) + tuple(queries.shape[1:]))
        return ops.concatenate([queries, tokens], axis=1)

    def compute_output_shape(self, input_shape):
        count = None if input_shape[1] is None else input_shape[1] + self.num_queries
        return (input_shape[0], count, input_shape[2])

    def get_config(self):
        config = super().get_config()
        config["num_queries"] = self.num_queries
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class EomtHead(keras.layers.Layer):
    """EoMT's mask and class predictions from normalised tokens.

    Called on `[tokens, grid_like]`: `tokens` `(batch, num_queries +
    prefix + h * w, D)`, the queries first, then `num_prefix_tokens` (class,
    registers), then the patch tokens of a `(h, w)` grid; `grid_like`, any
    `(batch, h, w, ...)` tensor on that grid (the patches): its `(h, w)` is
    the grid, also when only known at run time.

    Args:
        num_queries: int.
        num_classes: int, the classes (the class logits have one more, the
            last "no object").
        num_prefix_tokens: int, the tokens between the queries and the
            patches.
        num_upscale_blocks: int, default 2: each doubles the patch grid
            (masks at `2**num_upscale_blocks` times the grid).
        mask_probabilities: None (default) or one number per block that
            carries the queries: the probability that a query's attention
            is masked by its previous prediction there, held as the
            non-trainable weight `mask_probabilities` (transformers'
            `attn_mask_probs`; a training schedule lowers it).

    Returns:
        `[mask logits (batch, queries, 2**k h, 2**k w), class logits
        (batch, queries, num_classes + 1)]`.

    Example:

    >>> import numpy as np
    >>> head = EomtHead(num_queries=3, num_classes=4, num_prefix_tokens=1)
    >>> masks, classes = head([np.zeros((2, 3 + 1 + 6, 8), "float32"), np.zeros((2, 2, 3, 1), "float32")])
    >>> tuple(masks.shape), tuple(classes.shape)
    ((2, 3, 8, 12), (2, 3, 5))
    """

    def __init__(self, num_queries, num_classes, num_prefix_tokens, num_upscale_blocks=2, mask_probabilities=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.mask_probabilities = None if mask_probabilities is None else [float(p) for p in mask_probabilities]
        self.num_queries = check_positive_int(num_queries, "num_queries")
        self.num_classes = check_positive_int(num_classes, "num_classes")
        self.num_prefix_tokens = check_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
        self.num_upscale_blocks = check_int(num_upscale_blocks, "num_upscale_blocks", minimum=0)

    def build(self, input_shape):
        dim = input_shape[0][-1]
        dtype = self.dtype_policy
        self.class_predictor = keras.layers.Dense(self.num_classes + 1, name="class_predictor", dtype=dtype)
        self.class_predictor.build((None, dim))
        self.mask_mlp = []
        for i in range(3):
            layer = keras.layers.Dense(dim, name=f"mask_mlp_{i}", dtype=dtype)
            layer.build((None, dim))
            self.mask_mlp.append(layer)
        self.upscale_transposed, self.upscale_depthwise, self.upscale_norms = [], [], []
        for i in range(self.num_upscale_blocks):
            transposed = keras.layers.Conv2DTranspose(
                dim, 2, strides=2, padding="valid", data_format=NHWC, name=f"upscale_{i}_transposed", dtype=dtype
            )
            transposed.build((None, None, None, dim))
            depthwise = keras.layers.DepthwiseConv2D(
                3, padding="same", use_bias=False, data_format=NHWC, name=f"upscale_{i}_depthwise", dtype=dtype
            )
            depthwise.build((None, None, None, dim))
            norm = keras.layers.LayerNormalization(epsilon=1e-6, name=f"upscale_{i}_norm", dtype=dtype)
            norm.build((None, None, None, dim))
            self.upscale_transposed.append(transposed)
            self.upscale_depthwise.append(depthwise)
            self.upscale_norms.append(norm)
        self.mask_probability = None
        if self.mask_probabilities:
            self.mask_probability = self.add_weight(
                name="mask_probabilities", shape=(len(self.mask_probabilities),), trainable=False,
                initializer=keras.initializers.Constant(self.mask_probabilities),
            )
        self.built = True

    def mask_embeddings(self, queries):
        """The queries' mask embeddings `(batch, queries, D)`."""
        x = queries
        for i, layer in enumerate(self.mask_mlp):
            x = layer(x)
            if i < len(self.mask_mlp) - 1:
                x = kernels.gelu(x, approximate=False)
        return x

    def upscale(self, grid_map):
        """The patch map `(batch, h, w, D)` upscaled `num_upscale_blocks` times by 2."""
        x = grid_map
        for transposed, depthwise, norm in zip(self.upscale_transposed, self.upscale_depthwise, self.upscale_norms):
            x = kernels.gelu(kernels.call_sublayer(transposed, x), approximate=False)
            x = norm(kernels.call_sublayer(depthwise, x))
        return x

    def call(self, inputs):
        tokens, grid_like = inputs
        grid = spatial_size(grid_like)
        queries = tokens[:, : self.num_queries]
        class_logits = self.class_predictor(queries)
        patches = tokens[:, self.num_queries + self.num_prefix_tokens :]
        grid_map = ops.reshape(patches, (-1, grid[0], grid[1], tokens.shape[-1]))
        masks = ops.einsum("bqc,bhwc->bqhw", self.mask_embeddings(queries), self.upscale(grid_map))
        return [masks, class_logits]

    def compute_output_spec(self, inputs):
        tokens, grid_like = inputs
        scale = 2**self.num_upscale_blocks
        size = [g * scale if isinstance(g, int) else None for g in grid_like.shape[1:3]]
        batch = tokens.shape[0]
        return [
            keras.KerasTensor((batch, self.num_queries, *size), dtype=self.compute_dtype),
            keras.KerasTensor((batch, self.num_queries, self.num_classes + 1), dtype=self.compute_dtype),
        ]

    def get_config(self):
        config = super().get_config()
        config.update(
            num_queries=self.num_queries, num_classes=self.num_classes,
            num_prefix_tokens=self.num_prefix_tokens, num_upscale_blocks=self.num_upscale_blocks,
            mask_probabilities=self.mask_probabilities,
        )
        return config


__all__ = ["EomtHead", "QueryTokens"]
