"""`ViT`: the generic Vision Transformer model (Dosovitskiy et al., 2021).

`ViT` is an architecture: its constructor turns arguments into a graph. The
`weights` argument is served by two calls into `keras_vit.weights`, before
and after the graph is built (`describe_weights` fixes the defaults the
checkpoint implies, `load_weights` loads it); the input checks and the
calls into saving, LoRA and execution policy are inherited from
`keras_vit.models.base`, how the model runs on a backend lives in
`keras_vit.execution`.
"""

import keras
import numpy as np

from keras_vit.architectures import CLASS_TOKEN_READERS, gelu_activation
from keras_vit.execution import sharded_load
from keras_vit.layers.config import RECORDS, BlockConfig, expose_records, record_keywords
from keras_vit.layers.seeds import check_seed
from keras_vit.models import forward, patch_inputs
from keras_vit.models.arguments import (
    KERAS_FUNCTIONAL_ARGUMENTS,
    OTHER_NAMES,
    model_input_shape,
    check_transformer,
    check_head,
    check_tokens,
    check_class_names,
    check_class_token_reader,
    check_recorded_activation,
    check_images,
    check_embedding,
    check_grid_options,
    check_pixel_values,
)
from keras_vit.models.base import ModelBase
from keras_vit.models.forward_methods import ForwardPass
from keras_vit.models.inference import inference_copy
from keras_vit.models.precision import model_policy_config, set_model_policy, with_policy
from keras_vit.validation import (
    argument_names,
    check_bool,
    check_keywords,
    check_positive_int,
    check_rate,
    pair,
)
from keras_vit.weights.describe import WeightsInfo, describe_weights
from keras_vit.weights.loader import load_weights
from keras_vit.weights.record import Preprocessing


