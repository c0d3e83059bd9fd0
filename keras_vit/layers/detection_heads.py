"""The heads of an open-vocabulary detector (OWL-ViT, OWLv2): a box, a class
embedding and an objectness score per patch token, and the scores of those
class embeddings against queries.

Minderer et al., "Simple Open-Vocabulary Object Detection with Vision
Transformers", ECCV 2022, arXiv:2205.06230; "Scaling Open-Vocabulary Object
Detection", NeurIPS 2023, arXiv:2306.09683.
"""

import keras
import numpy as np
from keras import ops

from keras_vit import kernels

from keras_vit.validation import check_bool, check_positive_float, check_positive_int, pair

# Added to each norm before dividing, as the reference class head does (it
# keeps a zero embedding finite).
NORM_EPSILON = 1e-6
# Keeps the box bias finite at the grid's edges (the reference's 1e-4).
_BIAS_EPSILON = 1e-4


def _logit(part, whole):
    """The logit of `part / whole` as OWL-ViT's head takes it (`_BIAS_EPSILON`
    added on both sides), with `1 - part / whole` as `(whole - part) /
    whole`: exact in float32 where `log1p(-x)` near 1 is not."""
    return ops.log(part / whole + _BIAS_EPSILON) - ops.log((whole - part) / whole + _BIAS_EPSILON)


def box_bias(grid):
    """The bias added to the box head's output before its sigmoid: each
    patch's box starts centred on the patch's bottom-right corner, one patch
    wide, in the logit of `[0, 1]` image coordinates.

    Args:
        grid: `(height, width)` of the patch grid.

    Returns:
        float32 `(height * width, 4)`: `(cx, cy, w, h)` logits, row by row,
        computed by `keras.ops` (no host array in a traced call).

    Example:

    >>> bias = keras.ops.convert_to_numpy(box_bias((2, 2)))
    >>> bias.shape, bool(np.allclose(1 / (1 + np.exp(-bias[0])), [0.5, 0.5, 0.5, 0.5], atol=1e-3))
    ((4, 4), True)
    """
    height, width = pair(grid, "grid")
    x = _logit(ops.arange(1, width + 1, dtype="float32"), float(width))
    y = _logit(ops.arange(1, height + 1, dtype="float32"), float(height))
    centres = ops.stack([ops.tile(x[None, :], (height, 1)), ops.tile(y[:, None], (1, width))], axis=-1)
    one = ops.ones((), "float32")
    sizes = ops.stack([_logit(one, float(width)), _logit(one, float(height))])
    count = height * width
    return ops.concatenate([ops.reshape(centres, (count, 2)), ops.broadcast_to(sizes, (count, 2))], axis=-1)


def unit(x):
    """`x / (|x| + 1e-6)` over the last axis: the class head's normalisation."""
    return x / (ops.sqrt(ops.sum(ops.square(x), axis=-1, keepdims=True)) + NORM_EPSILON)


