"""Monocular depth: `DepthEstimator` (a DPT head on a keras_vit encoder) and
`estimate_depth`, from image files to one depth map per image.

`DepthEstimator` is the model of Depth Anything V1/V2 (DINOv2, relative
and metric), DPT (ViT-L/16 and the R50 hybrid) and CHMv2 (DINOv3, depth
from bins): the encoder's chosen blocks, DPT's neck (`keras_vit.layers.DptNeck`)
and a depth head (`keras_vit.layers.DepthHead`, CHMv2's `DepthBins`). The
three published heads differ in a few places, one row each of
`DPT_STYLES`. `keras_vit.from_preset` builds it from transformers'
`DepthAnythingForDepthEstimation`, `DPTForDepthEstimation` and
`CHMv2ForDepthEstimation` directories and keras-hub's Depth Anything
presets (`keras_vit.families.dpt`).

`estimate_depth(model, images)` reads the images, prepares them as the
checkpoint's image processor does (`DenseProcessing`), runs the model one
image at a time (their sizes differ) and resizes each prediction to its
image's size as transformers' `depth-estimation` pipeline does.
"""

import keras
import numpy as np
from keras import ops

from keras_vit.layers.depth_head import BIN_NORMALIZATIONS, BIN_STRATEGIES, DepthBins, DepthHead
from keras_vit.layers.dpt import DptNeck, check_channels
from keras_vit.models import forward
from keras_vit.models.features import check_feature_blocks
from keras_vit.models.hybrid import ViTHybrid
from keras_vit.tasks.base import DenseTask, check_encoder, processing_record
from keras_vit.preprocessing.dense import DenseProcessing, prepare_image
from keras_vit.validation import check_bool, check_choice, check_positive_float, check_positive_int

# The published DPT heads, by what differs between them: where the fusion
# resize goes, whether the first fusion block holds an (unused) residual
# unit, how the head resizes, and the readout of the class token.
DPT_STYLES = {
    "dpt": dict(fusion_upsample="double", first_fusion_unit=True, head_upsample="double"),
    "depth_anything": dict(fusion_upsample="next", first_fusion_unit=True, head_upsample="image"),
    "chmv2": dict(fusion_upsample="double", first_fusion_unit=False, head_upsample="double"),
}
# What the head's output means: "relative" (ReLU, inverse depth up to
# scale), "metric" (sigmoid times `max_depth`, metres), "bins" (CHMv2:
# logits over depth bins, `DepthBins`).
DEPTH_KINDS = ("relative", "metric", "bins")
OUTPUT = "predicted_depth"


def _resnet_taps(encoder, count):
    """A model from images to the outputs of the hybrid's first `count`
    ResNet stages and its stem's output, on images of any size, with the
    encoder's own layers."""
    stages = [encoder.get_layer(f"block{s + 1}").output for s in range(count)]
    stem = forward.stages(encoder).stem
    last = encoder.get_layer(f"block{len(encoder.resnet_layers)}").output if encoder.resnet_layers else None
    if stem is None or last is None:
        raise ValueError(f"Encoder {encoder.name!r} has no ResNet stages to tap.")
    fixed = keras.Model(encoder.input, stages + [last], name=f"{encoder.name}_resnet_taps")
    return keras.models.clone_model(
        fixed, input_tensors=keras.Input((None, None, encoder.num_channels), name="image"),
        clone_function=lambda layer: layer,
    )


