"""Image segmentation: `Segmenter` (EoMT, or a linear head, on a keras_vit
encoder) and `segment`, from image files to label maps and named segments.

`Segmenter(head="eomt")` is the Encoder-only Mask Transformer
(`keras_vit.layers.EomtHead`): learned queries join the encoder's tokens
for its last `num_blocks` blocks, which, where the checkpoint says so
(`mask_probabilities`), attend with masked attention (each query sees only
the patches its previous mask prediction covers); `predict` returns
transformers' `class_queries_logits` and `masks_queries_logits`. It is
built by `keras_vit.from_preset` from `EomtForUniversalSegmentation`
(DINOv2) and `EomtDinov3ForUniversalSegmentation` directories
(`keras_vit.families.eomt`). `Segmenter(head="linear")` is the DINOv2 and
DINOv3 papers' linear protocol: a batch norm and a 1x1 convolution on the
patch features of chosen blocks (`logits`, at the patch grid), for training
on a frozen encoder.

`segment(model, images, task=...)` prepares each image as the checkpoint's
processor does, runs the model and post-processes as transformers' EoMT
image processor (`keras_vit.tasks.segmentation_outputs`): "semantic" (a
class per pixel), "panoptic" and "instance" (segments with class names and
scores).
"""

import warnings

import keras
import numpy as np
from keras import ops

from keras_vit.layers.eomt import EomtHead, QueryTokens
from keras_vit.layers.resize import resize_bilinear, spatial_size
from keras_vit.models import forward
from keras_vit.models.features import check_feature_blocks
from keras_vit.tasks.base import DenseTask, check_encoder, processing_record
from keras_vit.tasks.segmentation_outputs import SUBTASKS
from keras_vit.preprocessing.dense import DenseProcessing
from keras_vit.validation import check_choice, check_float, check_ids, check_int, check_positive_int, check_verbose

HEADS = ("eomt", "linear")
CLASS_LOGITS = "class_queries_logits"
MASK_LOGITS = "masks_queries_logits"
LOGITS = "logits"
# In training only: the predictions before each block with queries, stacked
# on axis 1 (`(batch, num_blocks, ...)`), for the loss's deep supervision.
INTERMEDIATE_CLASS_LOGITS = "intermediate_class_queries_logits"
INTERMEDIATE_MASK_LOGITS = "intermediate_masks_queries_logits"


def check_class_names(class_names, classes):
    """`class_names` as a tuple of `classes` strings, or None."""
    if class_names is None:
        return None
    names = tuple(class_names)
    if len(names) != classes or not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"`class_names` must be {classes} strings, one per class. Received: {len(names)} items, "
            f"class_names={list(names)[:4]!r}..."
        )
    return names


def check_trained_tasks(tasks):
    """`trained_tasks`: None or a tuple of `segment`'s tasks."""
    if tasks is None:
        return None
    out = (tasks,) if isinstance(tasks, str) else tuple(tasks)
    if not out or not all(t in SUBTASKS for t in out):
        raise ValueError(f"`trained_tasks` must be None or some of {SUBTASKS}. Received: trained_tasks={tasks!r}")
    return out


def check_probabilities(values, num_blocks):
    """`mask_probabilities`: one number in [0, 1] per masked block."""
    if values is None:
        return (1.0,) * num_blocks
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        out = ()
    if len(out) != num_blocks or not all(0.0 <= v <= 1.0 for v in out):
        raise ValueError(
            f"`mask_probabilities` must hold {num_blocks} numbers in [0, 1] (one per block with "
            f"queries). Received: mask_probabilities={values!r}"
        )
    return out


