"""`ViT`: the generic Vision Transformer model (Dosovitskiy et al., 2021)."""

import keras

from keras_vit.layers import PatchEncoder, Patches, TokenPooling, TransformerBlock
from keras_vit.layers.utils import (
    check_positive_float,
    check_positive_int,
    check_rate,
    pair,
)

CLASSIFIERS = ("token", "gap")
POOLINGS = (None, "token", "avg", "max")


def _image_size(image_size, input_shape, default):
    """Resolves `(height, width, channels)` from `image_size`/`input_shape`."""
    channels = 3
    if input_shape is not None:
        shape = tuple(input_shape) if isinstance(input_shape, (list, tuple)) else None
        if shape is None or len(shape) != 3:
            raise ValueError(
                "`input_shape` must be a tuple (height, width, channels). "
                f"Received: input_shape={input_shape!r}"
            )
        channels = shape[2]
        if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
            raise ValueError(
                "`input_shape` must end with a positive number of channels. "
                f"Received: input_shape={input_shape!r}"
            )
        from_shape = pair(shape[:2], "input_shape")
        if image_size is not None and pair(image_size, "image_size") != from_shape:
            raise ValueError(
                "`image_size` and `input_shape` disagree. Received: "
                f"image_size={image_size!r}, input_shape={input_shape!r}"
            )
        return from_shape + (channels,)
    size = pair(image_size if image_size is not None else default, "image_size")
    return size + (channels,)


def _check_choice(value, allowed, name):
    if value not in allowed:
        raise ValueError(
            f"`{name}` must be one of {allowed}. Received: {name}={value!r}"
        )
    return value


def _check_activation(value):
    if value is None:
        return None
    try:
        keras.activations.get(value)
    except (ValueError, TypeError):
        raise ValueError(
            "`classifier_activation` must be None (logits), a Keras activation "
            f"name or a callable. Received: classifier_activation={value!r}"
        ) from None
    return value