@keras.saving.register_keras_serializable(package="keras_vit")
@expose_records(*RECORDS)
class ViT(ModelBase, ForwardPass, keras.Model):
    """Vision Transformer (ViT), "An Image is Worth 16x16 Words".

    A functional `keras.Model`: images are cut into patches, embedded with a
    class token and position embedding, passed through `num_layers`
    pre-norm Transformer blocks and a final norm (LayerNorm unless
    `norm_kind` says otherwise), then classified from the class token (or
    the mean of the patch tokens). Layer names follow
    the official checkpoint (`embedding`, `encoderblock_{i}`, `encoder_norm`,
    `pre_logits`, `head`), so `model.get_layer("encoderblock_3").output`
    gives a feature extractor; `forward_intermediates` gives the features
    of chosen blocks on their grid (eagerly or symbolically), through the
    one forward pass of `keras_vit.models.forward` that builds the graph.

    Options found in later checkpoints (DeiT, timm, transformers), each
    exactly as those define it: a distillation token with its own head
    (`head_dist`; the output is the average of both heads' logits, DeiT's
    inference rule; the two heads are the layers `head` and `head_dist`),
    register tokens, query/key/value without biases, LayerScale, and the
    final norm applied to the pooled features (`fc_norm`). A model can
    carry its checkpoint's class names and preprocessing (`class_names`,
    `preprocessing`), which `keras_vit.decode_predictions(..., model=)` and
    `keras_vit.preprocess_input(..., model=)` use.

    The model accepts images of any size divisible by the patch size, not only
    `image_size`: the position embedding is resized on the fly.

    Calling the model runs the steps of its graph, except that when the head
    reads only the class (and distillation) token, the last block computes
    the outputs of the prefix tokens alone: the other tokens still give their
    keys and values, so the result is the same, without their queries,
    attention outputs and MLP (about 7 % of ViT-B/16's work). The graph
    itself is unchanged: `model.get_layer(...).output` is every token.

    Args:
        image_size: int or `(height, width)`, default 224 (or the resolution
            of the named `weights`). The position embedding is learned for it.
        patch_size: int or `(height, width)`, default 16.
        hidden_size: int, token width `D`, default 768.
        num_layers: int, Transformer blocks, default 12.
        num_heads: int, attention heads, default 12; must divide `hidden_size`.
        mlp_dim: int, MLP hidden width, default 3072.
        classifier: "token" (class token, default), "gap" (no class token,
            mean of the patch tokens), "map" (no class token, attention
            pooling by a learned probe: SigLIP's MAP head, layer `pool`, a
            `keras_vit.layers.map_head.MapHead`) or "token_avg" (the class
            token concatenated with the mean of the patch tokens, a `2 * D`
            feature: DINOv2's linear classifiers) or "attention_pool" (no
            class token; AIMv2's head, a learned query attending to the
            tokens' keys and values, without MLP: layer `pool`, a
            `keras_vit.layers.attention_pool.AttentionPoolHead`).
            `class_token=True/False` overrides whether a class token is
            prepended.
        representation_size: None (default) or int: width of the Dense+tanh
            pre-logits layer of the original ImageNet-21k checkpoints.
        include_top: bool, default True: whether to add the classifier head.
        classes: int, number of classes; default 1000, or the classes of the
            named `weights`.
        classifier_activation: activation of the head, default "softmax";
            None returns logits.
        pooling: for `include_top=False`: None returns the token sequence
            `(batch, tokens, D)`; "token" the class token; "avg"/"max" pool the
            patch tokens; "map" the MAP head; "token_avg" the class token
            and the patch tokens' mean, concatenated `(batch, 2 * D)`;
            "attention_pool" AIMv2's attention-pool head.
        stochastic_depth_rate: float, largest stochastic-depth rate, growing
            linearly with depth from 0 (first block), default 0.
        input_shape: optional `(height, width, channels)`, an alternative to
            `image_size` that also sets the number of channels (default 3).
        weights: None (random init), a registered weights name such as
            "imagenet21k", or the path of a checkpoint file (see
            `keras_vit.weights`).
        distillation_token: bool, default False: DeiT's distillation token
            after the class token, with its own position row (needs
            `classifier="token"`).
        distillation_head: None (default: `distillation_token`) or bool: a
            second head `head_dist` on the distillation token, averaged with
            `head`; False keeps the class-token head alone.
        num_register_tokens: int, default 0: register tokens after the class
            (and distillation) token, without position rows; excluded from
            the "avg"/"max"/"gap" pooling.
        pooled_norm: bool, default False: apply the final norm (named
            `fc_norm`) to the pooled features instead of to every token
            (timm's `fc_norm`); with `include_top=False, pooling=None` the
            tokens come out unnormalised.
        projection_dim: None (default) or int: a linear projection without
            bias of the pooled features to this width (layer `projection`),
            before the head: the image embedding of a contrastive image-text
            model (CLIP's `visual_projection`). Needs pooling (a head, or
            `pooling` set).
        l2_normalize: bool, default False: scale the pooled (and projected)
            features to unit length (layer `l2_normalize`) before the head,
            as image-text models compare embeddings; a head then scores
            cosine similarities (`ImageTextModel.zero_shot_classifier`).
            Needs pooling.
        class_names: None, a sequence of `classes` strings (head order), or
            the name of a list in `keras_vit.labels.LISTS` ("imagenet1k",
            "imagenet21k"). Default: the registered `weights`' list when the
            head is theirs. Read back as the tuple `model.class_names`.
        preprocessing: None, a `keras_vit.weights.record.Preprocessing` or
            its config dict: how the weights expect images (mean/std, resize,
            crop). Default: the registered `weights`' scaling.
        seed: None (default) or an int: the seed the random streams of the
            model (dropout, stochastic depth) derive theirs from, each layer
            its own. With None they are drawn from Keras' global generator,
            which `keras.utils.set_random_seed` seeds.
        block_config: None, a `keras_vit.layers.config.BlockConfig` or its
            config dict: the options every Transformer block shares. Each
            field is also a keyword of its own, which replaces the record's:
            `norm_kind` (the kind of every norm of the encoder, a name of
            `keras_vit.layers.norms.NORMS`; default "layernorm"),
            `layer_norm_epsilon` (default 1e-6, the official value),
            `mlp_activation` ("gelu_tanh", the official tanh GELU; "gelu",
            the exact erf GELU of timm/DeiT; "quick_gelu", OpenAI CLIP's),
            `qkv_bias` (default True), `layer_scale_init` (None or the
            initial LayerScale value), `dropout_rate` (also after the
            position embedding), `attention_dropout_rate` (default 0),
            `mlp_kind` ("plain" or DINOv2-giant's "swiglu"), `qk_norm`
            (default False; ViT-22B's norm of queries and keys), the
            biases and inner norms `attention_out_bias`,
            `attention_out_norm`, `mlp_bias`, `mlp_norm`, and `rope` /
            `rope_settings` (a rotary position embedding of the patch
            tokens: DINOv3, EVA02, Perception Encoder, RoPE-ViT; see
            `keras_vit.layers.rotary`).
            Unless given, the activation is the one the `weights` were
            trained with (tanh when building from scratch).
        encoder_config: None, a `keras_vit.layers.config.EncoderConfig` or
            its config dict: the options around the blocks (its docstring
            lists them), each field also a keyword of its own, e.g.
            `patch_bias=False`.
        name: model name.
        dtype: dtype or dtype policy of the layers.
        trainable: bool, default True (Keras' own argument).

    `get_config()` holds each record as one dict ("block_config",
    "encoder_config"); configs in the earlier flat layout (`qkv_bias`, ...
    as top-level keys) load as before.

    Any other keyword raises `keras_vit.validation.UnknownArgumentError` (a
    `TypeError` and a `ValueError`) naming the closest valid argument.

    Video: with `num_frames` (an `encoder_config` field, with
    `tubelet_size`), the same model takes clips `(batch, frames, H, W, C)`,
    cut into tubelets of `tubelet_size` frames (VideoMAE, ViViT); its
    tokens run in (time, row, column) order and every head, pooling and
    option that reads a token sequence applies unchanged.

    Returns:
        A `keras.Model`: `(batch, H, W, C)` images (with `num_frames`,
        `(batch, frames, H, W, C)` clips) to `(batch, classes)` scores when
        `include_top`, else features as set by `pooling`.

    Example:

    >>> import numpy as np
    >>> model = ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=2,
    ...             num_heads=2, mlp_dim=32, classes=10)
    >>> tuple(model(np.zeros((2, 32, 32, 3), "float32")).shape)
    (2, 10)
    >>> tuple(model(np.zeros((1, 48, 64, 3), "float32")).shape)
    (1, 10)
    >>> video = ViT(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
    ...             mlp_dim=32, classes=10, num_frames=4, tubelet_size=2, classifier="gap")
    >>> tuple(video(np.zeros((2, 4, 16, 16, 3), "float32")).shape)
    (2, 10)

    Reference:
        Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for
        Image Recognition at Scale", ICLR 2021, arXiv:2010.11929.
    """

    def __init__(
        self,
        # The encoder's size.
        image_size=None, patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072,
        # The head.
        classifier="token", representation_size=None, include_top=True, classes=None,
        classifier_activation="softmax", pooling=None,
        stochastic_depth_rate=0.0, input_shape=None, weights=None,
        # Tokens besides the patches, and the pooled output.
        distillation_token=False, distillation_head=None, num_register_tokens=0,
        pooled_norm=False, projection_dim=None, l2_normalize=False,
        # What a checkpoint carries, and the random draws.
        class_names=None, preprocessing=None, seed=None,
        # The option records (their fields are keywords too).
        block_config=None, encoder_config=None,
        name="vit", dtype=None, **kwargs,
    ):
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in record_keywords()}
        check_keywords(kwargs, type(self).argument_names(), type(self).__name__, OTHER_NAMES)
        self.patch_size = pair(patch_size, "patch_size")
        self.seed = check_seed(seed)
        check_transformer(hidden_size, num_layers, num_heads, mlp_dim)
        self.hidden_size, self.num_layers = hidden_size, num_layers
        self.num_heads, self.mlp_dim = num_heads, mlp_dim
        self.classifier = classifier
        self.classifier_activation = check_head(classifier, pooling, representation_size, classifier_activation)
        self.representation_size, self.pooling = representation_size, pooling
        self.include_top = bool(include_top)
        self.stochastic_depth_rate = check_rate(stochastic_depth_rate, "stochastic_depth_rate")
        self.block_config = BlockConfig.from_arguments(block_config, **options)
        self.encoder_config = RECORDS["encoder_config"].from_arguments(encoder_config, **options)
        self._set_options(distillation_token, distillation_head, num_register_tokens, pooled_norm,
                          projection_dim, l2_normalize)

        # What the checkpoint fixes (resolution, classes, GELU, channels).
        info = WeightsInfo() if weights is None else describe_weights(weights, self.architecture_config())
        shape = model_input_shape(image_size, input_shape, info.image_size or 224)
        if info.channels not in (None, shape[2]):
            raise ValueError(
                f"The weights take {info.channels}-channel images. Received: "
                f"input_shape={input_shape!r} with weights={weights!r}"
            )
        self.image_size, self.num_channels = shape[:2], shape[2]
        self.grid_size = self._grid(self.image_size)
        if classes is None:
            classes = info.classes or 1000
        self.classes = check_positive_int(classes, "classes") if include_top else classes
        if block_config is None and "mlp_activation" not in options:
            # The activation the checkpoint was trained with, which a file
            # that does not record it cannot choose.
            check_recorded_activation(info)
            if info.gelu_approximate is not None:
                self.block_config = self.block_config.replace(mlp_activation=gelu_activation(info.gelu_approximate))
        self._set_metadata(class_names, preprocessing, info)

        frames = self.encoder_config.num_frames
        inputs = keras.Input(shape=shape if frames is None else (frames,) + shape, name="image")
        # Weights about to be loaded need no initial values (under a
        # distribution on jax, `keras_vit.execution.sharded_load`).
        with sharded_load.deferred_variables(weights is not None):
            stages, features, outputs = self._build_graph(inputs, dtype)
            super().__init__(inputs=inputs, outputs=outputs, name=name, **kwargs)
        set_model_policy(self, dtype)
        self._forward_stages = forward.attach_stem(stages, inputs, features, f"{name}_stem")
        # Any image size divisible by the patch size is accepted at call time
        # (and any clip length divisible by the tubelet size).
        self.input_spec = keras.layers.InputSpec(shape=(None,) * (len(inputs.shape) - 1) + (self.num_channels,))
        if weights is not None:
            load_weights(self, weights)

    @classmethod
    def argument_names(cls):
        """The constructor's keyword arguments: those of `__init__` of this
        class and of its bases up to `ViT`, the fields of the option records
        (`keras_vit.layers.config`), and Keras' `trainable`."""
        chain = cls.__mro__[: cls.__mro__.index(ViT) + 1]
        inits = [vars(c)["__init__"] for c in chain if "__init__" in vars(c)]
        return argument_names(*inits) + record_keywords() + KERAS_FUNCTIONAL_ARGUMENTS

    def architecture_config(self):
        """The arguments that identify the architecture (a table row).

        Returns:
            A dict with `patch_size`, `hidden_size`, `num_layers`,
            `num_heads` and `mlp_dim` (hybrids add their ResNet's).
        """
        return dict(
            patch_size=self.patch_size,
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
        )

    @property
    def stem_stride(self):
        """Downsampling before the patches: 1 (no stem) for a plain ViT."""
        return 1

    @property
    def effective_patch_size(self):
        """Image pixels covered by one token, `(height, width)`."""
        return tuple(self.stem_stride * p for p in self.patch_size)

    @property
    def num_prefix_tokens(self):
        """Tokens before the patch tokens: class, distillation and register tokens."""
        return self.num_prefix_rows + self.num_register_tokens

    @property
    def num_prefix_rows(self):
        """Position-embedding rows before the patch rows (class, distillation token)."""
        return int(self.has_class_token) + int(self.distillation_token)

    @property
    def has_class_token(self):
        """Whether a class token is prepended (`class_token`, else the classifier's)."""
        if self.encoder_config.class_token is not None:
            return self.encoder_config.class_token
        return self.classifier in CLASS_TOKEN_READERS

    @property
    def class_names(self):
        """The head's class names (a tuple), or None.

        Settable, with what the `class_names` argument takes (a sequence of
        `classes` strings, "imagenet1k", "imagenet21k" or None); saved with
        the model.
        """
        return self._class_names

    @class_names.setter
    def class_names(self, value):
        names = check_class_names(value, self.classes, self.include_top)
        self._class_names_arg = list(value) if isinstance(value, tuple) else value
        self._class_names = names

    def _set_options(self, distillation_token, distillation_head, num_register_tokens, pooled_norm,
                     projection_dim=None, l2_normalize=False):
        """The prefix-token, final-norm and embedding options (DeiT, timm,
        transformers, image-text models), checked."""
        self.distillation_head = check_tokens(
            self.classifier, self.pooling, distillation_token, distillation_head,
            num_register_tokens, self.representation_size,
        )
        self.distillation_token, self.num_register_tokens = distillation_token, num_register_tokens
        check_class_token_reader(self.classifier, self.pooling, self.include_top, self.has_class_token)
        self.pooled_norm = check_bool(pooled_norm, "pooled_norm")
        self.projection_dim, self.l2_normalize = check_embedding(
            projection_dim, l2_normalize, self.include_top, self.pooling
        )
        check_grid_options(self.block_config, self.encoder_config, self.num_prefix_tokens)

    def _set_metadata(self, class_names, preprocessing, info):
        # The registered weights' lists, when the head is theirs.
        if class_names is None and self.include_top and self.classes == info.classes:
            class_names = info.class_names
        self.class_names = class_names
        if preprocessing is None:
            preprocessing = info.preprocessing
        if preprocessing is not None:
            preprocessing = Preprocessing.from_config(preprocessing)
        self.preprocessing = preprocessing

    def _check_input_spec(self, shape, dtype, name="x"):
        """Raises a `ValueError` for images this model cannot take.

        Unknown dimensions (None) pass; integer pixels get a warning, as
        they usually mean that `keras_vit.preprocess_input` was forgotten.
        """
        check_images(self, shape, dtype, name)

    def _check_input_values(self, x, name="x"):
        """Warns once when float NumPy images look like raw [0, 255] pixels."""
        check_pixel_values(self, x, name)

    def _check_input_dict(self, x, name="x"):
        """Raises a `ValueError` for a NaFlex patch dict this model cannot take."""
        patch_inputs.check_patch_dict(self, x, name)

    def _grid(self, image_size):
        cell = self.effective_patch_size
        crop = self.encoder_config.crop_to_patches and self.stem_stride == 1
        if (image_size[0] % cell[0] or image_size[1] % cell[1]) and not crop:
            stride = self.stem_stride
            raise ValueError(
                "The image size must be divisible by the patch size"
                + (f" times the stem stride ({stride})" if stride > 1 else "")
                + f". Received: image_size={tuple(image_size)}, "
                f"patch_size={self.patch_size}"
            )
        return (image_size[0] // cell[0], image_size[1] // cell[1])

    def _stem(self, inputs, dtype):
        """The layers before the patches (a convolutional stem in hybrids)."""
        return inputs

    def _build_graph(self, inputs, dtype):
        """The model's outputs for `inputs`, through `keras_vit.models.forward`."""
        stages = forward.build_stages(self, dtype)
        features = self._stem(inputs, dtype)
        tokens, patches = forward.embed(stages, features)
        tokens, _ = forward.run_blocks(stages, tokens, rope=forward.rope(stages, patches), grid=patches)
        outputs = forward.head(stages, forward.final_norm(stages, tokens, patches))
        return stages, features, outputs

    def for_inference(self, image_size=None):
        """A frozen copy of the model with per-call work done once.

        - `image_size`: the copy is built for that size and its position
          embedding is resized once, as loading a checkpoint at a new size
          does (`scipy.ndimage.zoom`, order 1), instead of on every call of
          the original on images of that size.
        - Subclasses fold their own per-call work (hybrids: the weight
          standardisation of their convolutions).
        - On torch, each projection kernel is reordered to oneDNN's layout
          once, on first use, not at every call (`kernels.pack_for_inference`;
          as much memory again as those kernels); with AVX2 but not AVX-512,
          the first call of each input shape keeps oneDNN only where it times
          faster than torch's own product (docs/performance.md).

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
        return inference_copy(self, image_size)

    def _inference_config(self, config):
        """Hook: the config of the `for_inference` copy."""
        return config

    def _inference_values(self, values):
        """Hook: `{variable path: array}` of the `for_inference` copy."""
        return values

    @property
    def encoder_blocks(self):
        """The Transformer blocks, in order."""
        return list(self._forward_stages.blocks)

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
            "stochastic_depth_rate": self.stochastic_depth_rate,
            "input_shape": self.image_size + (self.num_channels,),
            "weights": None,
            "distillation_token": self.distillation_token,
            "distillation_head": self.distillation_head,
            "num_register_tokens": self.num_register_tokens,
            "pooled_norm": self.pooled_norm,
            "projection_dim": self.projection_dim,
            "l2_normalize": self.l2_normalize,
            "class_names": self._class_names_arg,
            "preprocessing": None if self.preprocessing is None else self.preprocessing.get_config(),
            "seed": self.seed,
            # Each option record as one dict.
            **{key: getattr(self, key).get_config() for key in RECORDS},
            "name": self.name,
            "trainable": self.trainable,
            # With the policies of quantized layers, if any.
            "dtype": keras.dtype_policies.serialize(model_policy_config(self)),
        }

    def save_to_preset(self, directory, format="keras_vit", preprocessing=None, class_names=None,
                       max_shard_size=None):
        """Writes the model as a preset directory (see `keras_vit.families.writers`).

        Args:
            directory: folder to write (created if needed).
            format: "keras_vit" (default: reloads exactly with
                `keras_vit.from_preset` on every backend) or "transformers"
                (loads in `transformers.AutoModelForImageClassification`,
                `AutoImageProcessor` and `pipeline`, or a backbone in its
                family's class: DINOv2, CLIP, SigLIP, ViTMAE; models it
                cannot represent are refused before writing) or "timm" (a
                timm Hub directory, `timm.create_model("local-dir:...",
                pretrained=True)`: the models timm's VisionTransformer
                holds).
            preprocessing: None (default: `self.preprocessing`), a mode
                ("imagenet" or "inception") or a `Preprocessing` record;
                a transformers directory needs one.
            class_names: None (default: `self.class_names`), "imagenet1k",
                "imagenet21k" or one string per class; a transformers
                directory needs them.
            max_shard_size: for "transformers" and "timm", the largest
                safetensors shard (bytes, or "5GB"): shards and their
                `model.safetensors.index.json`; default one file.

        Example:

        >>> import tempfile, keras_vit
        >>> model = ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1,
        ...             num_heads=2, mlp_dim=8, classes=2, class_names=["no", "yes"])
        >>> folder = tempfile.mkdtemp()
        >>> model.save_to_preset(folder)
        >>> keras_vit.from_preset(folder).class_names
        ('no', 'yes')
        """
        from keras_vit.families import writers

        writers.save_to_preset(
            self, directory, format=format, preprocessing=preprocessing, class_names=class_names,
            max_shard_size=max_shard_size,
        )

    @classmethod
    def from_config(cls, config):
        return cls(**with_policy(config))

    @classmethod
    def get_layout_map(cls, device_mesh, model_axis="model", fsdp_axis=None, min_shard_bytes=None):
        """Shards the Transformer weights over a mesh's `model_axis`, and with
        `fsdp_axis` every large weight over that axis too (FSDP).

        Megatron-style tensor parallelism: query, key and value kernels
        `(D, heads, head_dim)` and biases are split by head, the attention
        output kernel `(heads, head_dim, D)` by head, the first MLP kernel
        `(D, mlp_dim)` and bias by column and the second `(mlp_dim, D)` by
        row; everything else is replicated. `num_heads` and `mlp_dim` must be
        divisible by the size of `model_axis`. Used with
        `keras.distribution.ModelParallel` (jax) for the L and H variants.

        With `fsdp_axis` (FSDP, `keras_vit.execution.fsdp`), each weight of
        at least `min_shard_bytes` is also split along its largest remaining
        axis that the size of `fsdp_axis` divides; the mesh may then lack
        `model_axis` (FSDP alone). Use the returned map with
        `keras_vit.execution.fsdp.FSDP`.

        Args:
            device_mesh: a `keras.distribution.DeviceMesh` with an axis named
                `model_axis` (or `fsdp_axis` alone).
            model_axis: str, default "model".
            fsdp_axis: str or None (default): the axis FSDP splits over,
                usually the batch axis ("batch").
            min_shard_bytes: with `fsdp_axis`, the size below which a weight
                is replicated; default 1 MiB.

        Returns:
            A `keras.distribution.LayoutMap` (`FSDPLayoutMap` with `fsdp_axis`).

        Example:

        >>> import keras
        >>> mesh = keras.distribution.DeviceMesh(
        ...     (2, 4), ("batch", "model"), devices=[f"cpu:{i}" for i in range(8)])
        >>> layout_map = ViT.get_layout_map(mesh)
        >>> layout_map["encoderblock_0/MlpBlock_3/Dense_0/kernel"].axes
        (None, 'model')
        """
        if fsdp_axis is not None:
            from keras_vit.execution import fsdp

            layout_map = fsdp.FSDPLayoutMap(
                device_mesh, fsdp_axis,
                fsdp.MIN_SHARD_BYTES if min_shard_bytes is None else min_shard_bytes)
            if model_axis not in device_mesh.axis_names:
                return layout_map
        elif model_axis not in device_mesh.axis_names:
            raise ValueError(
                f"`device_mesh` has no axis named {model_axis!r}. "
                f"Received: axis_names={device_mesh.axis_names!r}"
            )
        else:
            layout_map = keras.distribution.LayoutMap(device_mesh)
        m = model_axis
        # Keys are matched against whole variable paths (`re.fullmatch`).
        attention = r".*MultiHeadDotProductAttention_1/"
        layout_map[attention + r"(query|key|value)/kernel"] = (None, m, None)
        layout_map[attention + r"(query|key|value)/bias"] = (m, None)
        layout_map[attention + r"out/kernel"] = (m, None, None)
        layout_map[r".*MlpBlock_3/Dense_0/kernel"] = (None, m)
        layout_map[r".*MlpBlock_3/Dense_0/bias"] = (m,)
        layout_map[r".*MlpBlock_3/Dense_1/kernel"] = (m, None)
        return layout_map