@keras.saving.register_keras_serializable(package="keras_vit")
class Segmenter(DenseTask):
    """Segmentation on a keras_vit encoder: EoMT, or a linear head.

    `model(images)` and `predict` return a dict: for "eomt"
    `{"class_queries_logits": (batch, queries, classes + 1),
    "masks_queries_logits": (batch, queries, h, w)}` (the masks at
    `2**num_upscale_blocks` times the patch grid; the last class is "no
    object"), for "linear" `{"logits": (batch, h, w, classes)}` at the
    patch grid; called with `training=True`, EoMT adds the predictions
    made before each block with queries (`intermediate_class_queries_logits`
    `(batch, num_blocks, queries, classes + 1)`,
    `intermediate_masks_queries_logits`). `fit` trains on labels of the
    images' size: class maps `(batch, H, W)` (255 unlabelled) or, for
    panoptic and instance segmentation, `(batch, H, W, 2)` class and
    segment-id maps (`keras_vit.tasks.dense_data` and `instance_data` read
    them from folders). EoMT's compile default
    is the published loss, `MaskClassificationLoss` (queries matched to
    segments, deep supervision); the linear head's is `SegmentationLoss` on
    the per-pixel class scores (`class_log_probabilities`); the metric,
    `SegmentationMeanIoU` on those scores.

    Args:
        encoder: a `keras_vit.ViT` built with `include_top=False`.
        classes: int, the number of classes.
        head: "eomt" (default) or "linear".
        class_names: None or one string per class.
        num_queries: int, default 100 (EoMT).
        num_blocks: int, default 4: the last blocks that carry the queries.
        num_upscale_blocks: int, default 2.
        mask_probabilities: None (default: 1 for every block: masked
            attention always) or one number in [0, 1] per block: the
            probability that a query's attention is masked by its previous
            prediction (transformers' `attn_mask_probs`; published
            checkpoints have annealed them to 0, which leaves the masks out
            of the model). Held as the non-trainable weight
            `eomt_head/mask_probabilities`, which `MaskAnnealing` lowers in
            training.
        feature_blocks: the blocks a "linear" head reads (default the last;
            several are concatenated).
        preprocessing: None, a `DenseProcessing` record or its config.
        trained_tasks: None (default: not known, as for a published
            checkpoint) or the tasks of `segment` the model was fine-tuned
            for: `fit` records ("semantic",) for class maps and all three
            for segments (`MaskClassificationLoss` on panoptic or instance
            labels); `segment` warns when asked for another.
        name: model name.
        **kwargs: Keras' `trainable`, `dtype`, `autocast`.

    Example:

    >>> import numpy as np, keras_vit
    >>> encoder = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=3,
    ...                         num_heads=2, mlp_dim=32, include_top=False)
    >>> model = Segmenter(encoder, classes=4, num_queries=5, num_blocks=2)
    >>> out = model.predict(np.zeros((1, 32, 32, 3), "float32"), verbose=0)
    >>> out["class_queries_logits"].shape, out["masks_queries_logits"].shape
    ((1, 5, 5), (1, 5, 16, 16))

    Reference:
        Kerssies et al., "Your ViT is Secretly an Image Segmentation
        Model", CVPR 2025, arXiv:2503.19108.
    """

    TASK = "Segmenter"
    CLASS_PREDICTOR = ("eomt_head/class_predictor/", "linear_head/")

    def __init__(self, encoder, classes, head="eomt", class_names=None, num_queries=100, num_blocks=4,
                 num_upscale_blocks=2, mask_probabilities=None, feature_blocks=None, preprocessing=None,
                 trained_tasks=None, name="segmenter", **kwargs):
        self._check_keywords(kwargs)
        check_encoder(encoder, self.TASK)
        self.head = check_choice(head, HEADS, "head")
        classes = check_positive_int(classes, "classes")
        eomt = self.head == "eomt"
        if eomt and feature_blocks is not None:
            raise ValueError("`feature_blocks` is for head='linear'; EoMT reads the final tokens.")
        if eomt:
            num_blocks = check_int(num_blocks, "num_blocks", minimum=1, maximum=encoder.num_layers)
        kwargs.setdefault("dtype", encoder.dtype_policy)
        super().__init__(name=name, **kwargs)
        self.encoder, self.classes = encoder, classes
        self.class_names = check_class_names(class_names, classes)
        self.preprocessing = None if preprocessing is None else DenseProcessing.from_config(preprocessing)
        self.num_queries = check_positive_int(num_queries, "num_queries")
        self.num_blocks, self.num_upscale_blocks = num_blocks, num_upscale_blocks
        self.mask_probabilities = check_probabilities(mask_probabilities, num_blocks) if eomt else ()
        self.masked_blocks = tuple(p > 0 for p in self.mask_probabilities)
        self.feature_blocks = None
        self.trained_tasks = check_trained_tasks(trained_tasks)
        dtype = encoder.get_layer("embedding").dtype_policy
        if eomt:
            self.queries = QueryTokens(self.num_queries, name="queries", dtype=dtype)
            self.queries.build((None, None, encoder.hidden_size))
            self.eomt_head = EomtHead(self.num_queries, classes, encoder.num_prefix_tokens, num_upscale_blocks,
                                      mask_probabilities=self.mask_probabilities, name="eomt_head", dtype=dtype)
            self.eomt_head.build([(None, None, encoder.hidden_size), (None, None, None, 1)])
            self.seed_generator = keras.random.SeedGenerator(0, name="mask_seed")
        else:
            blocks = (-1,) if feature_blocks is None else feature_blocks
            self.feature_blocks = check_feature_blocks(blocks, encoder.num_layers)
            self.linear_head = _LinearHead(classes, name="linear_head", dtype=dtype)
            self.linear_head.build((None, None, None, encoder.hidden_size * len(self.feature_blocks)))
        self.built = True

    @property
    def MAIN_OUTPUT(self):  # noqa: N802 (the base class's constant)
        return CLASS_LOGITS if self.head == "eomt" else LOGITS

    @property
    def output_keys(self):
        """The keys of `predict`'s dict (and the names of an exported model's outputs)."""
        return (CLASS_LOGITS, MASK_LOGITS) if self.head == "eomt" else (LOGITS,)

    @property
    def head_layer_names(self):
        return ("queries", "eomt_head", "linear_head")

    @staticmethod
    def new_class_arguments(classes, class_names):
        """The task arguments of a new class predictor (`from_preset(classes=, class_names=)`)."""
        if classes is None:
            if class_names is None:
                raise ValueError("`classes` needs `class_names` or a number.")
            classes = len(class_names)
        return dict(classes=classes, class_names=class_names)

    def with_own_class_predictor(self, checkpoint):
        """`checkpoint` with the class predictor's tensors replaced by this
        model's own (a new, randomly initialised one)."""
        from keras_vit.weights.mapping import checkpoint_key

        params = {k: v for k, v in checkpoint.params.items() if not k.startswith(self.CLASS_PREDICTOR)}
        for variable in self.weights:
            key = checkpoint_key(variable.path)
            if key.startswith(self.CLASS_PREDICTOR):
                params[key] = ops.convert_to_numpy(variable)
        return type(checkpoint)(checkpoint.path, checkpoint.format, params, checkpoint.ignored)

    # The forward pass.

    def _linear(self, images, training):
        s = forward.stages(self.encoder)
        x, patches = forward.embed(s, forward.stem(s, images, training=training), training=training)
        order = sorted(set(self.feature_blocks))
        _, taps = forward.run_blocks(s, x, order, training=training, stop_early=True,
                                     rope=forward.rope(s, patches))
        by_block = dict(zip(order, taps))
        maps = [forward.split_tokens(s, forward.final_norm(s, by_block[b]), patches)[0] for b in self.feature_blocks]
        features = maps[0] if len(maps) == 1 else ops.concatenate(maps, axis=-1)
        return {LOGITS: ops.cast(self.linear_head(features, training=training), "float32")}

    def _attention_mask(self, mask_logits, grid, tokens, probability, training):
        """The blocks' attention mask from the previous mask predictions:
        each query sees the prefix tokens, the queries and the patches its
        mask covers (logit > 0 at the patch grid); with probability `1 -
        probability` a query's mask is lifted (drawn in training and, as in
        transformers, at inference when `0 < probability < 1`; at inference
        a probability weight of 0 lifts every mask)."""
        per_pixel = ops.transpose(mask_logits, (0, 2, 3, 1))
        at_grid = resize_bilinear(per_pixel, grid, align_corners=False)
        batch = ops.shape(at_grid)[0]
        covered = ops.transpose(ops.reshape(at_grid, (batch, -1, self.num_queries)), (0, 2, 1)) > 0
        if self.mask_probabilities_static_below_one or training:
            draw = keras.random.uniform((batch, self.num_queries, 1), seed=self.seed_generator)
            covered = ops.logical_or(covered, draw >= ops.cast(probability, draw.dtype))
        else:
            # The weight decides, not the constructor's value: a block that
            # `MaskAnnealing` brought to 0 attends unmasked, as in training
            # (transformers skips the masks where `attn_mask_probs` is 0).
            covered = ops.logical_or(covered, ops.cast(probability, "float32") <= 0)
        lead = self.num_queries + self.encoder.num_prefix_tokens
        rows = ops.concatenate([ops.ones((batch, self.num_queries, lead), "bool"), covered], axis=2)
        rest = ops.ones((batch, tokens - self.num_queries, tokens), "bool")
        return ops.concatenate([rows, rest], axis=1)

    @property
    def mask_probabilities_static_below_one(self):
        return any(0 < p < 1 for p in self.mask_probabilities)

    def _eomt(self, images, training):
        s = forward.stages(self.encoder)
        x, patches = forward.embed(s, forward.stem(s, images, training=training), training=training)
        grid = spatial_size(patches)
        tables = forward.rope(s, patches)
        start = len(s.blocks) - self.num_blocks
        mask = None
        # In training, the prediction before each block with queries too (the
        # loss's deep supervision); the masked blocks read it at inference.
        intermediate = []
        for i, block in enumerate(s.blocks):
            if i == start:
                x = self.queries(x)
                tables = _with_query_rows(tables, self.num_queries)
            extra = {} if tables is None else {"rope": forward.block_rope(s, tables, i)}
            if i >= start and (training or self.masked_blocks[i - start]):
                masks, classes = self.eomt_head([forward.final_norm(s, x), patches])
                if training:
                    intermediate.append((ops.cast(classes, "float32"), ops.cast(masks, "float32")))
            if i >= start and self.masked_blocks[i - start]:
                tokens = x.shape[1] if x.shape[1] is not None else ops.shape(x)[1]
                mask = self._attention_mask(masks, grid, tokens, self.eomt_head.mask_probability[i - start], training)
            if mask is not None:
                extra["attention_mask"] = mask
            x = block(x, training=training, **extra)
        masks, classes = self.eomt_head([forward.final_norm(s, x), patches])
        out = {CLASS_LOGITS: ops.cast(classes, "float32"), MASK_LOGITS: ops.cast(masks, "float32")}
        if intermediate:
            out[INTERMEDIATE_CLASS_LOGITS] = ops.stack([c for c, _ in intermediate], axis=1)
            out[INTERMEDIATE_MASK_LOGITS] = ops.stack([m for _, m in intermediate], axis=1)
        return out

    def call(self, images, training=None):
        if self.head == "linear":
            return self._linear(images, training)
        return self._eomt(images, training)

    def class_log_probabilities(self, outputs, size=None):
        """Per-pixel log-probabilities of the classes `(batch, h, w, classes)`.

        EoMT's semantic scores (`softmax(class logits)` without "no object",
        times `sigmoid(mask logits)`, summed over the queries, as its
        processor's semantic post-processing) normalised over the classes;
        the linear head's log-softmax. `size`: None, or `(h, w)` to resize
        the scores to first (bilinear, half-pixel) - a label map's size.
        """
        if LOGITS in outputs:
            logits = outputs[LOGITS]
            if size is not None:
                logits = resize_bilinear(logits, size)
            return ops.log_softmax(logits, axis=-1)
        classes = ops.softmax(outputs[CLASS_LOGITS], axis=-1)[..., :-1]
        masks = ops.transpose(outputs[MASK_LOGITS], (0, 2, 3, 1))
        if size is not None:
            masks = resize_bilinear(masks, size)
        scores = ops.einsum("bqc,bhwq->bhwc", classes, ops.sigmoid(masks))
        total = ops.sum(scores, axis=-1, keepdims=True)
        return ops.log(scores / ops.maximum(total, 1e-8) + 1e-8)

    def _main(self, y_pred, y=None):
        # The scores at the labels' size (their last two axes are its height and width).
        if not isinstance(y_pred, dict):
            return y_pred
        size = None if y is None else spatial_size(ops.expand_dims(class_map(y), -1))
        return self.class_log_probabilities(y_pred, size)

    def supervised_predictions(self, outputs):
        """`[(class logits, mask logits)]` of an EoMT output dict: the
        intermediate predictions (in training) and the final one."""
        pairs = []
        if INTERMEDIATE_CLASS_LOGITS in outputs:
            classes, masks = outputs[INTERMEDIATE_CLASS_LOGITS], outputs[INTERMEDIATE_MASK_LOGITS]
            pairs = [(classes[:, j], masks[:, j]) for j in range(classes.shape[1])]
        return pairs + [(outputs[CLASS_LOGITS], outputs[MASK_LOGITS])]

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The compiled loss: a mask-classification loss on every prediction
        (`supervised_predictions`), any other on the per-pixel class scores."""
        if training and y is not None:
            # Fixed when the step is traced: what the labels can teach.
            self.trained_tasks = SUBTASKS if _rank(y) == 4 and _matches(self.loss) else ("semantic",)
        if not _matches(self.loss):
            return super().compute_loss(x, class_map(y), y_pred, sample_weight, training)
        if sample_weight is not None:
            raise ValueError("MaskClassificationLoss weighs segments, not samples: `sample_weight` is not taken.")
        # The points are drawn from the model's seed generator: its state is
        # carried from step to step by every trainer (the loss's own is not,
        # under jax's stateless steps).
        components = self.loss.components(y, self.supervised_predictions(y_pred), seed=self.seed_generator)
        losses = [self.loss.weighted_total(components)]
        losses += [self._aggregate_additional_loss(extra) for extra in self.losses]
        return ops.sum(ops.stack(losses)) if len(losses) > 1 else losses[0]

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        """The compiled metrics on the per-pixel class scores and class maps."""
        return super().compute_metrics(x, class_map(y), y_pred, sample_weight)

    def compile(self, optimizer="auto", loss="auto", metrics="auto", jit_compile="auto", **kwargs):
        """`keras.Model.compile` with the task's defaults.

        Args:
            optimizer: "auto" (default: AdamW at 1e-4) or any Keras optimizer.
            loss: "auto" (default: for EoMT `MaskClassificationLoss`, the
                published loss on every prediction, which trains the queries
                that panoptic and instance segmentation read; for the linear
                head `SegmentationLoss`, the cross-entropy of the per-pixel
                class scores), a `MaskClassificationLoss` (EoMT), or a loss
                on `(class maps, class_log_probabilities)`.
            metrics: "auto" (default: `SegmentationMeanIoU`) or a list.
            jit_compile: as Keras'; a mask-classification loss matches on
                the host, which keeps TensorFlow's steps out of XLA
                (`keras_vit.execution.host`).
            **kwargs: the rest of `keras.Model.compile`.
        """
        from keras_vit.execution.host import keep_out_of_xla
        from keras_vit.tasks import dense_training
        from keras_vit.tasks.mask_classification import MaskClassificationLoss

        if optimizer == "auto":
            optimizer = keras.optimizers.AdamW(1e-4, name="adamw")
        if loss == "auto":
            loss = MaskClassificationLoss() if self.head == "eomt" else dense_training.SegmentationLoss()
        if _matches(loss) and self.head != "eomt":
            raise ValueError("MaskClassificationLoss trains queries: it takes head='eomt'. The linear head trains "
                             "on per-pixel class scores (SegmentationLoss).")
        if metrics == "auto":
            metrics = [dense_training.SegmentationMeanIoU(self.classes)]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, jit_compile=jit_compile, **kwargs)
        if _matches(loss):
            keep_out_of_xla(self, jit_compile)

    def get_config(self):
        return {
            **self.task_config(),
            "classes": self.classes,
            "head": self.head,
            "class_names": None if self.class_names is None else list(self.class_names),
            "num_queries": self.num_queries,
            "num_blocks": self.num_blocks,
            "num_upscale_blocks": self.num_upscale_blocks,
            "mask_probabilities": list(self.mask_probabilities),
            "feature_blocks": None if self.feature_blocks is None else list(self.feature_blocks),
            "trained_tasks": None if self.trained_tasks is None else list(self.trained_tasks),
        }

    def save_to_preset(self, directory, format="keras_vit"):
        """Writes the model as a preset directory that `keras_vit.from_preset` reads.

        Args:
            directory: folder to write (created if needed).
            format: "keras_vit" (default) or "transformers"
                (`EomtForUniversalSegmentation` on a DINOv2-style encoder,
                `EomtDinov3ForUniversalSegmentation` on a DINOv3 one, with
                `id2label` and `preprocessor_config.json`; refused before
                writing for a model neither holds, a linear head among them).
        """
        from keras_vit.families import task_source as families

        families.save_task_preset(self, directory, format)


def _matches(loss):
    """Whether `loss` matches queries to segments (reads every prediction)."""
    return getattr(loss, "matches_on_host", False)


def _rank(labels):
    try:
        return len(labels.shape)
    except ValueError:  # a TensorFlow step traced again for labels of another rank
        raise ValueError(
            "The labels' rank is unknown in this training step: class maps (batch, H, W) and segment maps "
            "(batch, H, W, 2) were given to one compiled model; compile it again between them."
        ) from None


def class_map(labels):
    """The class map of segmentation targets: `(batch, H, W)` class indices,
    or the first channel of `(batch, H, W, 2)` (class, segment id) labels."""
    if labels is None or _rank(labels) != 4:
        return labels
    return labels[..., 0]


def _with_query_rows(tables, count):
    """Rotary tables with `count` identity rows first (the queries turn not)."""
    if tables is None:
        return None
    shape = (count,) + tuple(tables.shape[2:])
    sin, cos = tables[0], tables[1]
    sin = ops.concatenate([ops.zeros(shape, sin.dtype), sin], axis=0)
    cos = ops.concatenate([ops.ones(shape, cos.dtype), cos], axis=0)
    return ops.stack([sin, cos])


@keras.saving.register_keras_serializable(package="keras_vit")
class _LinearHead(keras.layers.Layer):
    """A batch norm and a 1x1 convolution to the classes (sublayers `norm`, `classifier`)."""

    def __init__(self, classes, **kwargs):
        super().__init__(**kwargs)
        self.classes = check_positive_int(classes, "classes")

    def build(self, input_shape):
        self.norm = keras.layers.BatchNormalization(epsilon=1e-5, name="norm", dtype=self.dtype_policy)
        self.norm.build(input_shape)
        self.classifier = keras.layers.Dense(self.classes, name="classifier", dtype=self.dtype_policy)
        self.classifier.build(input_shape)
        self.built = True

    def call(self, x, training=None):
        return self.classifier(self.norm(x, training=training))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.classes,)

    def get_config(self):
        config = super().get_config()
        config["classes"] = self.classes
        return config


def _check_subtask(model, task, record):
    if task != "semantic" and model.head != "eomt":
        raise ValueError(f"The linear head labels pixels, not segments: it takes task='semantic'. Received: task={task!r}")
    if task != "semantic" and record.split:
        raise ValueError(
            f"task={task!r} reads whole images, and this checkpoint's processing cuts them into squares "
            "(split=True, a semantic checkpoint's): pass preprocessing=DenseProcessing(..., split=False, pad='end')."
        )


def _warn_untrained(model, task):
    """A warning where the model's fine-tuning did not train `task`."""
    trained = getattr(model, "trained_tasks", None)
    if trained is None or task in trained:
        return
    warnings.warn(
        f"Model {model.name!r} was fine-tuned for {', '.join(trained)} segmentation only (trained_tasks="
        f"{list(trained)}): its queries' classes and masks were not trained as {task} segments, and its "
        f"{task} segments may be wrong. Fine-tune it on instance or panoptic labels (class and segment-id "
        "maps, keras_vit.tasks.dense_data) with MaskClassificationLoss for panoptic and instance segmentation.",
        stacklevel=3,
    )


