"""`MaskedPatchPrediction`: self-supervised pre-training of a ViT encoder."""

import keras
from keras import ops

from keras_vit.layers.seeds import check_seed
from keras_vit.models import forward
from keras_vit.models.arguments import KERAS_LAYER_ARGUMENTS
from keras_vit.models.base import ModelBase
from keras_vit.models.vit import ViT
from keras_vit.preprocessing import MODES, preprocess_input
from keras_vit.pretraining import corruption, targets
from keras_vit.validation import argument_names, check_choice, check_keywords

TARGETS = ("mean_color", "downsized", "pixels")
# The paper's downsized target: 4x4 colours per patch.
DOWNSIZED = 4
_ENCODER_LAYERS = ("patches", "embedding", "dropout")


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedPatchLoss(keras.losses.Loss):
    """Mean loss over the corrupted patches only.

    `call` returns one loss per patch (cross-entropy of the logits, averaged
    over the cells of the downsized target; or the mean squared error of a
    pixel regression); the reduction "mean_with_sample_weight" divides their
    weighted sum by the sum of the weights, so passing the corruption mask as
    `sample_weight` averages over the corrupted patches of the batch.

    Args:
        regression: bool, default False: squared error instead of
            cross-entropy from logits.
        name: str.

    Example:

    >>> import numpy as np
    >>> loss = MaskedPatchLoss()
    >>> logits = np.log(np.array([[[0.5, 0.5], [0.9, 0.1]]], "float32"))
    >>> round(float(loss(np.array([[0, 0]]), logits, sample_weight=np.array([[1.0, 0.0]]))), 4)
    0.6931
    """

    def __init__(self, regression=False, name="masked_patch_loss", **kwargs):
        kwargs.setdefault("reduction", "mean_with_sample_weight")
        super().__init__(name=name, **kwargs)
        self.regression = bool(regression)

    def call(self, y_true, y_pred):
        if self.regression:
            return ops.mean(ops.square(y_pred - y_true), axis=-1)
        losses = keras.losses.sparse_categorical_crossentropy(
            ops.cast(y_true, "int32"), y_pred, from_logits=True
        )
        # Downsized targets: one loss per cell, averaged per patch.
        return losses if len(losses.shape) == 2 else ops.mean(losses, axis=-1)

    def get_config(self):
        return {**super().get_config(), "regression": self.regression}


def _input_mode(encoder, preprocessing):
    """The `preprocess_input` mode for `encoder`, or None for its own record.

    None takes the encoder's own scaling: the `Preprocessing` record that
    registered weights names and presets give a model, else "inception" (how
    keras_vit models are trained from scratch). A mode given explicitly must
    agree with that record: pre-training weights on inputs scaled otherwise
    than they were trained with would move them for no reason.
    """
    own = getattr(encoder, "preprocessing", None)
    if preprocessing is None:
        return None if own is not None else "inception"
    check_choice(preprocessing, (None,) + MODES, "preprocessing")
    if own is not None and own.mode != preprocessing:
        raise ValueError(
            f"`preprocessing` disagrees with the input scaling of encoder {encoder.name!r} "
            f"(mean={own.mean}, std={own.std}, from its weights or preset). Pass "
            f"preprocessing=None to use it. Received: preprocessing={preprocessing!r}"
        )
    return preprocessing