@keras.saving.register_keras_serializable(package="keras_vit")
class DepthEstimator(DenseTask):
    """Depth from images: a DPT neck and head on a keras_vit encoder.

    The encoder's `feature_blocks` (after its final norm with
    `feature_norm`) are reassembled and fused by `DptNeck`, then
    `DepthHead` makes the depth map at the image's size. `model(images)`
    and `predict` return `{"predicted_depth": (batch, height, width)}`
    (float32), transformers' name; `fit` trains on depth maps of the same
    size (the compile defaults: the scale-invariant log loss, AbsRel and
    δ1, `keras_vit.tasks.dense_training`).

    Args:
        encoder: a `keras_vit.ViT` or `ViTHybrid` built with
            `include_top=False` (its variables become this model's).
        feature_blocks: the encoder blocks whose outputs feed the neck, one
            per level after the hybrid's ResNet levels (negative counts
            from the last).
        neck_channels: ints, one per level: the channels after the
            reassemble projection (transformers' `neck_hidden_sizes`).
        reassemble_factors: numbers, one per level (4, 2, 1, 0.5 usually).
        fusion_size: int, the fusion width.
        style: a key of `DPT_STYLES`: "depth_anything" (default), "dpt" or
            "chmv2".
        readout: "ignore" (default), "add" or "project": what the neck does
            with the class token (`DptNeck`).
        feature_norm: bool, default True: the encoder's final norm on the
            features (Depth Anything, CHMv2; DPT reads them raw).
        head_size: int, default 32: the head's width after its resize.
        head_projection: bool, default False: DPT-Large's extra 3x3
            convolution at the start of the head.
        depth: one of `DEPTH_KINDS`, default "relative".
        max_depth: None or float: the largest depth of a "metric" model
            (required there) or of the "bins" (default 96); a "relative"
            model's output scale (default 1).
        min_depth: None or float: the smallest bin of a "bins" model
            (default 0.001).
        num_bins: None or int: a "bins" model's bins (default 256).
        bins_strategy, bins_normalization: a "bins" model's spacing and
            weighting of the bins (`keras_vit.layers.DepthBins`).
        fusion_batch_norm: bool, default False: batch norm in the fusion
            units (some DPT checkpoints).
        preprocessing: None, a `DenseProcessing` record or its config:
            how the checkpoint's images are prepared (`estimate_depth`).
        name: model name.
        **kwargs: Keras' `trainable`, `dtype`, `autocast`.

    Example:

    >>> import numpy as np, keras_vit
    >>> encoder = keras_vit.ViT(image_size=28, patch_size=7, hidden_size=16, num_layers=2,
    ...                         num_heads=2, mlp_dim=32, include_top=False, layer_scale_init=1.0)
    >>> model = DepthEstimator(encoder, feature_blocks=(0, 1), neck_channels=(8, 16),
    ...                        reassemble_factors=(2, 0.5), fusion_size=8, head_size=4)
    >>> out = model.predict(np.zeros((1, 28, 42, 3), "float32"), verbose=0)
    >>> out["predicted_depth"].shape
    (1, 28, 42)

    Reference:
        Ranftl et al., arXiv:2103.13413 (DPT); Yang et al., arXiv:2401.10891
        and arXiv:2406.09414 (Depth Anything V1, V2).
    """

    MAIN_OUTPUT = OUTPUT
    TASK = "DepthEstimator"

    def __init__(self, encoder, feature_blocks, neck_channels, reassemble_factors, fusion_size,
                 style="depth_anything", readout="ignore", feature_norm=True, head_size=32,
                 head_projection=False, depth="relative", max_depth=None, min_depth=None, num_bins=None,
                 bins_strategy="chmv2_mixlog", bins_normalization="chmv2_mixlog", fusion_batch_norm=False,
                 preprocessing=None, name="depth_estimator", **kwargs):
        self._check_keywords(kwargs)
        check_encoder(encoder, self.TASK)
        neck_channels = check_channels(neck_channels)
        blocks = check_feature_blocks(feature_blocks, encoder.num_layers)
        skip = len(neck_channels) - len(blocks)
        self._check_levels(encoder, skip, neck_channels, feature_blocks)
        check_choice(style, tuple(DPT_STYLES), "style")
        depth = check_choice(depth, DEPTH_KINDS, "depth")
        depth_range = self._depth_range(depth, max_depth, min_depth, num_bins)
        if readout != "ignore" and not encoder.has_class_token:
            raise ValueError(f"readout={readout!r} reads the class token; encoder {encoder.name!r} has none.")
        kwargs.setdefault("dtype", encoder.dtype_policy)
        super().__init__(name=name, **kwargs)
        self.encoder = encoder
        self.feature_blocks, self.skip_levels, self.style = blocks, skip, style
        self.readout, self.feature_norm = readout, check_bool(feature_norm, "feature_norm")
        self.head_size = check_positive_int(head_size, "head_size")
        self.head_projection = check_bool(head_projection, "head_projection")
        self.depth, (self.max_depth, self.min_depth, self.num_bins) = depth, depth_range
        self.bins_strategy = check_choice(bins_strategy, BIN_STRATEGIES, "bins_strategy")
        self.bins_normalization = check_choice(bins_normalization, BIN_NORMALIZATIONS, "bins_normalization")
        self.preprocessing = None if preprocessing is None else DenseProcessing.from_config(preprocessing)
        dtype = encoder.get_layer("embedding").dtype_policy
        style_settings = DPT_STYLES[style]
        self.neck = DptNeck(
            encoder.hidden_size, neck_channels, reassemble_factors, fusion_size, readout=readout,
            fusion_upsample=style_settings["fusion_upsample"],
            first_fusion_unit=style_settings["first_fusion_unit"],
            fusion_batch_norm=fusion_batch_norm, skip_levels=skip, name="neck", dtype=dtype,
        )
        self.depth_head = DepthHead(
            fusion_size, hidden_size=head_size, outputs=self.num_bins or 1,
            upsample=style_settings["head_upsample"], projection=head_projection,
            activation={"relative": "relu", "metric": "sigmoid", "bins": None}[depth],
            max_depth=self.max_depth if depth != "bins" else 1.0, name="depth_head", dtype=dtype,
        )
        self.bins = None
        if depth == "bins":
            self.bins = DepthBins(self.min_depth, self.max_depth, bins_strategy, bins_normalization,
                                  name="depth_bins", dtype=dtype)
        self._resnet = _resnet_taps(encoder, skip) if skip else None
        self._build_layers()

    @staticmethod
    def _check_levels(encoder, skip, channels, feature_blocks):
        if skip < 0:
            raise ValueError(
                f"`feature_blocks` has more blocks than `neck_channels` has levels. Received: "
                f"feature_blocks={feature_blocks!r}, neck_channels={list(channels)}"
            )
        if skip and not (isinstance(encoder, ViTHybrid) and len(encoder.resnet_layers) > skip):
            raise ValueError(
                f"The first {skip} levels of the neck (neck_channels has {len(channels)}, feature_blocks "
                f"{len(feature_blocks)}) would be ResNet stages: that needs a ViTHybrid encoder with more "
                f"than {skip} stages. Received: encoder {encoder.name!r}"
            )

    @staticmethod
    def _depth_range(depth, max_depth, min_depth, num_bins):
        if depth == "metric" and max_depth is None:
            raise ValueError("A metric depth model needs `max_depth` (its largest depth, e.g. 20 or 80).")
        if depth != "bins" and (min_depth is not None or num_bins is not None):
            raise ValueError(f"`min_depth` and `num_bins` are for depth='bins'. Received: depth={depth!r}")
        if depth == "bins":
            return (check_positive_float(96.0 if max_depth is None else max_depth, "max_depth"),
                    check_positive_float(0.001 if min_depth is None else min_depth, "min_depth"),
                    check_positive_int(256 if num_bins is None else num_bins, "num_bins"))
        return check_positive_float(1.0 if max_depth is None else max_depth, "max_depth"), None, None

    def _build_layers(self):
        dim = self.encoder.hidden_size
        maps = [(None, None, None, dim)] * len(self.neck.neck_channels)
        self.neck.build(maps)
        self.depth_head.build((None, None, None, self.neck.fusion_size))
        self.built = True

    @property
    def head_layer_names(self):
        return ("neck", "depth_head", "depth_bins")

    @property
    def output_keys(self):
        """The keys of `predict`'s dict (and the names of an exported model's outputs)."""
        return (OUTPUT,)

    def features(self, images, training=None):
        """`(maps, class tokens)`: the neck's input: a map per level, a
        class token per level after the ResNet's (None without readout)."""
        s = forward.stages(self.encoder)
        maps, tokens = [], []
        if self._resnet is not None:
            *resnet, stem = self._resnet(images, training=training)
            maps = list(resnet[: self.skip_levels])
        else:
            stem = forward.stem(s, images, training=training)
        x, patches = forward.embed(s, stem, training=training)
        order = sorted(set(self.feature_blocks))
        _, taps = forward.run_blocks(s, x, order, training=training, stop_early=True,
                                     rope=forward.rope(s, patches))
        by_block = dict(zip(order, taps))
        for block in self.feature_blocks:
            y = by_block[block]
            if self.feature_norm:
                y = forward.final_norm(s, y)
            grid, prefix = forward.split_tokens(s, y, patches)
            maps.append(grid)
            if self.readout != "ignore":
                tokens.append(prefix[:, 0])
        return maps, (tokens or None)

    def call(self, images, training=None):
        maps, tokens = self.features(images, training=training)
        fused = self.neck(maps, class_tokens=tokens, training=training)
        depth = self.depth_head(fused[-1], images=images)
        depth = depth[..., 0] if self.bins is None else self.bins(depth)
        return {OUTPUT: ops.cast(depth, "float32")}

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        """`keras.Model.compile` with the task's defaults.

        Args:
            optimizer: "auto" (default: AdamW at 5e-5, keras-hub's) or any
                Keras optimizer.
            loss: "auto" (default: `SiLogLoss`, the scale-invariant log
                loss on valid pixels) or a loss on `(depth, predicted_depth)`.
            metrics: "auto" (default: `AbsRel` and `Delta1`) or a list.
            **kwargs: the rest of `keras.Model.compile`.
        """
        from keras_vit.tasks import dense_training

        if optimizer == "auto":
            optimizer = keras.optimizers.AdamW(5e-5, name="adamw")
        if loss == "auto":
            loss = dense_training.SiLogLoss()
        if metrics == "auto":
            metrics = [dense_training.AbsRel(), dense_training.Delta1()]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def get_config(self):
        return {
            **self.task_config(),
            "feature_blocks": list(self.feature_blocks),
            "neck_channels": list(self.neck.neck_channels),
            "reassemble_factors": list(self.neck.reassemble_factors),
            "fusion_size": self.neck.fusion_size,
            "style": self.style,
            "readout": self.readout,
            "feature_norm": self.feature_norm,
            "head_size": self.head_size,
            "head_projection": self.head_projection,
            "depth": self.depth,
            "max_depth": self.max_depth,
            "min_depth": self.min_depth,
            "num_bins": self.num_bins,
            "bins_strategy": self.bins_strategy,
            "bins_normalization": self.bins_normalization,
            "fusion_batch_norm": self.neck.fusion_batch_norm,
        }

    def save_to_preset(self, directory, format="keras_vit"):
        """Writes the model as a preset directory that `keras_vit.from_preset` reads.

        Args:
            directory: folder to write (created if needed).
            format: "keras_vit" (default: Keras' serialisation and weights,
                reloaded exactly) or "transformers" (the checkpoint's
                transformers class: `DepthAnythingForDepthEstimation`,
                `DPTForDepthEstimation`, `CHMv2ForDepthEstimation`, with
                its `preprocessor_config.json`; refused before writing for
                a model no such class holds).
        """
        from keras_vit.families import task_source as families

        families.save_task_preset(self, directory, format)


