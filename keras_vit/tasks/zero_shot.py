"""Zero-shot classification and retrieval: `ImageTextModel` and zero-shot classifiers.

`ImageTextModel` holds an image tower and a text tower that embed images and
texts in one space (CLIP, MetaCLIP 2, SigLIP, SigLIP 2): embeddings, scores,
retrieval, and zero-shot classifiers.

A zero-shot classifier is the image tower with a head made of class
embeddings, an ordinary `keras_vit.ViT`. The head scores
`logit_scale * cos(image, class) + logit_bias`: its kernel is the classes' unit-length text embeddings times the logit scale, its bias
the logit bias, and the model scales its image embedding to unit length
before it (`l2_normalize=True`; CLIP's image projection becomes the layer
`projection`, `projection_dim`). With one prompt per class the outputs are
transformers' `logits_per_image` through the zero-shot pipeline's
activation: softmax over the classes (CLIP, MetaCLIP 2), a sigmoid per
class (SigLIP, SigLIP 2). Everything keras_vit offers an image classifier
then applies: `predict`, `decode_predictions(..., model=)`,
`save_to_preset`, `model.export` and its int8 export.
"""

import keras
import numpy as np

from keras_vit.presets import image_text as image_text_presets
from keras_vit.tasks.progress import predict_verbose
from keras_vit.text.encoder import TextEncoder
from keras_vit.text.templates import prompts
from keras_vit.text.tokenizer import Tokenizer, check_texts
from keras_vit.validation import check_choice, check_positive_int
from keras_vit.weights.canonical import HEAD, Checkpoint
from keras_vit.weights.loader import load_checkpoint
from keras_vit.weights.mapping import model_variables

ACTIVATIONS = ("softmax", "sigmoid")
# An image tower's pooling -> the classifier that pools the same way.
_CLASSIFIERS = {"token": "token", "avg": "gap", "map": "map", "token_avg": "token_avg"}
PROJECTION = "projection/"


def class_head(class_embeddings, logit_scale, logit_bias=0.0):
    """The head's `(kernel (D, classes), bias (classes,))` for class embeddings.

    Args:
        class_embeddings: `(classes, D)`, scaled to unit length here.
        logit_scale: float, the multiplier of the cosine similarities.
        logit_bias: float, default 0: added to every class's score.

    Example:

    >>> kernel, bias = class_head(np.array([[3.0, 4.0]]), logit_scale=10.0, logit_bias=-1.0)
    >>> kernel.tolist(), bias.tolist()
    ([[6.0], [8.0]], [-1.0])
    """
    embeddings = np.asarray(class_embeddings, "float64")
    if embeddings.ndim != 2 or not np.all(np.isfinite(embeddings)):
        raise ValueError(
            "`class_embeddings` must be a finite (classes, D) array. "
            f"Received: shape {embeddings.shape}"
        )
    embeddings = embeddings / np.linalg.norm(embeddings, axis=-1, keepdims=True)
    kernel = (float(logit_scale) * embeddings.T).astype("float32")
    return kernel, np.full((embeddings.shape[0],), float(logit_bias), "float32")


def _classifier_config(config, projection_dim, classes, class_names, activation, name):
    """The zero-shot classifier's config from the image tower's (its output
    the image embedding: a projection head without bias, or a pooling)."""
    config = dict(config, classes=classes, class_names=list(class_names), classifier_activation=activation,
                  l2_normalize=True, projection_dim=projection_dim, name=name)
    if config["include_top"]:
        return config
    pooling = config["pooling"]
    if pooling not in _CLASSIFIERS:
        raise ValueError(
            "The image tower must pool its tokens into one embedding (pooling in "
            f"{tuple(_CLASSIFIERS)}). Received: pooling={pooling!r}"
        )
    config.update(include_top=True, classifier=_CLASSIFIERS[pooling], pooling=None)
    return config


