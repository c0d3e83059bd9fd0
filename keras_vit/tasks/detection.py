"""Open-vocabulary detection (OWL-ViT, OWLv2): the task model, its one call
`keras_vit.detect`.

`OpenVocabularyDetector` is a CLIP vision tower (a `keras_vit.ViT` that
returns every token) with OWL-ViT's heads on its patch tokens
(`keras_vit.layers.detection_heads`): a box, a class embedding and, for
OWLv2, an objectness logit per patch, and class logits against query
embeddings, which come from its text tower (`encode_texts`) or from example
images (`encode_image_queries`). Query embeddings computed once serve any
number of images; `with_queries` makes a detector of fixed classes, a model
from images alone that `model.export` writes.

`detect(model, images, queries=[...])` reads the images, prepares them as
the checkpoint's processor does (OWL-ViT: a straight bicubic resize;
OWLv2: padded to a square, bottom and right, and resized with a Gaussian
blur against aliasing), runs the model and returns, per image, every
(patch, query) pair whose sigmoid score passes `threshold`, its box in the
image's pixels, most probable first: transformers'
`zero-shot-object-detection` pipeline (the post-processing:
`keras_vit.tasks.detection_outputs`).

Minderer et al., arXiv:2205.06230 (OWL-ViT), arXiv:2306.09683 (OWLv2).
"""

import os

import keras
import numpy as np

from keras_vit.families import owlvit
from keras_vit.layers.detection_heads import DetectionHeads, QueryLogits
from keras_vit.preprocessing import preprocess_input, resize_and_crop
from keras_vit.tasks.base import ExportableTask, task_from_preset
from keras_vit.tasks.detection_outputs import corners, postprocess
from keras_vit.tasks.images import read_batches, read_images
from keras_vit.text.encoder import TextEncoder
from keras_vit.text.tokenizer import check_texts, load_tokenizer
from keras_vit.validation import check_bool, check_float, check_positive_int, check_verbose
from keras_vit.weights import shards
from keras_vit.weights.files import read_json
from keras_vit.weights.loader import load_checkpoint

# The per-patch outputs of the heads, and what the detectors return.
PER_PATCH = ("class_embeddings", "logit_shift", "logit_scale", "pred_boxes", "objectness_logits")


def _outputs(per_patch, logits):
    """A detector's outputs, by name in sorted order (the order exporters
    flatten a dict in)."""
    out = {"logits": logits, **{k: per_patch[k] for k in ("objectness_logits", "pred_boxes") if k in per_patch}}
    return dict(sorted(out.items()))


def _serialize(layer):
    return None if layer is None else keras.saving.serialize_keras_object(layer)


def _deserialize(config):
    return None if config is None else keras.saving.deserialize_keras_object(config)


class _DetectorBase(ExportableTask, keras.Model):
    """What both detectors share: the image encoder, the heads and how
    images are prepared."""

    def _setup(self, image_encoder, heads, pad_to_square):
        self.image_encoder, self.heads = image_encoder, heads
        self.pad_to_square = check_bool(pad_to_square, "pad_to_square")

    @staticmethod
    def _graph(image_encoder, heads):
        images = keras.Input(tuple(image_encoder.input_shape[1:]), name="images")
        return images, heads(image_encoder(images), images)

    @property
    def preprocessing(self):
        """The image encoder's `Preprocessing` record (mean, std, size, filter)."""
        return getattr(self.image_encoder, "preprocessing", None)

    @property
    def image_size(self):
        """`(height, width)` of the model's input."""
        return tuple(self.image_encoder.input_shape[1:3])


