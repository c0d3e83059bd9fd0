"""Promptable segmentation (SAM): the task model and its one-call function
`keras_vit.segment_prompts` (`keras_vit.generate_masks` is in
`keras_vit.tasks.mask_generation`, the masks' post-processing in
`keras_vit.tasks.mask_outputs`).

`PromptableSegmenter` holds SAM's two parts as separate models, as SAM is
served: `image_embedder`, a `keras_vit.ViT` image encoder (windowed blocks
with decomposed relative positions and a few global ones, a convolutional
neck) whose tokens are laid on their grid, run once per image; and
`prompt_decoder` (`keras_vit.layers.prompt_encoder.PromptEncoder` and
`keras_vit.layers.mask_decoder.MaskDecoder`), run per prompt on that image
embedding. The segmenter itself is both in one graph, image and prompts in,
for `predict` on one prompt per image.

The prompt decoder takes every prompt as labelled points: positive (1) and
negative (0) clicks, a box as its two corners (labels 2 and 3), and when no
box follows the clicks SAM's padding point (label -1); a low-resolution
mask (logits, `4 *` the embedding's grid) with `has_mask_input` 1, or zeros
and 0. Its outputs are every mask (the single-mask output first, then the
multimask ones) and their predicted IoU.

Kirillov et al., "Segment Anything", ICCV 2023, arXiv:2304.02643.
"""

import os

import keras
import numpy as np

from keras_vit.families import sam
from keras_vit.layers.mask_decoder import MaskDecoder
from keras_vit.layers.prompt_encoder import PromptEncoder
from keras_vit.preprocessing import Preprocessing, preprocess_input, resize_and_crop
from keras_vit.tasks.base import ExportableTask, task_from_preset
from keras_vit.tasks.images import read_images
from keras_vit.tasks.mask_outputs import postprocess_masks
from keras_vit.validation import check_bool, check_float, check_positive_int
from keras_vit.weights import shards
from keras_vit.weights.files import read_json
from keras_vit.weights.loader import load_checkpoint

OUTPUTS = ("iou_scores", "pred_masks")


def _serialize(layer):
    return keras.saving.serialize_keras_object(layer)