def zero_shot_classifier(image_encoder, class_embeddings, class_names, logit_scale, logit_bias=0.0,
                         activation="softmax", name="zero_shot_classifier"):
    """A `keras_vit.ViT` classifier from an image tower and class embeddings.

    Args:
        image_encoder: a keras_vit model whose output is the image embedding:
            pooled features (`include_top=False` with a `pooling`), or a
            head without bias (CLIP's projection: it becomes the layer
            `projection`).
        class_embeddings: `(classes, D)` text embeddings of the classes, in
            the image embedding's space.
        class_names: one string per class.
        logit_scale: float, the multiplier of the cosine similarities.
        logit_bias: float, default 0.
        activation: "softmax" (default) or "sigmoid".
        name: the model's name.

    Returns:
        A new model of the image tower's class, with `classes`,
        `class_names` and `preprocessing` set; its weights are the tower's,
        moved from variable to variable in the backend's own tensors (never
        through NumPy), and the class head.

    Raises:
        ValueError: for class embeddings of another width than the image
            embedding, a count of names that differs, or a tower whose head
            has a bias.

    Example:

    >>> import keras_vit, numpy as np
    >>> tower = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1,
    ...                       num_heads=2, mlp_dim=8, include_top=False, pooling="token")
    >>> model = zero_shot_classifier(tower, np.eye(3, 8), ["cat", "dog", "bird"], 10.0)
    >>> model.class_names, model.l2_normalize
    (('cat', 'dog', 'bird'), True)
    """
    check_choice(activation, ACTIVATIONS, "activation")
    kernel, bias = class_head(class_embeddings, logit_scale, logit_bias)
    names = [str(n) for n in class_names]
    if len(names) != kernel.shape[1]:
        raise ValueError(
            f"`class_names` must name each of the {kernel.shape[1]} class embeddings. "
            f"Received: {len(names)} names"
        )
    width = image_encoder.output_shape[-1]
    if kernel.shape[0] != width:
        raise ValueError(
            f"The class embeddings must be as wide as the image embedding ({width}). "
            f"Received: class_embeddings of width {kernel.shape[0]}"
        )
    # The tower's variables by canonical key: their values go straight into
    # the classifier's (`load_checkpoint` assigns backend tensors as they are).
    params = {key: keras.ops.convert_to_tensor(variable) for key, variable in model_variables(image_encoder).items()}
    config = image_encoder.get_config()
    projection_dim = config.get("projection_dim")
    if config["include_top"]:
        if config.get("representation_size") is not None or config.get("distillation_head"):
            raise ValueError(
                "The image tower's head must be a projection without bias (CLIP's), not a "
                "classifier with a pre-logits layer or a distillation head. Received: "
                f"representation_size={config.get('representation_size')!r}, "
                f"distillation_head={config.get('distillation_head')!r}"
            )
        tower_bias = keras.ops.convert_to_numpy(params.pop(HEAD + "bias"))
        if np.any(tower_bias != 0):
            raise ValueError(
                "The image tower's head must be a projection without bias (CLIP's). Received: "
                f"a bias of largest magnitude {float(np.abs(tower_bias).max()):.3g}"
            )
        params[PROJECTION + "kernel"] = params.pop(HEAD + "kernel")
        projection_dim = config["classes"]
    config = _classifier_config(config, projection_dim, kernel.shape[1], names, activation, name)
    model = type(image_encoder).from_config(config)
    params[HEAD + "kernel"], params[HEAD + "bias"] = kernel, bias
    return load_checkpoint(model, Checkpoint(f"<zero-shot head of {image_encoder.name}>", "keras_vit", params))


DEFAULT_TEMPLATES = ("a photo of a {}.",)


def _unit(x):
    x = np.asarray(x, "float32")
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