@keras.saving.register_keras_serializable(package="keras_vit")
class DetectionHeads(keras.layers.Layer):
    """OWL-ViT's heads on a vision tower's tokens.

    Each patch token is multiplied by the class token and normed
    (`layer_norm`); from it a class embedding (`class_embedding`, to the
    query width), a logit shift and scale (`logit_shift`, `logit_scale`:
    `elu(.) + 1`), a box (an MLP `box_{0,1,2}` with exact GELUs, plus
    `box_bias`, through a sigmoid: `(cx, cy, w, h)` in `[0, 1]`) and, for
    OWLv2, an objectness logit (an MLP `objectness_{0,1,2}`).

    Args:
        query_dim: int, the width of the class embeddings (the text tower's
            width, which the queries are projected to).
        patch_size: int or `(height, width)`: the vision tower's patch size,
            which turns the images' size into the patch grid.
        objectness: bool, default False: OWLv2's objectness head.
        layer_norm_epsilon: float, default 1e-5.

    Call arguments:
        tokens: `(batch, 1 + h * w, D)`: the class token, then the patch
            tokens row by row, after the tower's final norm.
        images: the `(batch, H, W, C)` images they come from (their grid is
            `H // ph, W // pw`; static sizes).

    Returns:
        A dict: "class_embeddings" `(batch, h * w, query_dim)` (not
        normalised), "logit_shift" and "logit_scale" `(batch, h * w, 1)`,
        "pred_boxes" `(batch, h * w, 4)`, and with `objectness`
        "objectness_logits" `(batch, h * w)`.

    Example:

    >>> heads = DetectionHeads(query_dim=6, patch_size=8, objectness=True)
    >>> out = heads(np.zeros((2, 5, 16), "float32"), np.zeros((2, 16, 16, 3), "float32"))
    >>> {k: tuple(v.shape) for k, v in sorted(out.items())}["pred_boxes"]
    (2, 4, 4)
    """

    def __init__(self, query_dim, patch_size, objectness=False, layer_norm_epsilon=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.query_dim = check_positive_int(query_dim, "query_dim")
        self.patch_size = pair(patch_size, "patch_size")
        self.objectness = check_bool(objectness, "objectness")
        self.layer_norm_epsilon = check_positive_float(layer_norm_epsilon, "layer_norm_epsilon")

    def _dense(self, units, name, shape):
        layer = keras.layers.Dense(units, name=name, dtype=self.dtype_policy)
        layer.build(shape)
        return layer

    def build(self, tokens_shape, images_shape=None):
        width = tokens_shape[-1]
        shape = (None, None, width)
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="layer_norm", dtype=self.dtype_policy
        )
        self.layer_norm.build(shape)
        self.class_embedding = self._dense(self.query_dim, "class_embedding", shape)
        self.logit_shift = self._dense(1, "logit_shift", shape)
        self.logit_scale = self._dense(1, "logit_scale", shape)
        self.box = [self._dense(n, f"box_{i}", shape) for i, n in enumerate((width, width, 4))]
        self.objectness_mlp = (
            [self._dense(n, f"objectness_{i}", shape) for i, n in enumerate((width, width, 1))]
            if self.objectness else []
        )
        self.built = True

    def grid(self, images_shape):
        """The patch grid `(h, w)` of images of static shape `images_shape`."""
        height, width = images_shape[1], images_shape[2]
        if height is None or width is None:
            raise ValueError(
                f"Layer {self.name!r} needs the images' height and width to place its boxes. "
                f"Received: images of shape {tuple(images_shape)}"
            )
        return height // self.patch_size[0], width // self.patch_size[1]

    @staticmethod
    def _mlp(layers, x):
        for layer in layers[:-1]:
            x = kernels.activation(layer(x), "gelu")
        return layers[-1](x)

    def call(self, tokens, images):
        # Each patch token times the class token (OWL-ViT's merge).
        features = self.layer_norm(tokens[:, 1:] * tokens[:, :1])
        bias = ops.cast(box_bias(self.grid(images.shape)), features.dtype)
        out = {
            "class_embeddings": self.class_embedding(features),
            "logit_shift": self.logit_shift(features),
            "logit_scale": ops.elu(self.logit_scale(features)) + 1.0,
            "pred_boxes": ops.sigmoid(self._mlp(self.box, features) + bias),
        }
        if self.objectness:
            out["objectness_logits"] = self._mlp(self.objectness_mlp, features)[..., 0]
        return out

    def compute_output_spec(self, tokens, images):
        height, width = self.grid(images.shape)
        batch, count = tokens.shape[0], height * width
        spec = lambda *shape: keras.KerasTensor((batch, count) + shape, dtype=self.compute_dtype)  # noqa: E731
        out = {"class_embeddings": spec(self.query_dim), "logit_shift": spec(1), "logit_scale": spec(1),
               "pred_boxes": spec(4)}
        if self.objectness:
            out["objectness_logits"] = keras.KerasTensor((batch, count), dtype=self.compute_dtype)
        return out

    def get_config(self):
        config = super().get_config()
        config.update({"query_dim": self.query_dim, "patch_size": self.patch_size,
                       "objectness": self.objectness, "layer_norm_epsilon": self.layer_norm_epsilon})
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class QueryLogits(keras.layers.Layer):
    """The class logits of patch class embeddings against query embeddings:
    `(cos(patch, query) + shift) * scale` (OWL-ViT's class head, its norms
    `x / (|x| + 1e-6)`).

    Args:
        num_queries: None (default: the queries come with each call) or an
            int: the layer holds that many fixed queries (weight `queries`,
            `(num_queries, query_dim)`, not trained), so that a detector of
            fixed classes takes images alone.
        query_dim: with `num_queries`, the queries' width.

    Call arguments:
        inputs: `[class_embeddings (batch, patches, D), logit_shift,
            logit_scale (batch, patches, 1)]`, plus `queries (batch,
            queries, D)` without `num_queries`.

    Returns:
        `(batch, patches, queries)` logits.

    Example:

    >>> fixed = QueryLogits(num_queries=2, query_dim=3)
    >>> fixed.build(None)
    >>> _ = fixed.queries.assign(np.eye(2, 3))
    >>> x = [np.eye(3)[None], np.zeros((1, 3, 1)), np.ones((1, 3, 1))]
    >>> np.round(keras.ops.convert_to_numpy(fixed(x))[0], 4).tolist()
    [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]
    """

    def __init__(self, num_queries=None, query_dim=None, **kwargs):
        super().__init__(**kwargs)
        self.num_queries = check_positive_int(num_queries, "num_queries", allow_none=True)
        if self.num_queries is not None:
            query_dim = check_positive_int(query_dim, "query_dim")
        self.query_dim = query_dim

    def build(self, input_shape):
        if self.num_queries is not None:
            self.queries = self.add_weight(
                name="queries", shape=(self.num_queries, self.query_dim), initializer="zeros", trainable=False
            )
        self.built = True

    def call(self, inputs):
        embeddings, shift, scale = inputs[:3]
        if self.num_queries is None:
            logits = ops.einsum("bpd,bqd->bpq", unit(embeddings), unit(inputs[3]))
        else:
            queries = ops.cast(self.queries, embeddings.dtype)
            logits = ops.einsum("bpd,qd->bpq", unit(embeddings), unit(queries))
        return (logits + shift) * scale

    def compute_output_shape(self, input_shape):
        count = self.num_queries if self.num_queries is not None else input_shape[3][1]
        return tuple(input_shape[0][:2]) + (count,)

    def get_config(self):
        config = super().get_config()
        config.update({"num_queries": self.num_queries, "query_dim": self.query_dim})
        return config