@keras.saving.register_keras_serializable(package="keras_vit")
class ImageEmbedder(ExportableTask, keras.Model):
    """SAM's image side: images to the image embedding `(batch, gh, gw, D)`,
    the image encoder's neck tokens on their grid; run once per image.

    Args:
        image_encoder: a `keras_vit.ViT` whose output is its neck's tokens.
        name: the model's name.
    """

    def __init__(self, image_encoder, name="image_embedder", **kwargs):
        images = keras.Input(tuple(image_encoder.input_shape[1:]), name="images")
        shape = tuple(image_encoder.grid_size) + (image_encoder.output_shape[-1],)
        embeddings = keras.layers.Reshape(shape, name="image_embedding")(image_encoder(images))
        super().__init__(inputs=images, outputs=embeddings, name=name, **kwargs)
        self.image_encoder = image_encoder

    def get_config(self):
        return {"image_encoder": _serialize(self.image_encoder), "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        return cls(**dict(config, image_encoder=keras.saving.deserialize_keras_object(config["image_encoder"])))


@keras.saving.register_keras_serializable(package="keras_vit")
class PromptDecoder(ExportableTask, keras.Model):
    """SAM's prompt side: `{"image_embeddings", "points", "labels",
    "mask_input", "has_mask_input"}` to `{"iou_scores", "pred_masks"}`, one
    prompt per row; run per prompt on an image's embedding.

    Args:
        prompt_encoder: a `keras_vit.layers.prompt_encoder.PromptEncoder`.
        mask_decoder: a `keras_vit.layers.mask_decoder.MaskDecoder`.
        channels: int, the image embedding's width.
        num_points: None (default: any number of points per prompt) or an
            int, fixed (an exported decoder takes a fixed number:
            `with_points`).
        name: the model's name.
    """

    def __init__(self, prompt_encoder, mask_decoder, channels, num_points=None, name="prompt_decoder", **kwargs):
        grid = tuple(prompt_encoder.grid_size)
        self.num_points = check_positive_int(num_points, "num_points", allow_none=True)
        inputs = {
            "has_mask_input": keras.Input((1,), name="has_mask_input"),
            "image_embeddings": keras.Input(grid + (int(channels),), name="image_embeddings"),
            "labels": keras.Input((self.num_points,), dtype="int32", name="labels"),
            "mask_input": keras.Input((4 * grid[0], 4 * grid[1], 1), name="mask_input"),
            "points": keras.Input((self.num_points, 2), name="points"),
        }
        sparse, dense, positions = prompt_encoder(inputs["points"], inputs["labels"], inputs["mask_input"],
                                                  inputs["has_mask_input"])
        masks, iou = mask_decoder(inputs["image_embeddings"] + dense, positions, sparse)
        super().__init__(inputs=inputs, outputs={"iou_scores": iou, "pred_masks": masks}, name=name, **kwargs)
        self.prompt_encoder, self.mask_decoder, self.channels = prompt_encoder, mask_decoder, int(channels)

    def export_signature(self, batch_size=None):
        """The exported inputs, one `keras.InputSpec` per name, their sizes
        fixed (the decoder's `num_points`: `with_points`).

        Raises:
            ValueError: for a decoder of any number of points.
        """
        if self.num_points is None:
            raise ValueError(
                f"Decoder {self.name!r} takes any number of points; an artifact takes a fixed number: export "
                "`with_points(n)` (clicks, SAM's padding point and box corners counted)."
            )
        return {name: keras.InputSpec(shape=(batch_size,) + tuple(tensor.shape[1:]), dtype=str(tensor.dtype),
                                      name=name) for name, tensor in self.input.items()}

    def with_points(self, num_points):
        """The same decoder (its layers shared) for prompts of exactly
        `num_points` points (clicks, SAM's padding point and box corners
        counted), as an artifact takes them."""
        return PromptDecoder(self.prompt_encoder, self.mask_decoder, self.channels, num_points,
                             name=f"{self.name}_{num_points}_points")

    def get_config(self):
        return {"prompt_encoder": _serialize(self.prompt_encoder), "mask_decoder": _serialize(self.mask_decoder),
                "channels": self.channels, "num_points": self.num_points, "name": self.name,
                "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("prompt_encoder", "mask_decoder"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


@keras.saving.register_keras_serializable(package="keras_vit")
class PromptableSegmenter(keras.Model):
    """SAM: masks and their quality from an image and prompts.

    A functional model: `{"images": (batch, H, W, C), "points": (batch, n,
    2), "labels": (batch, n), "mask_input": (batch, 4 gh, 4 gw, 1),
    "has_mask_input": (batch, 1)}` to `{"iou_scores": (batch, masks),
    "pred_masks": (batch, masks, 4 gh, 4 gw)}` (low-resolution mask logits):
    transformers' `SamModel` with every mask (`multimask_output` picks the
    last `num_multimask_outputs`, else the first). Points are `(x, y)` in
    the model input's pixels; images are preprocessed as
    `keras_vit.preprocess_input(x, model=segmenter)` says and padded to the
    input size (`segment_prompts` does it all).

    Attributes:
        image_embedder: an `ImageEmbedder`, images to the image embedding
            `(batch, gh, gw, D)`.
        prompt_decoder: a `PromptDecoder`, `{"image_embeddings", "points",
            "labels", "mask_input", "has_mask_input"}` to the outputs, one
            prompt per row.

    Args:
        image_encoder: a `keras_vit.ViT` whose output is its neck's tokens
            (`neck_channels`, `include_top=False`, `pooling=None`).
        prompt_encoder: a `keras_vit.layers.prompt_encoder.PromptEncoder`.
        mask_decoder: a `keras_vit.layers.mask_decoder.MaskDecoder`.
        longest_edge: None (default: the input's side) or an int: images
            are resized so that their longer side is this long, then padded.
        name: the model's name.

    Example:

    >>> import keras_vit, numpy as np
    >>> from keras_vit.layers.prompt_encoder import PromptEncoder
    >>> from keras_vit.layers.mask_decoder import MaskDecoder
    >>> encoder = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
    ...                         mlp_dim=32, classifier="gap", include_top=False, neck_channels=8)
    >>> segmenter = PromptableSegmenter(
    ...     encoder, PromptEncoder(8, image_size=32, grid_size=4, mask_channels=4),
    ...     MaskDecoder(num_layers=1, num_heads=2, mlp_dim=16, iou_head_hidden_dim=8))
    >>> embedding = segmenter.image_embedder.predict(np.zeros((1, 32, 32, 3)), verbose=0)
    >>> embedding.shape
    (1, 4, 4, 8)
    >>> out = segmenter.prompt_decoder.predict(segmenter.decoder_inputs(embedding, [[[3.0, 4.0]]], [[1]]), verbose=0)
    >>> out["pred_masks"].shape, out["iou_scores"].shape
    ((1, 4, 16, 16), (1, 4))
    """

    def __init__(self, image_encoder, prompt_encoder, mask_decoder, longest_edge=None, name="segmenter", **kwargs):
        grid = image_encoder.grid_size
        if tuple(prompt_encoder.grid_size) != tuple(grid):
            raise ValueError(
                f"The prompt encoder's grid {prompt_encoder.grid_size} must be the image encoder's {grid}."
            )
        image_embedder = ImageEmbedder(image_encoder, name=f"{name}_image_embedder")
        prompt_decoder = PromptDecoder(prompt_encoder, mask_decoder, image_encoder.output_shape[-1],
                                       name=f"{name}_prompt_decoder")
        images = keras.Input(tuple(image_encoder.input_shape[1:]), name="images")
        whole = {k: keras.Input(v.shape[1:], dtype=v.dtype, name=k) for k, v in prompt_decoder.input.items()
                 if k != "image_embeddings"}
        outputs = prompt_decoder({"image_embeddings": image_embedder(images), **whole})
        super().__init__(inputs={"images": images, **whole}, outputs=outputs, name=name, **kwargs)
        self.image_encoder, self.prompt_encoder, self.mask_decoder = image_encoder, prompt_encoder, mask_decoder
        self.image_embedder, self.prompt_decoder = image_embedder, prompt_decoder
        self.longest_edge = check_positive_int(longest_edge or max(image_encoder.image_size), "longest_edge")

    @classmethod
    def from_preset(cls, handle, **overrides):
        """A segmenter from a transformers `SamModel` directory or a
        keras-hub `SAMBackbone` preset (local, `hf://` or `kaggle://`),
        every tensor loaded or ignored by name (`keras_vit.families.sam`).
        `keras_vit.from_preset(handle, dtype=...)`, refusing a checkpoint
        of another model."""
        return task_from_preset(cls, handle, **overrides)

    @classmethod
    def from_transformers(cls, directory, dtype=None):
        """The reader of a local transformers `SamModel` directory
        (`keras_vit.presets.tasks.TASK_PRESETS`): `read_transformers`."""
        return read_transformers(directory, dtype)

    @classmethod
    def from_keras_hub(cls, directory, dtype=None):
        """The reader of a local keras-hub `SAMBackbone` preset
        (`keras_vit.presets.tasks.TASK_PRESETS`): `read_keras_hub`."""
        return read_keras_hub(directory, dtype)

    @property
    def preprocessing(self):
        """The image encoder's `Preprocessing` record."""
        return getattr(self.image_encoder, "preprocessing", None)

    @property
    def image_size(self):
        """`(height, width)` of the model input (the padded square)."""
        return tuple(self.image_encoder.image_size)

    @property
    def num_masks(self):
        """Masks per prompt: the single-mask output, then the multimask ones."""
        return self.mask_decoder.num_masks

    def decoder_inputs(self, image_embeddings, points, labels, mask_input=None):
        """The prompt decoder's input dict for one prompt per row.

        Args:
            image_embeddings: `(batch, gh, gw, D)`.
            points: `(batch, n, 2)` `(x, y)` in the model input's pixels.
            labels: `(batch, n)` point labels
                (`keras_vit.layers.prompt_encoder.POINT_LABELS`).
            mask_input: None or `(batch, 4 gh, 4 gw)` mask logits.
        """
        embeddings = np.asarray(image_embeddings, "float32")
        batch, (gh, gw) = len(embeddings), self.image_encoder.grid_size
        has = np.zeros((batch, 1), "float32")
        masks = np.zeros((batch, 4 * gh, 4 * gw, 1), "float32")
        if mask_input is not None:
            masks[..., 0], has[:] = np.asarray(mask_input, "float32"), 1.0
        return {"image_embeddings": embeddings, "points": np.asarray(points, "float32"),
                "labels": np.asarray(labels, "int32"), "mask_input": masks, "has_mask_input": has}

    def export(self, filepath, format="onnx", verbose=None, input_signature=None, **kwargs):
        """Refuses: export the two parts, `image_embedder` and `prompt_decoder`,
        as SAM is served (the image once, the decoder per prompt)."""
        raise ValueError(
            f"Export the segmenter's two parts: `{self.name}.image_embedder` (once per image) and "
            f"`{self.name}.prompt_decoder` (per prompt), through keras_vit.export.export_model."
        )

    def get_config(self):
        return {"image_encoder": _serialize(self.image_encoder), "prompt_encoder": _serialize(self.prompt_encoder),
                "mask_decoder": _serialize(self.mask_decoder), "longest_edge": self.longest_edge,
                "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("image_encoder", "prompt_encoder", "mask_decoder"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


def read_transformers(directory, dtype=None):
    """A `PromptableSegmenter` from a transformers `SamModel` directory."""
    config = read_json(os.path.join(directory, "config.json"))
    prep_path = os.path.join(directory, "preprocessor_config.json")
    segmenter = _build(config, read_json(prep_path) if os.path.isfile(prep_path) else None, dtype)
    state, path = shards.read_state(directory)
    return _load(segmenter, *sam.read(state, config, path))


def _build(config, processor_file, dtype):
    """A new `PromptableSegmenter` of a `SamModel`-shaped config dict."""
    from keras_vit.models import ViT

    record, longest = sam.preprocessing(config, processor_file)
    overrides = {} if dtype is None else {"dtype": dtype}
    image_encoder = ViT(**sam.image_arguments(config), preprocessing=record, name="image_encoder", **overrides)
    prompt_args, decoder_args = sam.decoder_arguments(config)
    return PromptableSegmenter(
        image_encoder, PromptEncoder(**prompt_args, name="prompt_encoder", **overrides),
        MaskDecoder(**decoder_args, name="mask_decoder", **overrides), longest_edge=longest, name="sam", **overrides,
    )


def _load(segmenter, image, decoder):
    """Loads the image encoder's and the prompt decoder's `Checkpoint`s, strictly."""
    load_checkpoint(segmenter.image_encoder, image)
    load_checkpoint(segmenter.prompt_decoder, decoder)
    return segmenter


def read_keras_hub(directory, dtype=None):
    """A `PromptableSegmenter` from a keras-hub `SAMBackbone` (or
    `SAMImageSegmenter`) preset: keras-hub loads its variables, read by
    attribute (`keras_vit.families.sam.keras_hub_state`); its images are
    prepared as SAM's (the longer side resized to the input size, ImageNet
    statistics, zero padding)."""
    try:
        import keras_hub
    except ImportError:
        raise ImportError(f"Reading the keras-hub preset {directory!r} needs keras-hub (`pip install keras-hub`).") from None

    config = sam.keras_hub_config(read_json(os.path.join(directory, "config.json")))
    # keras-hub builds the mask decoder only in the segmenter's graph: build
    # it there, then load the backbone's file (its only weights).
    backbone = keras_hub.models.Backbone.from_preset(directory, load_weights=False)
    keras_hub.models.SAMImageSegmenter(backbone=backbone)
    path = os.path.join(directory, "model.weights.h5")
    backbone.load_weights(path)
    state = sam.keras_hub_state(backbone, config)
    del backbone
    return _load(_build(config, None, dtype), *sam.read(state, config, path))


# --- preparing images and prompts --------------------------------------------


def resized_shape(size, longest_edge):
    """The `(height, width)` an image of `size` is resized to: its longer
    side `longest_edge`, the other rounded half up (`SamImageProcessor`).

    Example:

    >>> resized_shape((300, 451), 1024)
    (681, 1024)
    """
    scale = longest_edge / max(size)
    return int(size[0] * scale + 0.5), int(size[1] * scale + 0.5)


def prepare_image(model, image):
    """`(input (1, H, W, 3), original size, resized size)`: one image read
    (grayscale repeated to RGB, an alpha channel dropped as Pillow's
    `convert("RGB")` does), its longer side resized to the model's
    `longest_edge` (bilinear), normalised and padded with zeros at the
    bottom and right to the model's input size."""
    images = read_images(image)
    if len(images) != 1:
        raise ValueError(f"`image` must be one image. Received: {len(images)} images")
    pixels = images[0]
    size = tuple(pixels.shape[:2])
    shape = resized_shape(size, model.longest_edge)
    record = model.preprocessing
    straight = Preprocessing(mean=record.mean, std=record.std, image_size=shape, interpolation=record.interpolation)
    resized = resize_and_crop(pixels, straight)  # uint8, or float32 in [0, 255] (`read_images`)
    x = preprocess_input(resized, preprocessing=record)
    height, width = model.image_size
    padded = np.zeros((1, height, width, 3), "float32")
    padded[0, : shape[0], : shape[1]] = x
    return padded, size, shape


def _as_array(value, name, last, rank):
    shape = ("prompts", "n", 2)[3 - rank:][:-1] + (last,)
    allowed = (f"`{name}` must be finite numbers with shape {shape} (one prompt may leave out the first "
               "axis) in the image's pixels")
    try:
        array = np.asarray(value, "float64")
    except (TypeError, ValueError):
        raise ValueError(f"{allowed}. Received: {name}={value!r}") from None
    if array.ndim == rank - 1:
        array = array[None]
    if array.ndim != rank or array.shape[-1] != last or not np.all(np.isfinite(array)):
        raise ValueError(f"{allowed}. Received: shape {np.asarray(value).shape}, {name}={value!r}")
    return array


def _check_points(points, labels, size):
    points = _as_array(points, "points", 2, 3)
    height, width = size
    outside = (points[..., 0] < 0) | (points[..., 0] > width) | (points[..., 1] < 0) | (points[..., 1] > height)
    if outside.any():
        first = points[np.nonzero(outside)][0].tolist()
        raise ValueError(f"`points` must lie in the image (x in [0, {width}], y in [0, {height}]). "
                         f"Received: {int(outside.sum())} points outside, the first {first}")
    labels = np.ones(points.shape[:2], "int64") if labels is None else np.asarray(labels, dtype=object)
    if labels.ndim == 1:
        labels = labels[None]
    numbers = all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                  for v in labels.reshape(-1))
    if labels.shape != points.shape[:2] or not numbers or not np.isin(labels.astype("float64"), (0, 1)).all():
        raise ValueError(f"`labels` must be one 0 (background) or 1 (object) per point, shape {points.shape[:2]}. "
                         f"Received: {np.asarray(labels).tolist()!r}")
    return points, labels.astype("int32")


def _check_boxes(boxes, size):
    boxes = _as_array(boxes, "boxes", 4, 2)
    height, width = size
    if np.any(boxes[:, 2] < boxes[:, 0]) or np.any(boxes[:, 3] < boxes[:, 1]):
        raise ValueError(f"`boxes` must be (x0, y0, x1, y1) with x1 >= x0 and y1 >= y0. Received: {boxes.tolist()}")
    if np.any(boxes < 0) or np.any(boxes[:, [0, 2]] > width) or np.any(boxes[:, [1, 3]] > height):
        raise ValueError(f"`boxes` must lie in the image ({width} x {height}). Received: {boxes.tolist()}")
    return boxes


def prompt_points(size, shape, points=None, labels=None, boxes=None):
    """`(points (prompts, n, 2), labels (prompts, n))` for the prompt
    decoder, in the resized image's pixels, as transformers' `SamProcessor`
    and `SamPromptEncoder` put them: the clicks, SAM's padding point when no
    box follows, the box's corners.

    Args:
        size: `(height, width)` of the original image; shape: of the resized.
        points: None, `(n, 2)` or `(prompts, n, 2)` `(x, y)` in the original
            image's pixels.
        labels: None (every point on the object) or `(prompts, n)` 0 / 1.
        boxes: None, `(4,)` or `(prompts, 4)` `(x0, y0, x1, y1)`.

    Raises:
        ValueError: no prompt, points or boxes outside the image, boxes with
            x1 < x0 or y1 < y0, labels other than 0 and 1, or prompt counts
            that differ.

    Example:

    >>> p, l = prompt_points((100, 200), (512, 1024), points=[[10, 20]])
    >>> p.astype("float64").round(3).tolist(), l.tolist()
    ([[[51.2, 102.4], [0.0, 0.0]]], [[1, -1]])
    """
    if points is None and boxes is None:
        raise ValueError("Give a prompt: `points` (with `labels`), `boxes` or both.")
    scale = np.array([shape[1] / size[1], shape[0] / size[0]])
    parts, part_labels = [], []
    if points is not None:
        points, labels = _check_points(points, labels, size)
        parts.append(points * scale)
        part_labels.append(labels)
    count = len(parts[0]) if parts else None
    if boxes is not None:
        boxes = _check_boxes(boxes, size)
        if count is not None and len(boxes) != count:
            raise ValueError(f"`points` and `boxes` must give as many prompts. Received: {count} and {len(boxes)}")
        parts.append(boxes.reshape(-1, 2, 2) * scale)
        part_labels.append(np.tile([[2, 3]], (len(boxes), 1)))
    else:
        parts.append(np.zeros((count, 1, 2)))
        part_labels.append(np.full((count, 1), -1))
    return np.concatenate(parts, axis=1).astype("float32"), np.concatenate(part_labels, axis=1).astype("int32")


def check_prompt(points=None, labels=None, boxes=None):
    """Raises the `ValueError` of a prompt that fits no image.

    What `prompt_points` checks that does not depend on the image's size:
    a prompt given, finite numbers of the right shapes, a 0 or 1 label per
    point, boxes with x1 >= x0 and y1 >= y0, no negative pixel, as many
    prompts of points as of boxes. A command that prompts many images
    checks this once, before any.

    Args:
        points, labels, boxes: as `segment_prompts` takes them.

    Example:

    >>> check_prompt(points=[[10, 20], [30, 40]], labels=[1, 0])
    >>> check_prompt(points=[[10, 20], [30, 40]], labels=[1])
    Traceback (most recent call last):
    ...
    ValueError: `labels` must be one 0 (background) or 1 (object) per point, shape (1, 2). Received: [[1]]
    """
    prompt_points((np.inf, np.inf), (1, 1), points=points, labels=labels, boxes=boxes)


def embed_image(model, image):
    """`(segmenter, image embedding (1, gh, gw, D), original size, resized
    size)` of one image (`prepare_image`, then `image_embedder`); `model`
    may be a directory or handle, read with `PromptableSegmenter.from_preset`."""
    model = _segmenter(model)
    x, size, shape = prepare_image(model, image)
    return model, model.image_embedder.predict_on_batch(x), size, shape


def _segmenter(model):
    if isinstance(model, (str, os.PathLike)):
        return PromptableSegmenter.from_preset(model)
    if not isinstance(model, PromptableSegmenter):
        raise ValueError(f"`model` must be a PromptableSegmenter. Received: {model!r}")
    return model


def decode_prompts(model, embedding, points, labels, batch_size):
    """The prompt decoder's outputs for prompts `(prompts, n, 2)` and their
    labels on one image embedding, `batch_size` prompts per call."""
    out = {k: [] for k in OUTPUTS}
    for start in range(0, len(points), batch_size):
        rows = slice(start, start + batch_size)
        count = len(points[rows])
        tiled = np.repeat(np.asarray(embedding), count, axis=0)
        result = model.prompt_decoder.predict_on_batch(model.decoder_inputs(tiled, points[rows], labels[rows]))
        for key in OUTPUTS:
            out[key].append(np.asarray(result[key]))
    return {k: np.concatenate(v) for k, v in out.items()}


def _selected(model, multimask_output):
    return slice(1, None) if multimask_output else slice(0, 1)


def segment_prompts(model, image, points=None, labels=None, boxes=None, multimask_output=True, batch_size=16,
                    mask_threshold=0.0):
    """Masks of the objects that prompts point at, in one image.

    The image is embedded once; the prompts are decoded in batches. Each
    prompt is a set of clicks (`points` with their `labels`), a box, or
    both; the masks come back at the image's size as
    `SamProcessor.post_process_masks` gives them.

    Args:
        model: a `PromptableSegmenter`, or a transformers `SamModel`
            directory or `hf://` handle.
        image: a file path, http(s) URL, PIL image or `[0, 255]` array (or
            `[0, 1]`, multiplied by 255 with a warning; grayscale is
            repeated to RGB, an alpha channel dropped, a channels-first
            array turned channels-last: as every task reads images,
            `keras_vit.tasks.images.read_images`).
        points: None, `(n, 2)` (one prompt) or `(prompts, n, 2)` `(x, y)` in
            the image's pixels.
        labels: None (every point on the object) or one 0 / 1 per point.
        boxes: None, `(4,)` or `(prompts, 4)` `(x0, y0, x1, y1)` pixels.
        multimask_output: bool, default True: three masks per prompt (for
            an ambiguous click), else SAM's single mask.
        batch_size: int >= 1, default 16: prompts per decoder call.
        mask_threshold: float (finite), default 0: the logit above which a
            pixel is in.

    Returns:
        A dict: "masks" `(prompts, masks, height, width)` booleans,
        "iou_scores" `(prompts, masks)` and "low_res_masks" `(prompts,
        masks, 4 gh, 4 gw)` logits.

    Raises:
        ValueError: no prompt, a point or box outside the image, a box with
            x1 < x0 or y1 < y0, labels other than 0 and 1, an argument of
            the wrong type or out of its range (named).
    """
    check_bool(multimask_output, "multimask_output")
    batch_size = check_positive_int(batch_size, "batch_size")
    mask_threshold = check_float(mask_threshold, "mask_threshold")
    if points is None and boxes is None:  # before the image is embedded
        raise ValueError("Give a prompt: `points` (with `labels`), `boxes` or both.")
    model, embedding, size, shape = embed_image(model, image)
    points, labels = prompt_points(size, shape, points, labels, boxes)
    out = decode_prompts(model, embedding, points, labels, batch_size)
    chosen = _selected(model, multimask_output)
    low_res, iou = out["pred_masks"][:, chosen], out["iou_scores"][:, chosen]
    masks = postprocess_masks(low_res, model.image_size, shape, size, threshold=mask_threshold)
    return {"masks": masks, "iou_scores": iou, "low_res_masks": low_res}