class ImageTextModel:
    """Two towers that embed images and texts for comparison.

    `image_encoder` is a keras_vit model (everything keras_vit offers for
    an image model applies to it) whose output is the image embedding;
    `text_encoder` a `keras_vit.text.TextEncoder` on keras_vit's blocks;
    `tokenizer` turns texts into its token ids. Both embeddings are scaled
    to unit length, and an image-text score is
    `logit_scale * cos(image, text) + logit_bias`: transformers'
    `logits_per_image`. `activation` says how the scores of one image become
    probabilities: "softmax" over the texts (CLIP, MetaCLIP 2) or "sigmoid"
    per text (SigLIP, SigLIP 2), as transformers' zero-shot pipeline does.

    Images are given as keras_vit's models take them: `(batch, H, W, C)`
    after `keras_vit.preprocess_input(images, model=itm.image_encoder)` (the
    checkpoint's statistics; transformers' `pixel_values` in NHWC).

    Args:
        image_encoder: a keras_vit model with one output vector per image.
        text_encoder: a `keras_vit.text.TextEncoder` of the same width.
        tokenizer: a `keras_vit.text.tokenizer.Tokenizer`.
        logit_scale: float > 0, the multiplier of the cosine similarities
            (transformers' `logit_scale.exp()`).
        logit_bias: float, default 0 (SigLIP's `logit_bias`).
        activation: "softmax" (default) or "sigmoid".

    Example:

    >>> import keras_vit, numpy as np, os, tempfile, tokenizers
    >>> folder = tempfile.mkdtemp()
    >>> words = {"<pad>": 0, "<eos>": 1, "a": 2, "cat": 3, "dog": 4}
    >>> raw = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="<pad>"))
    >>> raw.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    >>> raw.post_processor = tokenizers.processors.TemplateProcessing(
    ...     single="$A <eos>", special_tokens=[("<eos>", 1)])
    >>> raw.save(os.path.join(folder, "tokenizer.json"))
    >>> image = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1, num_heads=2,
    ...                       mlp_dim=8, include_top=False, pooling="token", projection_dim=6)
    >>> text = keras_vit.text.TextEncoder(vocabulary_size=5, max_length=8, hidden_size=8, num_layers=1,
    ...                                   num_heads=2, mlp_dim=8, eos_token_id=1, projection_dim=6)
    >>> itm = ImageTextModel(image, text, keras_vit.text.load_tokenizer(folder, 8, pad_token="<pad>"),
    ...                      logit_scale=10.0)
    >>> itm.similarity(np.zeros((2, 16, 16, 3), "float32"), ["a cat", "a dog", "cat"]).shape
    (2, 3)
    >>> itm.zero_shot_classifier(["cat", "dog"], templates=["a {}"]).class_names
    ('cat', 'dog')
    """

    def __init__(self, image_encoder, text_encoder, tokenizer, logit_scale, logit_bias=0.0,
                 activation="softmax"):
        if not isinstance(text_encoder, TextEncoder):
            raise ValueError(f"`text_encoder` must be a keras_vit.text.TextEncoder. Received: {text_encoder!r}")
        if not isinstance(tokenizer, Tokenizer):
            raise ValueError(f"`tokenizer` must be a keras_vit.text.tokenizer.Tokenizer. Received: {tokenizer!r}")
        width = image_encoder.output_shape[-1] if len(image_encoder.output_shape) == 2 else None
        if width != text_encoder.embedding_dim:
            raise ValueError(
                "The towers must embed in one space: the image tower must give one vector per "
                f"image as wide as the text tower's ({text_encoder.embedding_dim}). Received: "
                f"image output shape {image_encoder.output_shape}"
            )
        logit_scale = float(logit_scale)
        if not logit_scale > 0:
            raise ValueError(f"`logit_scale` must be a positive float. Received: logit_scale={logit_scale!r}")
        self.image_encoder, self.text_encoder, self.tokenizer = image_encoder, text_encoder, tokenizer
        self.logit_scale, self.logit_bias = logit_scale, float(logit_bias)
        self.activation = check_choice(activation, ACTIVATIONS, "activation")

    @classmethod
    def from_preset(cls, handle, dtype=None):
        """An image-text model from a two-tower preset directory.

        Reads, local or `hf://org/name[@revision]`
        (`keras_vit.presets.image_text`):

        - transformers' CLIP (`CLIPModel`), MetaCLIP 2 (`MetaClip2Model`),
          SigLIP (`SiglipModel`) and SigLIP 2 (`Siglip2Model`) directories,
          texts padded as transformers' zero-shot pipeline pads them (CLIP:
          to the longest text; SigLIP: to 64 tokens);
        - keras-hub's `CLIPBackbone` and `SigLIPBackbone` presets saved with
          their preprocessor, texts padded as that preprocessor pads them;
        - keras_vit's own (`save_to_preset`).

        The image tower is read as `keras_vit.from_preset` reads it (with the
        checkpoint's preprocessing), the text tower and logit scale and bias
        from the same weights, strictly (every tensor loaded or ignored by
        name), and the tokenizer from the preset's own files.

        Args:
            handle: a directory or an `hf://` handle.
            dtype: None or a dtype policy for both towers.

        Returns:
            An `ImageTextModel`.

        Raises:
            ValueError: for a directory that is not a two-tower checkpoint
                of these families, or whose files do not match.
        """
        return cls(*image_text_presets.read_parts(handle, dtype))

    def save_to_preset(self, directory):
        """Writes the model as a keras_vit image-text preset directory, which
        `ImageTextModel.from_preset` reads back on any backend: both towers,
        the tokenizer (its vocabulary file as its library writes it) and the
        logit scale and bias (see `keras_vit.presets.image_text`)."""
        image_text_presets.write(self, directory)

    @property
    def preprocessing(self):
        """The image tower's `Preprocessing` record (None when unknown)."""
        return getattr(self.image_encoder, "preprocessing", None)

    def encode_images(self, images, batch_size=32, verbose="auto"):
        """Unit-length image embeddings `(n, D)` (NumPy float32).

        Args:
            images: `(n, H, W, C)` preprocessed images.
            batch_size: int, default 32.
            verbose: "auto" (default: Keras' progress bar when the images
                make more than one batch; where standard output is no
                terminal, one plain line at the end), 0, 1 or 2 (as `predict`).
        """
        batch_size = check_positive_int(batch_size, "batch_size")
        verbose = predict_verbose(verbose, -(-len(images) // batch_size))
        return _unit(self.image_encoder.predict(images, batch_size=batch_size, verbose=verbose))

    def tokenize(self, texts):
        """`{"token_ids", "padding_mask"}` of `texts` (see `tokenizer`)."""
        return self.tokenizer(texts)

    def encode_texts(self, texts, batch_size=32, verbose="auto"):
        """Unit-length text embeddings `(n, D)` (NumPy float32).

        Args:
            texts: a string or a sequence of strings.
            batch_size: int, default 32.
            verbose: "auto" (default: Keras' progress bar when the texts
                make more than one batch; where standard output is no
                terminal, one plain line at the end), 0, 1 or 2 (as `predict`).
        """
        batch_size = check_positive_int(batch_size, "batch_size")
        tokens = self.tokenizer(texts)
        inputs = [tokens["token_ids"], tokens["padding_mask"]]
        verbose = predict_verbose(verbose, -(-len(tokens["token_ids"]) // batch_size))
        return _unit(self.text_encoder.predict(inputs, batch_size=batch_size, verbose=verbose))

    def scores(self, image_embeddings, text_embeddings):
        """`logit_scale * cos + logit_bias` of unit-length embeddings,
        `(images, texts)`."""
        return self.logit_scale * (np.asarray(image_embeddings) @ np.asarray(text_embeddings).T) + self.logit_bias

    def similarity(self, images, texts, batch_size=32, verbose="auto"):
        """The image-text scores `(n_images, n_texts)`: transformers'
        `logits_per_image` (NumPy float32).

        Args:
            images: `(n, H, W, C)` preprocessed images.
            texts: a string or a sequence of strings.
            batch_size: int, default 32.
            verbose: as `encode_images` and `encode_texts`.
        """
        texts = check_texts(texts)
        return self.scores(self.encode_images(images, batch_size, verbose),
                           self.encode_texts(texts, batch_size, verbose))

    def class_embeddings(self, class_names, templates=DEFAULT_TEMPLATES, batch_size=32, verbose="auto"):
        """One unit-length embedding per class `(classes, D)`: the mean of the
        unit-length embeddings of its prompts (each template with the class
        name), scaled to unit length again (the CLIP paper's ensemble).
        `verbose` as `encode_texts` (a thousand classes of 80 prompts are
        80,000 texts)."""
        names = check_texts(class_names)
        templates = list(templates) if not isinstance(templates, str) else [templates]
        texts = [text for name in names for text in prompts(name, templates)]
        embeddings = self.encode_texts(texts, batch_size, verbose).reshape(len(names), len(templates), -1)
        return _unit(embeddings.mean(axis=1))

    def zero_shot_classifier(self, class_names, templates=DEFAULT_TEMPLATES, batch_size=32,
                             name="zero_shot_classifier", verbose="auto"):
        """An image classifier for classes named in words: a `keras_vit.ViT`.

        The image tower with a head whose kernel is the classes' embeddings
        (`class_embeddings`) times `logit_scale` and whose bias is
        `logit_bias`, after the image embedding scaled to unit length, and
        `activation` ("softmax" or "sigmoid") as its classifier activation;
        `class_names` and the image preprocessing set. With one template its
        scores are `similarity`'s; `predict`, `decode_predictions`,
        `save_to_preset`, `model.export` (float and int8) work on it as on
        any keras_vit classifier.

        Args:
            class_names: a sequence of class names.
            templates: a sequence of prompt templates with `{}` for the
                class name, default `("a photo of a {}.",)`;
                `keras_vit.text.IMAGENET_TEMPLATES` holds the CLIP paper's 80.
            batch_size: int, default 32: texts per text-tower call.
            name: the model's name.
            verbose: "auto" (default: a progress bar when the prompts make
                more than one batch), 0, 1 or 2 (as `predict`).

        Returns:
            A `keras_vit.ViT` (the image tower's class).
        """
        embeddings = self.class_embeddings(class_names, templates, batch_size, verbose)
        return zero_shot_classifier(
            self.image_encoder, embeddings, check_texts(class_names), self.logit_scale, self.logit_bias,
            self.activation, name=name,
        )

    def __repr__(self):
        return (
            f"<ImageTextModel image_encoder={self.image_encoder.name!r} "
            f"text_encoder={self.text_encoder.name!r} activation={self.activation!r} "
            f"logit_scale={self.logit_scale:.4g} logit_bias={self.logit_bias:.4g}>"
        )