def check_segment_arguments(task, threshold, mask_threshold, overlap_mask_area_threshold, batch_size, verbose):
    """`segment`'s arguments that need no model, checked by name: `(threshold,
    mask_threshold, overlap_mask_area_threshold)` as floats."""
    from keras_vit.tasks.segmentation_outputs import SUBTASKS

    check_choice(task, SUBTASKS, "task")
    check_positive_int(batch_size, "batch_size")
    check_verbose(verbose, 1)
    return tuple(check_float(value, name, minimum=0.0, maximum=1.0) for value, name in (
        (threshold, "threshold"), (mask_threshold, "mask_threshold"),
        (overlap_mask_area_threshold, "overlap_mask_area_threshold")))


def _outputs(model, pixels, batch_size):
    parts = [model.predict_on_batch(pixels[i : i + batch_size]) for i in range(0, len(pixels), batch_size)]
    return {key: np.concatenate([np.asarray(p[key]) for p in parts]) for key in parts[0]}


def segment(model, images, task="semantic", threshold=0.9, mask_threshold=0.5, overlap_mask_area_threshold=0.5,
            stuff_classes=None, preprocessing=None, batch_size=8, verbose="auto"):
    """Segments each image: a label map at its own size and its segments, named.

    As transformers' `image-segmentation` pipeline and EoMT's image
    processor: each image is prepared as the checkpoint's processor does
    (`model.preprocessing`: resized, then padded or cut into overlapping
    squares), the model predicts, and the outputs are post-processed
    (`keras_vit.tasks.segmentation_outputs`).

    Args:
        model: a `Segmenter`, or anything `keras_vit.load_model` takes that is one.
        images: file paths, http(s) URLs, PIL images or arrays in [0, 255]
            (or [0, 1]; grey, RGBA, channels-first: as every task reads
            them, `keras_vit.tasks.images.read_images`), one or a list.
        task: "semantic" (default: a class per pixel), "panoptic" or
            "instance" (EoMT only: segments of things and stuff, or of
            object instances).
        threshold: float in [0, 1], default 0.9 (the pipeline's): the
            smallest class probability (panoptic) or score (instance) of a
            segment.
        mask_threshold: float in [0, 1], default 0.5: a mask's pixels
            (panoptic).
        overlap_mask_area_threshold: float in [0, 1], default 0.5: the
            share of its mask a segment must keep after overlaps (panoptic).
        stuff_classes: None or class ids of the model (in `[0, classes)`)
            whose queries share one segment (panoptic).
        preprocessing: None (default: the model's record) or a `DenseProcessing`.
        batch_size: int >= 1, default 8: images (or squares) per forward pass.
        verbose: "auto" (default: progress for more than one image), 0
            (silent), 1 (progress: a bar on a terminal, plain lines in a
            log) or 2 (one line at the end).

    Returns:
        A list with one dict per image: "segmentation", int32 `(height,
        width)` at the image's size (semantic: the class of each pixel;
        panoptic and instance: the segment id of each pixel, -1 where none),
        and "segments", a list of dicts with "id", "label_id", "label" (the
        class name, or None for a model without names) and "score" (None
        for semantic segments).

    Raises:
        ValueError: an argument out of its range or of the wrong type
            (named, before the model loads or any image is read), an
            image that cannot be read (named by its place in `images`).

    Example:

    >>> import numpy as np, keras_vit
    >>> encoder = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=2,
    ...                         num_heads=2, mlp_dim=32, include_top=False)
    >>> model = Segmenter(encoder, classes=2, class_names=["sky", "sea"], num_queries=3, num_blocks=1,
    ...     preprocessing=DenseProcessing(size=(32, 32), resize="shorter_side", pad="end"))
    >>> result = segment(model, np.zeros((20, 30, 3), "uint8"))[0]
    >>> result["segmentation"].shape, {s["label"] for s in result["segments"]} <= {"sea", "sky"}
    ((20, 30), True)
    """
    from keras_vit.tasks.images import read_batches
    from keras_vit.presets.resolver import load_model
    from keras_vit.tasks import segmentation_outputs as post
    from keras_vit.preprocessing.dense import prepare_image

    threshold, mask_threshold, overlap_mask_area_threshold = check_segment_arguments(
        task, threshold, mask_threshold, overlap_mask_area_threshold, batch_size, verbose)
    model = load_model(model)
    if not isinstance(model, Segmenter):
        raise ValueError(f"`model` must be a Segmenter. Received: {type(model).__name__}")
    stuff_classes = check_ids(stuff_classes, "stuff_classes", model.classes)
    record = processing_record(model, preprocessing, "DenseProcessing")
    record = DenseProcessing.from_config(record)
    _check_subtask(model, task, record)
    _warn_untrained(model, task)
    results = []
    for (image,) in read_batches(images, 1, verbose):  # one image in memory at a time
        prepared = prepare_image(image, record)
        out = _outputs(model, prepared.pixels, batch_size)
        if model.head == "linear":
            segmentation, segments = post.semantic(post.linear_scores(out[LOGITS]), prepared.image_size)
        elif task == "semantic":
            scores = post.semantic_scores(out[CLASS_LOGITS], out[MASK_LOGITS], prepared, record)
            segmentation, segments = post.semantic(scores, prepared.image_size)
        elif task == "panoptic":
            segmentation, segments = post.panoptic(
                out[CLASS_LOGITS], out[MASK_LOGITS], prepared, record, threshold, mask_threshold,
                overlap_mask_area_threshold, stuff_classes,
            )
        else:
            segmentation, segments = post.instance(out[CLASS_LOGITS], out[MASK_LOGITS], prepared, record, threshold)
        names = model.class_names
        for item in segments:
            item["label"] = None if names is None else names[item["label_id"]]
        results.append({"segmentation": segmentation, "segments": segments})
    return results