@keras.saving.register_keras_serializable(package="keras_vit")
class OpenVocabularyDetector(_DetectorBase):
    """OWL-ViT / OWLv2: boxes and class logits against any queries.

    A functional model: `{"images": (batch, H, W, C), "queries": (batch,
    queries, query_dim)}` to `{"logits": (batch, patches, queries),
    "pred_boxes": (batch, patches, 4)}` (and with objectness
    "objectness_logits" `(batch, patches)`): transformers'
    `OwlViTForObjectDetection` / `Owlv2ForObjectDetection` outputs, boxes
    `(cx, cy, w, h)` in `[0, 1]` of the model's input. Images are
    preprocessed as `keras_vit.preprocess_input(x, model=detector)` says
    (`detect` does it all).

    Args:
        image_encoder: a `keras_vit.ViT` with a class token that returns
            every token after its final norm (`include_top=False,
            pooling=None`).
        heads: a `keras_vit.layers.detection_heads.DetectionHeads`.
        text_encoder: None or a `keras_vit.text.TextEncoder` projecting to
            the heads' `query_dim` (text queries).
        tokenizer: None or its `keras_vit.text.tokenizer.Tokenizer` (not
            part of the Keras config; presets hold it).
        pad_to_square: bool, default False: images are padded to a square
            (bottom and right) before the resize, as OWLv2's processor does.
        name: the model's name.

    Example:

    >>> import keras_vit, numpy as np
    >>> tower = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
    ...                       mlp_dim=32, include_top=False, pre_norm=True)
    >>> heads = keras_vit.layers.detection_heads.DetectionHeads(query_dim=6, patch_size=8, objectness=True)
    >>> detector = OpenVocabularyDetector(tower, heads)
    >>> out = detector.predict({"images": np.zeros((1, 32, 32, 3)), "queries": np.ones((1, 2, 6))}, verbose=0)
    >>> out["logits"].shape, out["pred_boxes"].shape, out["objectness_logits"].shape
    ((1, 16, 2), (1, 16, 4), (1, 16))
    """

    def __init__(self, image_encoder, heads, text_encoder=None, tokenizer=None, pad_to_square=False,
                 name="detector", **kwargs):
        if text_encoder is not None and (
            not isinstance(text_encoder, TextEncoder) or text_encoder.embedding_dim != heads.query_dim
        ):
            raise ValueError(
                f"`text_encoder` must be a keras_vit.text.TextEncoder embedding to the heads' query_dim "
                f"({heads.query_dim}). Received: text_encoder={text_encoder!r}"
            )
        images, per_patch = self._graph(image_encoder, heads)
        queries = keras.Input((None, heads.query_dim), name="queries")
        scores = QueryLogits(name="query_logits")
        outputs = _outputs(per_patch, scores([per_patch["class_embeddings"], per_patch["logit_shift"],
                                              per_patch["logit_scale"], queries]))
        super().__init__(inputs={"images": images, "queries": queries}, outputs=outputs, name=name, **kwargs)
        self._setup(image_encoder, heads, pad_to_square)
        self.text_encoder, self.tokenizer = text_encoder, tokenizer
        self.image_heads = keras.Model(images, per_patch, name=f"{name}_per_patch")

    @classmethod
    def from_preset(cls, handle, **overrides):
        """A detector from a transformers `OwlViTForObjectDetection` or
        `Owlv2ForObjectDetection` directory (local or `hf://`), its
        processor's settings and its tokenizer read offline; every tensor
        loaded or ignored by name (`keras_vit.families.owlvit`).
        `keras_vit.from_preset(handle, dtype=...)`, refusing a checkpoint
        of another model."""
        return task_from_preset(cls, handle, **overrides)

    @classmethod
    def from_transformers(cls, directory, dtype=None):
        """The reader of a local transformers detection directory
        (`keras_vit.presets.tasks.TASK_PRESETS`): `read_transformers`."""
        return read_transformers(directory, dtype)

    def encode_texts(self, texts, batch_size=32):
        """Unit-length query embeddings `(len(texts), query_dim)` of texts.

        Texts longer than the text tower's context are cut to it (the
        special tokens kept).
        """
        if self.text_encoder is None or self.tokenizer is None:
            missing = "tokenizer (its checkpoint has no tokenizer.json)" if self.text_encoder else "text tower"
            raise ValueError(f"Detector {self.name!r} has no {missing}: give query embeddings or example images.")
        tokens = self.tokenizer(check_texts(texts))
        inputs = [tokens["token_ids"], tokens["padding_mask"]]
        out = np.asarray(self.text_encoder.predict(inputs, batch_size=check_positive_int(batch_size, "batch_size"),
                                                   verbose=0), "float32")
        return out / np.linalg.norm(out, axis=-1, keepdims=True)

    def encode_image_queries(self, images):
        """One query embedding per example image `(n, query_dim)`: the class
        embedding of the patch whose box best stands for the image (OWLv2:
        the highest objectness; OWL-ViT: transformers' rule, among the boxes
        within 80 % of the best overlap with the whole image the one least
        like the mean embedding).

        Args:
            images: `(n, H, W, C)` images, preprocessed as the model's.
        """
        out = self.image_heads.predict(np.asarray(images, "float32"), verbose=0)
        if "objectness_logits" in out:
            best = np.argmax(out["objectness_logits"], axis=-1)
        else:
            best = [_whole_image_patch(boxes, embeddings)
                    for boxes, embeddings in zip(out["pred_boxes"], out["class_embeddings"])]
        return np.stack([out["class_embeddings"][i, j] for i, j in enumerate(best)]).astype("float32")

    def with_queries(self, queries=None, names=None, name=None, query_images=None):
        """A detector of fixed classes: `FixedQueryDetector`, from images alone.

        The queries are embedded once here; the returned detector then
        runs on any number of images without embedding them again.

        Args:
            queries: None, texts (embedded by the text tower) or query
                embeddings `(queries, query_dim)`.
            names: None (the texts, the example images' file names, or
                "query 0", ...) or one name per query.
            name: the model's name (default `<name>_fixed`).
            query_images: None or example images (one-shot detection, as
                `detect` takes them), queried after the texts.

        Returns:
            A `FixedQueryDetector` sharing this detector's layers.
        """
        if queries is None or _are_texts(queries):
            labels, embeddings = _queries(self, queries, query_images)
            names = names or labels
        elif query_images is not None:
            raise ValueError("`queries` given as embeddings takes no `query_images`: give texts with them, "
                             "or embed the example images with `encode_image_queries` and pass all embeddings.")
        else:
            embeddings = np.asarray(queries, "float32")
        return FixedQueryDetector(self.image_encoder, self.heads, embeddings, names,
                                  pad_to_square=self.pad_to_square, name=name or f"{self.name}_fixed")

    def get_config(self):
        return {"image_encoder": _serialize(self.image_encoder), "heads": _serialize(self.heads),
                "text_encoder": _serialize(self.text_encoder), "pad_to_square": self.pad_to_square,
                "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("image_encoder", "heads", "text_encoder"):
            config[key] = _deserialize(config[key])
        return cls(**config)


@keras.saving.register_keras_serializable(package="keras_vit")
class FixedQueryDetector(_DetectorBase):
    """A detector of fixed classes: images to `{"logits", "pred_boxes"}` (and
    "objectness_logits"), the query embeddings held as a weight
    (`QueryLogits(num_queries=...)`, layer `query_logits`); an ordinary
    model that `predict`, `.keras` saving and `model.export` take.

    Args:
        image_encoder, heads, pad_to_square: as `OpenVocabularyDetector`.
        queries: `(queries, query_dim)` query embeddings (or, when
            deserialised, None: the weight holds them).
        names: None or one name per query (`query_names`).
        num_queries: with `queries=None`, how many.
        name: the model's name.
    """

    def __init__(self, image_encoder, heads, queries=None, names=None, pad_to_square=False, num_queries=None,
                 name="fixed_query_detector", **kwargs):
        if queries is not None:
            queries = np.asarray(queries, "float32")
            if queries.ndim != 2 or queries.shape[1] != heads.query_dim or not len(queries):
                raise ValueError(
                    f"`queries` must be a non-empty (queries, {heads.query_dim}) array of query embeddings. "
                    f"Received: shape {queries.shape}"
                )
            num_queries = len(queries)
        num_queries = check_positive_int(num_queries, "num_queries")
        names = [f"query {i}" for i in range(num_queries)] if names is None else [str(n) for n in names]
        if len(names) != num_queries:
            raise ValueError(f"`names` must name each of the {num_queries} queries. Received: {len(names)} names")
        images, per_patch = self._graph(image_encoder, heads)
        scores = QueryLogits(num_queries=num_queries, query_dim=heads.query_dim, name="query_logits")
        outputs = _outputs(per_patch, scores([per_patch["class_embeddings"], per_patch["logit_shift"],
                                              per_patch["logit_scale"]]))
        super().__init__(inputs=images, outputs=outputs, name=name, **kwargs)
        self._setup(image_encoder, heads, pad_to_square)
        self.query_names = tuple(names)
        if queries is not None:
            scores.queries.assign(queries)

    def get_config(self):
        return {"image_encoder": _serialize(self.image_encoder), "heads": _serialize(self.heads),
                "names": list(self.query_names), "pad_to_square": self.pad_to_square,
                "num_queries": len(self.query_names), "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("image_encoder", "heads"):
            config[key] = _deserialize(config[key])
        return cls(**config)


def _box_iou_with_whole(corners):
    """IoU of `(n, 4)` corner boxes with the whole image `[0, 0, 1, 1]`, and
    their generalised IoU (where the IoU is zero everywhere)."""
    x0, y0, x1, y1 = corners.T
    area = (x1 - x0) * (y1 - y0)
    inter = np.clip(np.minimum(x1, 1) - np.maximum(x0, 0), 0, None) * np.clip(np.minimum(y1, 1) - np.maximum(y0, 0),
                                                                            0, None)
    union = 1.0 + area - inter
    iou = inter / union
    if np.all(iou == 0):
        hull = (np.maximum(x1, 1) - np.minimum(x0, 0)) * (np.maximum(y1, 1) - np.minimum(y0, 0))
        iou = iou - (hull - union) / hull
    return iou


def _whole_image_patch(boxes, embeddings):
    """OWL-ViT's example-image patch (transformers' `embed_image_query`)."""
    iou = _box_iou_with_whole(corners(boxes))
    selected = np.nonzero(iou >= iou.max() * 0.8)[0]
    similarity = embeddings[selected] @ embeddings.mean(axis=0)
    return int(selected[np.argmin(similarity)])


def read_transformers(directory, dtype=None):
    """An `OpenVocabularyDetector` from a transformers detection directory
    (see `OpenVocabularyDetector.from_preset`)."""
    from keras_vit.models import ViT

    config = read_json(os.path.join(directory, "config.json"))
    prep_path = os.path.join(directory, "preprocessor_config.json")
    record, pad = owlvit.processor(config, read_json(prep_path) if os.path.isfile(prep_path) else None)
    overrides = {} if dtype is None else {"dtype": dtype}
    image_encoder = ViT(**owlvit.image_arguments(config), preprocessing=record, name="image_encoder", **overrides)
    text_encoder = TextEncoder(**owlvit.text_arguments(config), **overrides)
    heads = DetectionHeads(patch_size=image_encoder.patch_size, name="heads", **owlvit.head_arguments(config),
                           **overrides)
    # A directory without tokenizer files gives a detector for query
    # embeddings and example images; text queries then say what is missing.
    has_tokenizer = any(os.path.isfile(os.path.join(directory, f)) for f in ("tokenizer.json", "spiece.model"))
    tokenizer = load_tokenizer(directory, text_encoder.max_length, padding="max_length") if has_tokenizer else None
    detector = OpenVocabularyDetector(image_encoder, heads, text_encoder, tokenizer, pad_to_square=pad,
                                      name=owlvit.detection_class(config)[1].model_type, **overrides)
    state, path = shards.read_state(directory)
    parts = owlvit.read(state, config, path)
    del state
    load_checkpoint(image_encoder, parts.image)
    load_checkpoint(text_encoder, parts.text)
    load_checkpoint(heads, parts.heads)
    return detector


# --- preparing images --------------------------------------------------------


def pad_and_resize(image, size):
    """OWLv2's processor: `[0, 255]` pixels padded to a square (bottom and
    right, black), smoothed by a Gaussian of sigma `(factor - 1) / 2` where
    the resize shrinks, and resized linearly to `size` (`scipy.ndimage`,
    mirror edges, as scikit-image's `resize` with anti-aliasing).

    Args:
        image: `(H, W, 3)` image in `[0, 255]`.
        size: `(height, width)`.

    Returns:
        float32 `(height, width, 3)` in `[0, 1]`.

    Example:

    >>> pad_and_resize(np.full((20, 10, 3), 255, "uint8"), (8, 8))[:, -1, 0].round(2).tolist()
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    """
    from scipy import ndimage

    x = (np.asarray(image).astype("float64") * (1 / 255)).astype("float32")
    side = max(x.shape[:2])
    x = np.pad(x, ((0, side - x.shape[0]), (0, side - x.shape[1]), (0, 0)))
    factors = np.array([side / size[0], side / size[1], 1.0])
    sigma = np.maximum(0, (factors - 1) / 2)
    filtered = ndimage.gaussian_filter(x, sigma, cval=0, mode="mirror")
    out = ndimage.zoom(filtered, 1 / factors, order=1, mode="mirror", cval=0, grid_mode=True)
    return np.clip(out, x.min(), x.max()).astype("float32")


def prepare_images(model, images):
    """`(inputs (n, H, W, 3) float32, sizes [(height, width)])`: the images
    read (`keras_vit.tasks.images.read_images`: paths, URLs, PIL images, arrays; a
    grayscale image repeated to RGB, an alpha channel dropped as Pillow's
    `convert("RGB")` does) and prepared as the model's processor does."""
    record = model.preprocessing
    if record is None:
        raise ValueError(
            f"Model {model.name!r} carries no preprocessing record (its image encoder's "
            "`preprocessing` is None: the encoder was built from scratch). Build the image encoder "
            "with preprocessing=keras_vit.weights.record.Preprocessing(...), or load the detector "
            "with `keras_vit.from_preset`."
        )
    inputs, sizes = [], []
    for image in read_images(images):
        sizes.append(tuple(image.shape[:2]))
        if model.pad_to_square:
            pixels = pad_and_resize(image, model.image_size) * 255.0
        else:
            pixels = resize_and_crop(image, record, model.image_size)  # uint8, or float32 in [0, 255]
        inputs.append(preprocess_input(pixels, preprocessing=record))
    return np.stack(inputs).astype("float32"), sizes


def query_texts(queries):
    """Text queries as a list, each with a word in it (a blank query would
    name its boxes with nothing).

    Example:

    >>> query_texts(["a cat", "a dog"])
    ['a cat', 'a dog']
    """
    texts = check_texts(queries)
    blank = [i for i, text in enumerate(texts) if not text.strip()]
    if blank:
        raise ValueError(f"`queries[{blank[0]}]` is blank ({texts[blank[0]]!r}): each text query names what to "
                         f"find, e.g. 'a cat'. Received: queries={texts!r}")
    return texts


def _are_texts(queries):
    """Texts rather than embeddings (an empty list too: `_queries` refuses it by name)."""
    return isinstance(queries, str) or (isinstance(queries, (list, tuple))
                                        and all(isinstance(q, str) for q in queries))


def _query_label(query, index):
    return os.path.basename(os.fspath(query)) if isinstance(query, (str, os.PathLike)) else f"image query {index}"


def _queries(model, queries, query_images):
    """`(labels, embeddings)` of the queries `detect` was given."""
    if isinstance(model, FixedQueryDetector):
        if queries is not None or query_images is not None:
            raise ValueError(f"Detector {model.name!r} has fixed queries {model.query_names}; it takes no "
                             "`queries` or `query_images`.")
        return list(model.query_names), None
    if queries is None and query_images is None:
        raise ValueError("Detection needs `queries` (texts), `query_images` (example images) or both.")
    labels, embeddings = [], []
    if queries is not None:
        if isinstance(queries, (list, tuple)) and not queries:
            raise ValueError("`queries` is empty: give at least one text (or pass `query_images`).")
        texts = query_texts(queries)
        labels += texts
        embeddings.append(model.encode_texts(texts))
    if query_images is not None:
        examples = query_images if isinstance(query_images, (list, tuple)) else [query_images]
        inputs, _ = prepare_images(model, examples)
        labels += [_query_label(q, i) for i, q in enumerate(examples)]
        embeddings.append(model.encode_image_queries(inputs))
    return labels, np.concatenate(embeddings)


def detect(model, images, queries=None, query_images=None, threshold=0.1, nms_threshold=None, top_k=None,
           clip_boxes=True, batch_size=4, verbose="auto"):
    """Objects in images, found by text queries or example images.

    Args:
        model: an `OpenVocabularyDetector`, a `FixedQueryDetector`, or a
            directory or `hf://` handle of a transformers OWL-ViT / OWLv2
            detector.
        images: file paths, http(s) URLs, PIL images or `[0, 255]` arrays
            (or `[0, 1]`, multiplied by 255 with a warning), one or a list
            (sizes may differ). A grayscale image is repeated to RGB; an
            alpha channel is dropped (as transformers' `load_image`); a
            channels-first array is turned channels-last
            (`keras_vit.tasks.images.read_images`, as every task reads).
        queries: None, a text or a non-empty list of texts.
        query_images: None, an example image or a list of them (one-shot
            detection); each becomes a query labelled by its file name (or
            "image query i").
        threshold: float in [0, 1], default 0.1: the least score kept.
        nms_threshold: None (default: no suppression, as transformers'
            pipeline) or a float in [0, 1]: non-maximum suppression among
            each query's boxes at this IoU (transformers' image-guided
            post-processing uses 0.3).
        top_k: None (default: all) or an int >= 1: the most detections per image.
        clip_boxes: bool, default True: each box cut to the image, `0 <= x0
            <= x1 <= width` and `0 <= y0 <= y1 <= height`; False: the boxes
            as transformers' post-processing gives them, which can reach
            past the image (OWLv2 pads an image to a square, and finds
            boxes in the padding too).
        batch_size: int >= 1, default 4: images per forward pass (read and
            prepared a batch at a time).
        verbose: "auto" (default: progress when the images make more than
            one batch), 0 (silent), 1 (progress: a bar on a terminal, plain
            lines in a log) or 2 (one line at the end).

    Returns:
        A list with, per image, a list of `Detection(label, score, box)`,
        best first; `box` is `(x0, y0, x1, y1)` in the image's pixels.

    Raises:
        ValueError: an empty query list or a blank query, an argument out of
            its range or of the wrong type (named, before the model loads),
            images that cannot be read.

    Example:

    >>> import keras_vit, numpy as np
    >>> tower = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
    ...                       mlp_dim=32, include_top=False, pre_norm=True,
    ...                       preprocessing=keras_vit.weights.record.Preprocessing(image_size=(32, 32)))
    >>> heads = keras_vit.layers.detection_heads.DetectionHeads(query_dim=6, patch_size=8)
    >>> detector = OpenVocabularyDetector(tower, heads).with_queries(np.eye(2, 6), names=["cat", "dog"])
    >>> found = detect(detector, np.zeros((40, 60, 3), "uint8"), threshold=0.0)
    >>> len(found[0]), found[0][0].label in ("cat", "dog")
    (32, True)
    >>> all(0 <= d.box[0] <= d.box[2] <= 60 and 0 <= d.box[1] <= d.box[3] <= 40 for d in found[0])
    True
    """
    threshold = check_float(threshold, "threshold", minimum=0.0, maximum=1.0)
    clip_boxes = check_bool(clip_boxes, "clip_boxes")
    if nms_threshold is not None:
        nms_threshold = check_float(nms_threshold, "nms_threshold", minimum=0.0, maximum=1.0)
    top_k = check_positive_int(top_k, "top_k", allow_none=True)
    batch_size = check_positive_int(batch_size, "batch_size")
    check_verbose(verbose, 1)
    if isinstance(model, (str, os.PathLike)):
        model = OpenVocabularyDetector.from_preset(model)
    if not isinstance(model, _DetectorBase):
        raise ValueError(f"`model` must be an OpenVocabularyDetector or FixedQueryDetector. Received: {model!r}")
    labels, embeddings = _queries(model, queries, query_images)
    outputs, sizes = [], []
    for images_read in read_batches(images, batch_size, verbose):
        batch, batch_sizes = prepare_images(model, images_read)
        sizes += batch_sizes
        if embeddings is None:
            outputs.append(model.predict_on_batch(batch))
        else:
            tiled = np.broadcast_to(embeddings, (len(batch),) + embeddings.shape)
            outputs.append(model.predict_on_batch({"images": batch, "queries": np.ascontiguousarray(tiled)}))
    merged = {k: np.concatenate([np.asarray(o[k]) for o in outputs]) for k in ("logits", "pred_boxes")}
    return postprocess(merged, sizes, labels, threshold, nms_threshold, top_k, model.pad_to_square, clip_boxes)