@keras.saving.register_keras_serializable(package="keras_vit")
class ViT(keras.Model):
    """Vision Transformer (ViT), "An Image is Worth 16x16 Words".

    A functional `keras.Model`: images are cut into patches, embedded with a
    class token and position embedding, passed through `num_layers`
    pre-LayerNorm Transformer blocks and a final LayerNorm, then classified
    from the class token (or the mean of all tokens). Layer names follow the
    official checkpoint (`embedding`, `encoderblock_{i}`, `encoder_norm`,
    `pre_logits`, `head`), so `model.get_layer("encoderblock_3").output`
    gives a feature extractor.

    The model accepts images of any size divisible by the patch size, not only
    `image_size`: the position embedding is resized on the fly.

    Args:
        image_size: int or `(height, width)`, default 224 (or the resolution
            of the named `weights`). The position embedding is learned for it.
        patch_size: int or `(height, width)`, default 16.
        hidden_size: int, token width `D`, default 768.
        num_layers: int, Transformer blocks, default 12.
        num_heads: int, attention heads, default 12; must divide `hidden_size`.
        mlp_dim: int, MLP hidden width, default 3072.
        classifier: "token" (class token, default) or "gap" (no class token,
            mean of all tokens).
        representation_size: None (default) or int: width of the Dense+tanh
            pre-logits layer of the original ImageNet-21k checkpoints.
        include_top: bool, default True: whether to add the classifier head.
        classes: int, number of classes; default 1000, or the classes of the
            named `weights`.
        classifier_activation: activation of the head, default "softmax";
            None returns logits.
        pooling: for `include_top=False`: None returns the token sequence
            `(batch, tokens, D)`; "token" the class token; "avg"/"max" pool the
            patch tokens.
        dropout_rate: float, dropout after the position embedding and inside
            every block, default 0.
        attention_dropout_rate: float, dropout on attention weights, default 0.
        stochastic_depth_rate: float, largest stochastic-depth rate, growing
            linearly with depth from 0 (first block), default 0.
        layer_norm_epsilon: float, default 1e-6 (the official value).
        gelu_approximate: True for the tanh GELU of the official code, False
            for the exact erf GELU (timm/DeiT); None (default) uses what the
            `weights` were trained with, tanh when building from scratch.
        input_shape: optional `(height, width, channels)`, an alternative to
            `image_size` that also sets the number of channels (default 3).
        weights: None (random init), a registered weights name such as
            "imagenet21k", or the path of a checkpoint file (see
            `keras_vit.weights`).
        name: model name.
        dtype: dtype or dtype policy of the layers.

    Returns:
        A `keras.Model`: `(batch, H, W, C)` images to `(batch, classes)`
        scores when `include_top`, else features as set by `pooling`.

    Example:

    >>> import numpy as np
    >>> model = ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=2,
    ...             num_heads=2, mlp_dim=32, classes=10)
    >>> tuple(model(np.zeros((2, 32, 32, 3), "float32")).shape)
    (2, 10)
    >>> tuple(model(np.zeros((1, 48, 64, 3), "float32")).shape)
    (1, 10)

    Reference:
        Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for
        Image Recognition at Scale", ICLR 2021, arXiv:2010.11929.
    """

    def __init__(
        self,
        image_size=None,
        patch_size=16,
        hidden_size=768,
        num_layers=12,
        num_heads=12,
        mlp_dim=3072,
        classifier="token",
        representation_size=None,
        include_top=True,
        classes=None,
        classifier_activation="softmax",
        pooling=None,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        stochastic_depth_rate=0.0,
        layer_norm_epsilon=1e-6,
        gelu_approximate=None,
        input_shape=None,
        weights=None,
        name="vit",
        dtype=None,
        **kwargs,
    ):
        patch_size = pair(patch_size, "patch_size")
        hidden_size = check_positive_int(hidden_size, "hidden_size")
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
            raise ValueError(
                "`num_layers` must be a non-negative int. "
                f"Received: num_layers={num_layers!r}"
            )
        num_heads = check_positive_int(num_heads, "num_heads")
        mlp_dim = check_positive_int(mlp_dim, "mlp_dim")
        if hidden_size % num_heads:
            raise ValueError(
                "`hidden_size` must be divisible by `num_heads`. "
                f"Received: hidden_size={hidden_size}, num_heads={num_heads}"
            )
        _check_choice(classifier, CLASSIFIERS, "classifier")
        representation_size = check_positive_int(
            representation_size, "representation_size", allow_none=True
        )
        _check_choice(pooling, POOLINGS, "pooling")
        if pooling == "token" and classifier != "token":
            raise ValueError(
                "pooling='token' needs a class token, but classifier='gap' "
                "builds none. Received: pooling='token', classifier='gap'"
            )
        classifier_activation = _check_activation(classifier_activation)
        dropout_rate = check_rate(dropout_rate, "dropout_rate")
        attention_dropout_rate = check_rate(
            attention_dropout_rate, "attention_dropout_rate"
        )
        stochastic_depth_rate = check_rate(
            stochastic_depth_rate, "stochastic_depth_rate"
        )
        layer_norm_epsilon = check_positive_float(
            layer_norm_epsilon, "layer_norm_epsilon"
        )
        if gelu_approximate not in (None, True, False):
            raise ValueError(
                "`gelu_approximate` must be True, False or None. "
                f"Received: gelu_approximate={gelu_approximate!r}"
            )

        architecture = self._architecture_config(
            patch_size=patch_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            classifier=classifier,
        )
        source = None
        if weights is not None:
            from keras_vit.weights import describe_weights

            source = describe_weights(weights, architecture)
        default_size = source.image_size if source and source.image_size else 224
        height, width, channels = _image_size(image_size, input_shape, default_size)
        if source is not None and channels != 3:
            raise ValueError(
                "Pretrained weights take 3-channel images. Received: "
                f"input_shape={input_shape!r} with weights={weights!r}"
            )
        if classes is None:
            classes = source.classes if source and source.classes else 1000
        if include_top:
            classes = check_positive_int(classes, "classes")
        if gelu_approximate is None:
            gelu_approximate = (
                source.gelu_approximate
                if source is not None and source.gelu_approximate is not None
                else True
            )

        stride = self._stem_stride()
        cell = (stride * patch_size[0], stride * patch_size[1])
        if height % cell[0] or width % cell[1]:
            raise ValueError(
                "The image size must be divisible by the patch size"
                + (f" times the stem stride ({stride})" if stride > 1 else "")
                + f". Received: image_size={(height, width)}, "
                f"patch_size={patch_size}"
            )
        grid = (height // cell[0], width // cell[1])

        inputs = keras.Input(shape=(height, width, channels), name="image")
        x = self._stem(inputs, dtype)
        x = Patches(patch_size, name="patches", dtype=dtype)(x)
        x = PatchEncoder(
            hidden_size,
            patch_size,
            grid,
            class_token=classifier == "token",
            name="embedding",
            dtype=dtype,
        )(x)
        x = keras.layers.Dropout(dropout_rate, name="dropout", dtype=dtype)(x)
        for i in range(num_layers):
            rate = stochastic_depth_rate * i / max(num_layers - 1, 1)
            x = TransformerBlock(
                num_heads,
                mlp_dim,
                dropout_rate=dropout_rate,
                attention_dropout_rate=attention_dropout_rate,
                stochastic_depth_rate=rate,
                layer_norm_epsilon=layer_norm_epsilon,
                gelu_approximate=gelu_approximate,
                name=f"encoderblock_{i}",
                dtype=dtype,
            )(x)
        x = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="encoder_norm", dtype=dtype
        )(x)
        num_prefix = int(classifier == "token")
        if include_top:
            x = TokenPooling(classifier, num_prefix, name="pool", dtype=dtype)(x)
            if representation_size is not None:
                x = keras.layers.Dense(
                    representation_size,
                    activation="tanh",
                    name="pre_logits",
                    dtype=dtype,
                )(x)
            # The official head is zero-initialised (also for fine-tuning).
            x = keras.layers.Dense(
                classes,
                kernel_initializer="zeros",
                name="head",
                dtype=dtype,
            )(x)
            if classifier_activation is not None:
                x = keras.layers.Activation(
                    classifier_activation, name="predictions", dtype="float32"
                )(x)
        elif pooling is not None:
            x = TokenPooling(pooling, num_prefix, name="pool", dtype=dtype)(x)

        super().__init__(inputs=inputs, outputs=x, name=name, dtype=dtype, **kwargs)

        self.image_size = (height, width)
        self.patch_size = patch_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.classifier = classifier
        self.representation_size = representation_size
        self.include_top = bool(include_top)
        self.classes = classes
        self.classifier_activation = classifier_activation
        self.pooling = pooling
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.stochastic_depth_rate = stochastic_depth_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        self.gelu_approximate = bool(gelu_approximate)
        self.num_channels = channels
        self.grid_size = grid
        # Any image size divisible by the patch size is accepted at call time.
        self.input_spec = keras.layers.InputSpec(shape=(None, None, None, channels))
        if weights is not None:
            from keras_vit.weights import load_weights

            load_weights(self, weights)

    def compile(self, *args, jit_compile="auto", **kwargs):
        """`keras.Model.compile`; with `jit_compile="auto"`, inference on a
        tensorflow CPU is compiled with XLA (see `make_predict_function`)."""
        self._jit_compile_auto = jit_compile == "auto"
        super().compile(*args, jit_compile=jit_compile, **kwargs)

    def make_predict_function(self, force=False):
        # Keras' "auto" turns XLA off for tensorflow on a CPU. For inference it
        # pays there (ViT-B/16, batch 8: 1.3x the images/s of the graph
        # runtime; see tools/benchmark.py), while training runs faster without
        # it, so only the predict function is compiled, and only when the
        # choice was left to Keras.
        if not self._xla_inference():
            return super().make_predict_function(force)
        chosen = self.jit_compile
        self.jit_compile = True
        try:
            return super().make_predict_function(force)
        finally:
            self.jit_compile = chosen

    def _xla_inference(self):
        if keras.backend.backend() != "tensorflow":
            return False
        if not getattr(self, "_jit_compile_auto", True) or self.run_eagerly:
            return False
        import tensorflow as tf

        if self.jit_compile or tf.config.list_logical_devices("GPU"):
            return False  # Keras has decided already (XLA on accelerators).
        return self.distribute_strategy.num_replicas_in_sync == 1

    # Hooks for models with a convolutional stem (see `ViTHybrid`).
    def _architecture_config(self, **config):
        return config

    def _stem_stride(self):
        return 1

    def _stem(self, inputs, dtype):
        return inputs

    def for_inference(self, image_size=None):
        """A frozen copy of the model with per-call work done once.

        - Hybrids: the convolution kernels are standardised once, in the
          copy's weights (`weight_standardization=False`), instead of on every
          call (6-9 % of an R50+B/16 batch-1 call on a 2-core CPU).
        - `image_size`: the copy is built for that size and its position
          embedding is resized once, as loading a checkpoint at a new size
          does (`scipy.ndimage.zoom`, order 1), instead of on every call of
          the original on images of that size.

        The copy gives the original's outputs up to float rounding. It is not
        trainable: fine-tune the original (a hybrid copy's convolutions no
        longer standardise their kernels, so training it would train another
        model).

        Args:
            image_size: None (the model's own size), an int or
                `(height, width)`.

        Returns:
            A new model of the same class with `trainable=False`.

        Example:

        >>> import numpy as np
        >>> model = ViT(image_size=32, patch_size=8, hidden_size=16,
        ...             num_layers=1, num_heads=2, mlp_dim=32, classes=10)
        >>> fast = model.for_inference(image_size=48)
        >>> fast.grid_size, fast.trainable
        ((6, 6), False)
        >>> x = np.random.default_rng(0).normal(size=(1, 48, 48, 3))
        >>> bool(np.allclose(fast.predict(x, verbose=0),
        ...                  model.predict(x, verbose=0), atol=1e-5))
        True
        """
        import numpy as np

        from keras_vit.layers.resnet import StdConv2D
        from keras_vit.weights.posemb import resample_posemb

        config = self.get_config()
        if image_size is not None:
            size = pair(image_size, "image_size")
            config["image_size"] = size
            config["input_shape"] = size + (self.num_channels,)
        if "weight_standardization" in config:
            config["weight_standardization"] = False
        copy = self.__class__.from_config(config)

        values = {v.path: keras.ops.convert_to_numpy(v) for v in self.weights}
        for layer in self._flatten_layers():
            if isinstance(layer, StdConv2D) and layer.standardize:
                values[layer.kernel.path] = keras.ops.convert_to_numpy(
                    layer.standardized_kernel(layer.kernel)
                )
        embedding = copy.get_layer("embedding")
        if copy.grid_size != self.grid_size:
            path = embedding.pos_embedding.path
            values[path] = resample_posemb(
                values[path],
                copy.grid_size,
                embedding.num_prefix_tokens,
                old_grid=self.grid_size,
            )
        for variable in copy.weights:
            variable.assign(np.asarray(values[variable.path], variable.dtype))
        copy.trainable = False
        return copy

    @property
    def encoder_blocks(self):
        """The Transformer blocks, in order."""
        return [self.get_layer(f"encoderblock_{i}") for i in range(self.num_layers)]

    def get_config(self):
        return {
            "image_size": self.image_size,
            "patch_size": self.patch_size,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "classifier": self.classifier,
            "representation_size": self.representation_size,
            "include_top": self.include_top,
            "classes": self.classes,
            "classifier_activation": self.classifier_activation,
            "pooling": self.pooling,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "stochastic_depth_rate": self.stochastic_depth_rate,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "gelu_approximate": self.gelu_approximate,
            "input_shape": self.image_size + (self.num_channels,),
            "weights": None,
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)

    @classmethod
    def get_layout_map(cls, device_mesh, model_axis="model"):
        """Shards the Transformer weights over a mesh's `model_axis`.

        Megatron-style tensor parallelism: query, key and value kernels
        `(D, heads, head_dim)` and biases are split by head, the attention
        output kernel `(heads, head_dim, D)` by head, the first MLP kernel
        `(D, mlp_dim)` and bias by column and the second `(mlp_dim, D)` by
        row; everything else is replicated. `num_heads` and `mlp_dim` must be
        divisible by the size of `model_axis`. Used with
        `keras.distribution.ModelParallel` (jax) for the L and H variants.

        Args:
            device_mesh: a `keras.distribution.DeviceMesh` with an axis named
                `model_axis`.
            model_axis: str, default "model".

        Returns:
            A `keras.distribution.LayoutMap`.

        Example:

        >>> import keras
        >>> mesh = keras.distribution.DeviceMesh(
        ...     (2, 4), ("batch", "model"), devices=[f"cpu:{i}" for i in range(8)])
        >>> layout_map = ViT.get_layout_map(mesh)
        >>> layout_map["encoderblock_0/MlpBlock_3/Dense_0/kernel"].axes
        (None, 'model')
        """
        if model_axis not in device_mesh.axis_names:
            raise ValueError(
                f"`device_mesh` has no axis named {model_axis!r}. "
                f"Received: axis_names={device_mesh.axis_names!r}"
            )
        m = model_axis
        # Keys are matched against whole variable paths (`re.fullmatch`).
        attention = r".*MultiHeadDotProductAttention_1/"
        layout_map = keras.distribution.LayoutMap(device_mesh)
        layout_map[attention + r"(query|key|value)/kernel"] = (None, m, None)
        layout_map[attention + r"(query|key|value)/bias"] = (m, None)
        layout_map[attention + r"out/kernel"] = (m, None, None)
        layout_map[r".*MlpBlock_3/Dense_0/kernel"] = (None, m)
        layout_map[r".*MlpBlock_3/Dense_0/bias"] = (m,)
        layout_map[r".*MlpBlock_3/Dense_1/kernel"] = (m, None)
        return layout_map
