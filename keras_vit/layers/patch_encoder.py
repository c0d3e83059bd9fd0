"""`PatchEncoder`: patch projection, prefix tokens and position embedding."""

import math

import keras
from keras import ops

from keras_vit import kernels
from keras_vit.layers.config import POSITION_EMBEDDINGS, VIDEO_POSITION_EMBEDDINGS, BlockConfig
from keras_vit.layers.interpolation import check_family, resize_grid
from keras_vit.layers.native_grids import position_embedding_at
from keras_vit.layers.norms import check_norm_kind, norm_layer
from keras_vit.layers.interpolation import resize_video_grid
from keras_vit.layers.sincos import sincos_position_embedding, sinusoid_position_embedding
from keras_vit.validation import (
    check_bool,
    check_choice,
    check_int,
    check_positive_float,
    check_positive_int,
    pair,
)


def _interpolation_matrix(new, old, dtype):
    """`(new, old)` matrix of corner-aligned linear interpolation weights.

    Corner-aligned linear interpolation is what `scipy.ndimage.zoom(order=1)`
    computes, the resize used by the official ViT fine-tuning code. When
    `new == old` the matrix is exactly the identity. `new` and `old` may be
    Python ints or scalar tensors (unknown sizes in a traced graph).
    """
    old_f = ops.cast(old, "float32")
    new_f = ops.cast(new, "float32")
    step = (old_f - 1.0) / ops.maximum(new_f - 1.0, 1.0)
    src = ops.cast(ops.arange(new), "float32") * step
    low = ops.minimum(ops.floor(src), ops.maximum(old_f - 2.0, 0.0))
    frac = src - low
    low = ops.cast(low, "int32")
    high = ops.minimum(low + 1, ops.cast(old, "int32") - 1)
    weights = ops.one_hot(low, old) * (1.0 - frac)[:, None]
    weights = weights + ops.one_hot(high, old) * frac[:, None]
    return ops.cast(weights, dtype)