def _check_encoder(encoder):
    if not isinstance(encoder, ViT):
        raise ValueError(
            "`encoder` must be a keras_vit.ViT or keras_vit.ViTHybrid. "
            f"Received: encoder={type(encoder).__name__}"
        )
    if encoder.include_top:
        raise ValueError(
            "`encoder` must be built with include_top=False: masked patch "
            "prediction adds its own head on the patch tokens. Received: "
            f"encoder={encoder.name!r} with include_top=True"
        )
    if encoder.num_channels != 3:
        raise ValueError(
            "`encoder` must take RGB images (3 channels): the targets are "
            f"colours. Received: encoder with input_shape="
            f"{encoder.image_size + (encoder.num_channels,)}"
        )
    names = {layer.name for layer in encoder.layers}
    missing = [n for n in _ENCODER_LAYERS if n not in names]
    if missing:
        raise ValueError(
            f"`encoder` lacks the layers {missing} of a keras_vit ViT. "
            f"Received: encoder={encoder.name!r}"
        )


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedPatchPrediction(ModelBase, keras.Model):
    """Masked patch prediction: ViT self-supervision (paper §4.6, App. B.1.2).

    Wraps a `keras_vit.ViT` or `ViTHybrid` built with `include_top=False` and
    trains it in place: its variables are this model's variables, so after
    `fit` the same `encoder` object (or a classifier loaded from its
    weights) is fine-tuned with the usual recipes. One call:

    1. scales the raw [0, 255] images as the encoder expects
       (`keras_vit.preprocess_input`, by default with the encoder's own
       `preprocessing` record) and runs
       the encoder's stem (hybrids), `patches` and the patch projection of
       `embedding` (`PatchEncoder.embed_patches`);
    2. corrupts the patch embeddings as a `corruption_plan` says, drawn anew
       on every call from the model's own seed generator: `[mask]` (a
       learnable embedding of this model), another patch of the same image,
       or kept. This happens before the position embedding is added
       (`PatchEncoder.add_positions`), so a replaced patch carries its new
       content at its own position, as a masked word keeps its position in
       BERT;
    3. runs the encoder's dropout, Transformer blocks and final norm, and a
       linear head on every patch token;
    4. the loss (`compute_loss`) is the mean over the corrupted patches only
       of the softmax cross-entropy with the target classes, or of the L2
       error for `target="pixels"`.

    The targets are computed from the raw images: "mean_color" (the paper's
    best: `mean_color_targets`, 2**(3 * bits) classes), "downsized" (the
    colours of the 4x4 downsized patch, `downsized_patch_targets`) or
    "pixels" (the normalised patch, `pixel_targets`). For a hybrid the
    patch is the image area of one token (stem stride times `patch_size`
    pixels); its ResNet's receptive fields overlap, so neighbouring tokens
    still see part of a masked patch (the paper pre-trains plain ViTs).

    `model(images)` returns a dict: "logits" (float32, `(batch, patches,
    classes)`; `(batch, patches, 16, classes)` for "downsized";
    `(batch, patches, pixels)` for "pixels"), "targets" and "plan". Labels
    given to `fit`/`evaluate` are ignored; sample weights weight images.
    `evaluate(images)` returns the masked-prediction loss (the corruption is
    sampled in evaluation too; dropout is off).

    Args:
        encoder: a `keras_vit.ViT`/`ViTHybrid` with `include_top=False`
            and RGB input.
        target: "mean_color" (default), "downsized" or "pixels".
        rate: float in (0, 1), default 0.5: fraction of the patches of every
            image that are corrupted.
        mask_rate: float, default 0.8: of the corrupted patches, the
            probability of the `[mask]` embedding.
        replace_rate: float, default 0.1: the probability of another patch's
            embedding (the rest are kept as they are).
        bits: int in 1..8, default 3: bits per colour channel of the colour
            targets.
        preprocessing: None (default), "inception" or "imagenet": the
            encoder's input scaling. None uses the encoder's own record
            (`encoder.preprocessing`, set by registered weights names and
            presets, e.g. ImageNet mean/std for DeiT), else "inception"
            (`x / 127.5 - 1`, how models are trained from scratch here). A
            mode that contradicts the encoder's record raises a `ValueError`.
        seed: None or int: seed of the corruption's `SeedGenerator`. None
            draws one from Python's `random`, which
            `keras.utils.set_random_seed` seeds, so seeded programs repeat.
            Keras does not save a generator's position: a loaded task
            restarts its corruption stream from `seed`.
        name: model name.
        **kwargs: Keras' `trainable`, `dtype` (default: the encoder's
            policy) and `autocast`; any other name raises
            `keras_vit.validation.UnknownArgumentError`.

    Example:

    >>> import numpy as np
    >>> import keras_vit
    >>> encoder = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16,
    ...                         num_layers=1, num_heads=2, mlp_dim=32,
    ...                         include_top=False)
    >>> task = MaskedPatchPrediction(encoder, seed=0)
    >>> images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3))
    >>> out = task(images)
    >>> tuple(out["logits"].shape), tuple(out["plan"].shape)
    ((2, 16, 512), (2, 16))
    >>> [int(n) for n in (np.asarray(out["plan"]) > 0).sum(axis=1)]
    [8, 8]
    >>> task.compile(optimizer="adam")  # then task.fit(images, ...)

    Reference:
        Dosovitskiy et al., arXiv:2010.11929, §4.6 and App. B.1.2.
    """

    def __init__(
        self,
        encoder,
        target="mean_color",
        rate=0.5,
        mask_rate=0.8,
        replace_rate=0.1,
        bits=3,
        preprocessing=None,
        seed=None,
        name="masked_patch_prediction",
        **kwargs,
    ):
        allowed = argument_names(type(self).__init__) + KERAS_LAYER_ARGUMENTS
        check_keywords(kwargs, allowed, type(self).__name__)
        _check_encoder(encoder)
        check_choice(target, TARGETS, "target")
        rate, mask_rate, replace_rate = corruption.check_rates(rate, mask_rate, replace_rate)
        targets.num_color_classes(bits)  # checks `bits`
        mode = _input_mode(encoder, preprocessing)
        seed = check_seed(seed)
        if kwargs.get("dtype") is None:
            # The encoder's policy, so that `compile` scales the loss of a
            # mixed_float16 encoder.
            kwargs["dtype"] = encoder.dtype_policy
        super().__init__(name=name, **kwargs)
        self.encoder = encoder
        self.target = target
        self.rate = rate
        self.mask_rate = mask_rate
        self.replace_rate = replace_rate
        self.bits = bits
        self.preprocessing = preprocessing
        self._mode = mode
        self.seed = seed
        self.patch_size = tuple(encoder.effective_patch_size)
        self.seed_generator = keras.random.SeedGenerator(seed, name="corruption_seed")
        # The encoder's layers carry its dtype policy (the functional model's
        # own stays the default), so the head takes theirs.
        self.head = keras.layers.Dense(
            self._head_units(),
            name="prediction_head",
            dtype=encoder.get_layer("embedding").dtype_policy,
        )
        self.loss_fn = MaskedPatchLoss(regression=target == "pixels")
        # Built now, as the functional encoder is: fit callbacks such as
        # BackupAndRestore need built models.
        self.build((None,) + tuple(encoder.image_size) + (3,))

    def _head_units(self):
        if self.target == "pixels":
            return self.patch_size[0] * self.patch_size[1] * 3
        classes = targets.num_color_classes(self.bits)
        return classes * DOWNSIZED**2 if self.target == "downsized" else classes

    def _check_images(self, shape, name="images", known=True):
        shape = tuple(shape)
        ok = len(shape) == 4 and shape[-1] in (3, None if not known else 3)
        if not ok:
            raise ValueError(
                f"`{name}` must be RGB `(batch, height, width, 3)` images in [0, 255]. "
                f"Received: {name}.shape={shape}"
            )
        for size, p in zip(shape[1:3], self.patch_size):
            if (size is None and known) or (size is not None and size % p):
                raise ValueError(
                    "The image height and width must be known and divisible by the "
                    f"encoder's patch size in pixels, {self.patch_size}. "
                    f"Received: {name}.shape={shape}"
                )

    def _check_input_spec(self, shape, dtype, name="x"):
        # Before fit/evaluate/predict start; sizes still unknown pass here and
        # are checked when the call traces.
        self._check_images(shape, "images" if name == "inputs" else name, known=False)

    def build(self, input_shape):
        self._check_images(input_shape)
        if self.built:  # built in __init__; `load_model` builds again
            return
        self.mask_token = self.add_weight(
            name="mask_token",
            shape=(self.encoder.hidden_size,),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )
        self.head.build((None, None, self.encoder.hidden_size))
        self.built = True

    def _scaling(self):
        """`preprocess_input` keywords: the mode, or the encoder's record."""
        return {"mode": self._mode} if self._mode else {"model": self.encoder}

    def compute_targets(self, images):
        """The targets of every patch of raw [0, 255] `images`."""
        if self.target == "mean_color":
            return targets.mean_color_targets(images, self.patch_size, self.bits)
        if self.target == "downsized":
            return targets.downsized_patch_targets(images, self.patch_size, DOWNSIZED, self.bits)
        return targets.pixel_targets(images, self.patch_size, **self._scaling())

    def embed(self, images):
        """Raw images to `(patch embeddings (batch, n, D), grid)`, uncorrupted."""
        stages = forward.stages(self.encoder)
        x = preprocess_input(images, **self._scaling())
        return forward.embed_patches(stages, forward.stem(stages, x))

    def sample_corruption(self, batch, num_patches):
        """`(plan, other_indices)` drawn from the model's seed generator."""
        plan = corruption.corruption_plan(
            batch, num_patches, self.rate, self.mask_rate, self.replace_rate,
            seed=self.seed_generator,
        )
        others = corruption.other_patch_indices(batch, num_patches, seed=self.seed_generator)
        return plan, others

    def encode(self, tokens, grid, training=None):
        """Prefix tokens, position embedding, Transformer and norm; the patch tokens out."""
        stages = forward.stages(self.encoder)
        x = forward.embed_tokens(stages, tokens, grid, training=training)
        x, _ = forward.run_blocks(stages, x, training=training, rope=forward.rope_at(stages, grid))
        x = forward.final_norm(stages, x)
        # With pooled_norm=True the encoder normalises its pooled features;
        # the head on the patch tokens takes them through that norm too.
        if stages.fc_norm is not None:
            x = stages.fc_norm(x)
        return x[:, stages.num_prefix_tokens :]

    def call(self, images, training=None):
        self._check_images(images.shape)
        # Integer pixels stay exact even if a float16 policy cast them.
        images = ops.cast(images, "float32")
        tokens, grid = self.embed(images)
        plan, others = self.sample_corruption(ops.shape(tokens)[0], tokens.shape[1])
        tokens = corruption.apply_corruption(tokens, plan, self.mask_token, others)
        logits = self.head(self.encode(tokens, grid, training=training))
        if self.target == "downsized":
            logits = ops.reshape(
                logits, ops.shape(logits)[:2] + (DOWNSIZED**2, self.head.units // DOWNSIZED**2)
            )
        return {
            "logits": ops.cast(logits, "float32"),
            "targets": self.compute_targets(images),
            "plan": plan,
        }

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Mean loss over the corrupted patches (`y` is ignored)."""
        weights = ops.cast(y_pred["plan"] > 0, "float32")
        if sample_weight is not None:
            weights = weights * ops.reshape(ops.cast(sample_weight, "float32"), (-1, 1))
        loss = self.loss_fn(y_pred["targets"], y_pred["logits"], sample_weight=weights)
        for extra in self.losses:  # regularisers of the encoder or head
            loss = loss + ops.cast(ops.sum(extra), loss.dtype)
        return loss

    def get_config(self):
        return {
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "target": self.target,
            "rate": self.rate,
            "mask_rate": self.mask_rate,
            "replace_rate": self.replace_rate,
            "bits": self.bits,
            "preprocessing": self.preprocessing,
            "seed": self.seed,
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)