def resize_depth(depth, size, mode="bicubic"):
    """A `(h, w)` depth map resized to `size`, as transformers' post-processing does.

    "bicubic": torch's `interpolate(mode="bicubic", align_corners=False)`
    (DPT, Depth Anything); "bilinear_corners": bilinear with
    `align_corners=True` (CHMv2).

    Example:

    >>> resize_depth(np.ones((4, 6), "float32"), (8, 12)).shape
    (8, 12)
    """
    from keras_vit.layers.interpolation import resize_matrix

    depth = np.asarray(depth, "float32")
    if tuple(depth.shape) == tuple(size):
        return depth
    kind = {"bicubic": "bicubic", "bilinear_corners": "linear_corners"}[mode]
    rows = ops.convert_to_numpy(resize_matrix(int(size[0]), depth.shape[0], kind))
    cols = ops.convert_to_numpy(resize_matrix(int(size[1]), depth.shape[1], kind))
    return (rows @ depth @ cols.T).astype("float32")


# How each style's processor maps a prediction back onto its image.
_POST_RESIZE = {"dpt": "bicubic", "depth_anything": "bicubic", "chmv2": "bilinear_corners"}


def estimate_depth(model, images, preprocessing=None, verbose="auto"):
    """One depth map per image, at that image's own size.

    As transformers' `depth-estimation` pipeline: each image is prepared
    as the checkpoint's processor does (`model.preprocessing`: Depth
    Anything and DPT keep the aspect ratio and round the sides to a
    multiple of the patch; CHMv2 pads), the model predicts, and the
    prediction is resized to the image's size (bicubic; CHMv2 bilinear).

    Args:
        model: a `DepthEstimator`, or anything `keras_vit.load_model` takes
            that is one (a preset folder, an `hf://` handle).
        images: file paths, http(s) URLs, PIL images or arrays in [0, 255]
            (or [0, 1], multiplied by 255 with a warning; grey, RGBA,
            channels-first: as every task reads them,
            `keras_vit.tasks.images.read_images`), one or a list (sizes may
            differ).
        preprocessing: None (default: the model's record) or a
            `DenseProcessing` record or its config.
        verbose: "auto" (default: progress for more than one image), 0
            (silent), 1 (progress: a bar on a terminal, plain lines in a
            log) or 2 (one line at the end).

    Returns:
        A list with one dict per image: "predicted_depth", float32
        `(height, width)` at the image's size, and "depth", the same scaled
        to uint8 [0, 255] by its minimum and maximum (the pipeline's
        picture).

    Example:

    >>> import numpy as np, keras_vit
    >>> encoder = keras_vit.ViT(image_size=28, patch_size=7, hidden_size=16, num_layers=2,
    ...                         num_heads=2, mlp_dim=32, include_top=False)
    >>> model = DepthEstimator(encoder, (0, 1), (8, 16), (2, 0.5), 8, head_size=4,
    ...     preprocessing=DenseProcessing(size=(28, 28), resize="keep_aspect", multiple=7))
    >>> result = estimate_depth(model, np.zeros((30, 50, 3), "uint8"))
    >>> result[0]["predicted_depth"].shape, result[0]["depth"].dtype
    ((30, 50), dtype('uint8'))
    """
    from keras_vit.presets.resolver import load_model
    from keras_vit.tasks.images import read_batches
    from keras_vit.validation import check_verbose

    check_verbose(verbose, 1)  # before the model loads
    model = load_model(model)
    if not isinstance(model, DepthEstimator):
        raise ValueError(f"`model` must be a DepthEstimator. Received: {type(model).__name__}")
    record = processing_record(model, preprocessing, "DenseProcessing")
    results = []
    for (image,) in read_batches(images, 1, verbose):  # one image in memory at a time
        prepared = prepare_image(image, record)
        predicted = np.asarray(model.predict_on_batch(prepared.pixels)[OUTPUT])[0]
        depth = resize_depth(predicted, prepared.image_size, _POST_RESIZE[model.style])
        span = float(depth.max() - depth.min())
        scaled = (depth - depth.min()) / span if span > 0 else np.zeros_like(depth)
        results.append({OUTPUT: depth, "depth": (scaled * 255).astype("uint8")})
    return results


__all__ = ["DEPTH_KINDS", "DPT_STYLES", "DepthEstimator", "estimate_depth", "resize_depth"]