def resize_position_grid(grid, new_size):
    """Resizes a `(1, gh, gw, D)` position-embedding grid to `new_size`.

    Corner-aligned bilinear interpolation, equal (up to float rounding) to
    `scipy.ndimage.zoom(grid, (nh / gh, nw / gw, 1), order=1)`, the official
    loader's resize; it runs inside the model, so the same weights serve any
    image size.

    Args:
        grid: tensor of shape `(1, gh, gw, D)`.
        new_size: `(nh, nw)`, ints or scalar tensors.

    Returns:
        A tensor of shape `(1, nh, nw, D)`.
    """
    old_h, old_w = grid.shape[1], grid.shape[2]
    rows = _interpolation_matrix(new_size[0], old_h, grid.dtype)
    cols = _interpolation_matrix(new_size[1], old_w, grid.dtype)
    return ops.einsum("ij,bjkd,lk->bild", rows, grid, cols)


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEncoder(keras.layers.Layer):
    """Embeds a patch grid into tokens (paper eq. 1).

    Projects each flattened patch linearly (the kernel is stored as
    `(ph, pw, C, D)`, the layout of the official convolutional embedding),
    prepends learnable prefix tokens and adds a learnable position embedding.
    The prefix is, in order: the class token, DeiT's distillation token
    (Touvron et al. 2021), each with its own position row before the patch
    rows, then register tokens (Darcet et al. 2024), which have no position
    row (`num_prefix_rows` counts the rows, `num_prefix_tokens` the tokens).

    The position embedding is learned for `grid_size`. When the layer sees a
    different grid (a model built at 224 px given a 384 px image), the patch
    rows are resized on the fly by corner-aligned bilinear interpolation, the
    official fine-tuning code's resize; the prefix rows are kept.

    Args:
        hidden_size: int, the token width `D`.
        patch_size: int or `(ph, pw)`: the patch size the inputs were cut with.
        grid_size: int or `(gh, gw)` (`(gt, gh, gw)` with `tubelet_size`):
            the patch grid the position embedding is learned for.
        class_token: bool, default True. Whether to prepend a class token (and
            give it a position-embedding row).
        distillation_token: bool, default False: a second token after the
            class token, with its own position row (weight `dist`); needs
            `class_token`.
        num_register_tokens: int, default 0: register tokens after the class
            (and distillation) token, without position rows (weight `reg`,
            `(1, num_register_tokens, D)`).
        use_bias: bool, default True: whether the patch projection adds a
            bias (weight `bias`; OpenAI CLIP's embedding has none).
        position_embedding: "learned" (default: weight `pos_embedding`),
            a fixed 2D sin-cos embedding computed for each input's grid, no
            weight: "sincos" (MAE), "sincos_mocov3", "sincos_big_vision"
            (`keras_vit.layers.sincos`; its prefix rows are zeros), or
            "sincos_1d" (VideoMAE's fixed 1D sinusoid table over the token
            index, `keras_vit.layers.sincos.sinusoid_position_embedding`;
            zero prefix rows), or "none" (nothing added: a model whose
            positions come from a rotary embedding alone).
        position_interpolation: default "official": how a learned position
            embedding is resized for another grid, a name of
            `keras_vit.layers.interpolation.POSITION_INTERPOLATIONS` ("vit",
            "clip", "siglip", "dinov2", ... as transformers does for each).
        kernel_initializer, bias_initializer, position_initializer,
        class_token_initializer: initializers of the four weights. The
            distillation and register tokens start from N(0, 0.02): equal
            starts would stay equal under training.
        patch_norm: None (default) or a norm kind of
            `keras_vit.layers.norms.NORMS`: a norm of the patch embeddings
            before the prefix tokens and the position embedding (AIMv2's
            RMSNorm, timm's `embed_norm_layer`; sublayer `norm`).
        patch_norm_epsilon: float, default 1e-6: that norm's epsilon.
        tubelet_size: None (default: image patches) or an int `t`: video
            tubelets of `t` frames (`Patches(tubelet_size=t)`); `grid_size`
            is then `(gt, gh, gw)`, the kernel `(t, ph, pw, C, D)`, the
            patch rows of the position table follow the (time, row,
            column) order, and a learned table is resized in time and
            space (`keras_vit.layers.interpolation.resize_video_grid`).
            Clips take `position_embedding` "learned", "sincos_1d" or "none".

    Input shape:
        `(batch, h, w, ph * pw * C)`, as returned by `Patches`; with
        `tubelet_size`, `(batch, gt, h, w, t * ph * pw * C)`.

    Returns:
        `(batch, num_prefix_tokens + h * w, hidden_size)` (`gt * h * w`
        patch tokens for clips).

    Example:

    >>> import numpy as np
    >>> layer = PatchEncoder(hidden_size=8, patch_size=4, grid_size=2)
    >>> tuple(layer(np.zeros((1, 2, 2, 48), "float32")).shape)
    (1, 5, 8)
    >>> tuple(layer(np.zeros((1, 3, 5, 48), "float32")).shape)
    (1, 16, 8)
    >>> deit = PatchEncoder(8, 4, 2, distillation_token=True, num_register_tokens=3)
    >>> tuple(deit(np.zeros((1, 2, 2, 48), "float32")).shape), deit.num_prefix_rows
    ((1, 9, 8), 2)
    >>> tokens = layer.embed_patches(np.zeros((1, 3, 5, 48), "float32"))
    >>> tuple(tokens.shape), tuple(layer.add_positions(tokens, (3, 5)).shape)
    ((1, 15, 8), (1, 16, 8))
    >>> video = PatchEncoder(8, 4, (2, 2, 2), tubelet_size=2)
    >>> tuple(video(np.zeros((1, 3, 2, 2, 96), "float32")).shape)
    (1, 13, 8)
    """

    def __init__(
        self,
        hidden_size,
        patch_size,
        grid_size,
        class_token=True,
        distillation_token=False,
        num_register_tokens=0,
        use_bias=True,
        position_embedding="learned",
        position_interpolation="official",
        kernel_initializer="lecun_normal",
        bias_initializer="zeros",
        position_initializer=None,
        class_token_initializer="zeros",
        patch_norm=None,
        patch_norm_epsilon=1e-6,
        tubelet_size=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.tubelet_size = check_positive_int(tubelet_size, "tubelet_size", allow_none=True)
        self.patch_norm = None if patch_norm is None else check_norm_kind(patch_norm)
        self.patch_norm_epsilon = check_positive_float(patch_norm_epsilon, "patch_norm_epsilon")
        self.hidden_size = check_positive_int(hidden_size, "hidden_size")
        self.patch_size = pair(patch_size, "patch_size")
        self.grid_size = self._grid_size(grid_size)
        self.class_token = bool(class_token)
        self.distillation_token = check_bool(distillation_token, "distillation_token")
        if self.distillation_token and not self.class_token:
            raise ValueError(
                "`distillation_token` needs a class token before it. Received: "
                "distillation_token=True, class_token=False"
            )
        self.num_register_tokens = check_int(num_register_tokens, "num_register_tokens", minimum=0)
        self.use_bias = check_bool(use_bias, "use_bias")
        self.position_embedding = check_choice(position_embedding, POSITION_EMBEDDINGS, "position_embedding")
        self.position_interpolation = check_family(position_interpolation, "position_interpolation")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.position_initializer = keras.initializers.get(
            position_initializer
            or keras.initializers.RandomNormal(stddev=0.02)
        )
        self.class_token_initializer = keras.initializers.get(
            class_token_initializer
        )
        if self.tubelet_size is not None and self.position_embedding not in VIDEO_POSITION_EMBEDDINGS:
            raise ValueError(
                f"Video tubelets take a position_embedding of {VIDEO_POSITION_EMBEDDINGS} (the 2D sin-cos "
                f"tables lay out one image's grid). Received: position_embedding={self.position_embedding!r}"
            )
        self.input_spec = keras.layers.InputSpec(ndim=4 if self.tubelet_size is None else 5)

    def _grid_size(self, grid_size):
        if self.tubelet_size is None:
            return pair(grid_size, "grid_size")
        items = tuple(grid_size) if isinstance(grid_size, (list, tuple)) else None
        if items is None or len(items) != 3:
            raise ValueError(
                "With `tubelet_size`, `grid_size` is (frames, height, width) of tubelets. "
                f"Received: grid_size={grid_size!r}"
            )
        return (check_positive_int(items[0], "grid_size"),) + pair(items[1:], "grid_size")

    @property
    def cell(self):
        """The input extent of one patch: `(ph, pw)`, or `(t, ph, pw)` for tubelets."""
        return self.patch_size if self.tubelet_size is None else (self.tubelet_size,) + self.patch_size

    @classmethod
    def for_encoder(cls, config, hidden_size, patch_size, grid_size, block_config=None, **kwargs):
        """The embedding of an encoder with `config` (an `EncoderConfig`);
        its patch norm has the kind and epsilon of `block_config` (a
        `BlockConfig`, default the defaults); a video encoder's
        (`num_frames`) takes tubelets, its table on their time axis too."""
        block_config = BlockConfig() if block_config is None else block_config
        if config.num_frames is not None:
            # Clips: the table's grid has the tubelets' time axis first.
            grid_size = (config.num_frames // config.tubelet_size,) + pair(grid_size, "grid_size")
        return cls(
            hidden_size, patch_size, grid_size, use_bias=config.patch_bias,
            position_embedding=config.position_embedding,
            position_interpolation=config.position_interpolation,
            patch_norm=block_config.norm_kind if config.patch_norm else None,
            patch_norm_epsilon=block_config.layer_norm_epsilon,
            tubelet_size=None if config.num_frames is None else config.tubelet_size, **kwargs,
        )

    @property
    def num_prefix_rows(self):
        """Position rows before the patch rows: class and distillation tokens."""
        return int(self.class_token) + int(self.distillation_token)

    @property
    def num_prefix_tokens(self):
        """Tokens before the patch tokens: class, distillation, registers."""
        return self.num_prefix_rows + self.num_register_tokens

    def build(self, input_shape):
        depth = input_shape[-1]
        cell = math.prod(self.cell)
        if depth is None or depth % cell:
            raise ValueError(
                "The last axis of the patches must be ph * pw * channels (times the tubelet size). "
                f"Received: patch depth={depth}, patch_size={self.patch_size}, tubelet_size={self.tubelet_size}"
            )
        self.num_channels = depth // cell
        self.kernel = self.add_weight(
            name="kernel",
            shape=self.cell + (self.num_channels, self.hidden_size),
            initializer=self.kernel_initializer,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=(self.hidden_size,), initializer=self.bias_initializer
            )
        self.class_embedding = self.distillation_embedding = None
        self.register_embeddings = None
        if self.class_token:
            self.class_embedding = self.add_weight(
                name="cls", shape=(1, 1, self.hidden_size), initializer=self.class_token_initializer
            )
        tokens = dict(initializer=keras.initializers.RandomNormal(stddev=0.02))
        if self.distillation_token:
            self.distillation_embedding = self.add_weight(
                name="dist", shape=(1, 1, self.hidden_size), **tokens
            )
        if self.num_register_tokens:
            self.register_embeddings = self.add_weight(
                name="reg", shape=(1, self.num_register_tokens, self.hidden_size), **tokens
            )
        self.pos_embedding = None
        if self.position_embedding == "learned":
            self.pos_embedding = self.add_weight(
                name="pos_embedding",
                shape=(1, self.num_prefix_rows + math.prod(self.grid_size), self.hidden_size),
                initializer=self.position_initializer,
            )
        self.norm = None
        if self.patch_norm is not None:
            self.norm = norm_layer(self.patch_norm, self.patch_norm_epsilon, "norm", dtype=self.dtype_policy)
            self.norm.build((None, None, self.hidden_size))
        self.built = True

    def _broadcast(self, token, batch):
        token = ops.cast(token, self.compute_dtype)
        return ops.broadcast_to(token, (batch,) + tuple(token.shape[1:]))

    def position_embedding_for(self, grid):
        """The position embedding for a `(h, w)` grid (`(t, h, w)` of
        tubelets), resized when needed (None for `position_embedding="none"`)."""
        if self.position_embedding == "none":
            return None
        if self.position_embedding == "sincos_1d":
            length = grid[0]
            for g in grid[1:]:
                length = length * g
            table = sinusoid_position_embedding(length, self.hidden_size, self.num_prefix_rows)
            return ops.cast(table, self.compute_dtype)
        if self.pos_embedding is None:
            style = self.position_embedding.replace("sincos", "").lstrip("_") or "mae"
            table = sincos_position_embedding(grid, self.hidden_size, style, self.num_prefix_rows)
            return ops.cast(table, self.compute_dtype)
        pos = ops.cast(self.pos_embedding, self.compute_dtype)
        same = all(isinstance(g, int) for g in grid) and tuple(grid) == self.grid_size
        if same:
            return pos
        prefix = pos[:, : self.num_prefix_rows]
        patch_rows = pos[:, self.num_prefix_rows :]
        if self.tubelet_size is not None:
            patch_rows = ops.reshape(patch_rows, self.grid_size + (self.hidden_size,))
            patch_rows = resize_video_grid(patch_rows, grid, self.position_interpolation)
        else:
            patch_rows = ops.reshape(patch_rows, (1,) + self.grid_size + (self.hidden_size,))
            patch_rows = resize_grid(patch_rows, grid, self.position_interpolation)
        patch_rows = ops.reshape(patch_rows, (1, -1, self.hidden_size))
        return ops.concatenate([prefix, patch_rows], axis=1)

    def embed_patches(self, patches):
        """Projects each patch to a token: the first half of `call`.

        Args:
            patches: `(batch, h, w, ph * pw * C)`, as returned by `Patches`.

        Returns:
            `(batch, h * w, hidden_size)` patch embeddings in row-major grid
            order, without prefix tokens or position embedding.
        """
        grid = self._grid(patches)
        # The built depth: inside a traced tf.data step the last axis can be unknown.
        depth = math.prod(self.cell) * self.num_channels
        length = grid[0]
        for g in grid[1:]:
            length = length * g
        return self.embed_flat_patches(ops.reshape(patches, (-1, length, depth)))

    def embed_flat_patches(self, patches):
        """Projects patches flattened row-major as `(ph, pw, C)` to tokens.

        Args:
            patches: `(batch, n, ph * pw * C)`, in any order (a NaFlex
                batch's `"patches"`).

        Returns:
            `(batch, n, hidden_size)`.
        """
        kernel = ops.reshape(
            ops.cast(self.kernel, self.compute_dtype), (-1, self.hidden_size)
        )
        bias = None if self.bias is None else ops.cast(self.bias, self.compute_dtype)
        tokens = kernels.dense(ops.cast(patches, self.compute_dtype), kernel, bias)
        return tokens if self.norm is None else self.norm(tokens)

    def add_positions(self, tokens, grid):
        """Prepends the prefix tokens and adds the position embedding.

        The second half of `call`: `call(p)` equals
        `add_positions(embed_patches(p), (h, w))`. Between the two, the patch
        embeddings can be changed (masked patch prediction corrupts them).

        Args:
            tokens: `(batch, h * w, hidden_size)` patch embeddings.
            grid: `(h, w)`, the patch grid of `tokens` (ints or scalar
                tensors); the position embedding is resized to it if needed.

        Returns:
            `(batch, num_prefix_tokens + h * w, hidden_size)`: class and
            distillation tokens, register tokens, then the patch tokens.
        """
        x = tokens
        batch = ops.shape(x)[0]
        prefix = [t for t in (self.class_embedding, self.distillation_embedding) if t is not None]
        if prefix:
            x = ops.concatenate([self._broadcast(t, batch) for t in prefix] + [x], axis=1)
        positions = self.position_embedding_for(grid)
        if positions is not None:
            x = x + positions
        if self.register_embeddings is None:
            return x
        # Registers join after the position embedding: they have no row.
        registers = self._broadcast(self.register_embeddings, batch)
        rows = self.num_prefix_rows
        return ops.concatenate([x[:, :rows], registers, x[:, rows:]], axis=1)

    def add_positions_at(self, tokens, positions, grid_sizes):
        """Prepends the prefix tokens and adds each patch's position embedding
        read at its own image's grid (a NaFlex batch).

        The patch rows of the table are resized to each image's grid as
        transformers' SigLIP 2 does for its `spatial_shapes`
        (`keras_vit.layers.native_grids.position_embedding_at`); the prefix
        tokens keep their rows.

        Args:
            tokens: `(batch, n, hidden_size)` patch embeddings.
            positions: int `(batch, n, 2)`, each patch's (row, column).
            grid_sizes: int `(batch, 2)`, each image's (rows, columns).

        Returns:
            `(batch, num_prefix_tokens + n, hidden_size)`, in `call`'s order.

        Raises:
            ValueError: for a table this layer does not resize per image: a
                fixed sin-cos embedding, or another `position_interpolation`
                than "siglip2".
        """
        if self.pos_embedding is None or self.position_interpolation != "siglip2":
            raise ValueError(
                "Patches on per-image grids need a learned position embedding resized as "
                "SigLIP 2 does (position_embedding='learned', position_interpolation='siglip2'). "
                f"Received: position_embedding={self.position_embedding!r}, "
                f"position_interpolation={self.position_interpolation!r}"
            )
        rows = self.num_prefix_rows
        gh, gw = self.grid_size
        # float32 whatever the compute dtype, as the "siglip2" resize.
        table = ops.reshape(ops.cast(self.pos_embedding, "float32")[0, rows:], (gh, gw, self.hidden_size))
        x = tokens + ops.cast(position_embedding_at(table, positions, grid_sizes), self.compute_dtype)
        batch = ops.shape(x)[0]
        lead = [self._broadcast(t, batch) for t in (self.class_embedding, self.distillation_embedding)
                if t is not None]
        if lead:
            lead = [ops.concatenate(lead, axis=1) + ops.cast(self.pos_embedding[:, :rows], self.compute_dtype)]
        if self.register_embeddings is not None:
            lead.append(self._broadcast(self.register_embeddings, batch))
        return ops.concatenate(lead + [x], axis=1) if lead else x

    def _grid(self, patches):
        static, dynamic = patches.shape, ops.shape(patches)
        return tuple(static[i] if static[i] is not None else dynamic[i] for i in range(1, len(static) - 1))

    def call(self, patches):
        return self.add_positions(self.embed_patches(patches), self._grid(patches))

    def compute_output_shape(self, input_shape):
        batch, *grid, _ = input_shape
        tokens = None if None in grid else math.prod(grid) + self.num_prefix_tokens
        return (batch, tokens, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "hidden_size": self.hidden_size,
                "patch_size": self.patch_size,
                "grid_size": self.grid_size,
                "class_token": self.class_token,
                "distillation_token": self.distillation_token,
                "num_register_tokens": self.num_register_tokens,
                "use_bias": self.use_bias,
                "position_embedding": self.position_embedding,
                "position_interpolation": self.position_interpolation,
                "patch_norm": self.patch_norm,
                "patch_norm_epsilon": self.patch_norm_epsilon,
                "tubelet_size": self.tubelet_size,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(
                    self.bias_initializer
                ),
                "position_initializer": keras.initializers.serialize(
                    self.position_initializer
                ),
                "class_token_initializer": keras.initializers.serialize(
                    self.class_token_initializer
                ),
            }
        )
        return config
