"""What the task models share: `DenseTask` (the dense task models' base,
a Keras model around a keras_vit encoder), `ExportableTask` (`model.export`
of the functional task models: detectors, SAM's parts) and
`task_from_preset` (every task class's `from_preset`).

A dense task model (`DepthEstimator`, `Segmenter`) holds a `keras_vit.ViT`
(or `ViTHybrid`) as `model.encoder` and runs its forward steps
(`keras_vit.models.forward`) with its own layers in between and after: the
encoder's variables are the task's, so `fit` trains both, `enable_lora`
adapts the encoder's projections and leaves the task's head trainable, and
saving writes both. `predict` returns a dict keyed as transformers names
the outputs. This module holds the parts that do not depend on the task:
the input checks, `for_inference` (the frozen copy `model.export` traces),
the compile defaults and the loss and metrics on the task's main output.
"""

import keras

from keras_vit.models.arguments import KERAS_LAYER_ARGUMENTS, check_images
from keras_vit.models.base import ModelBase
from keras_vit.models.vit import ViT
from keras_vit.presets import from_preset as _from_preset
from keras_vit.validation import argument_names, check_keywords


def processing_record(model, preprocessing, record_class):
    """`preprocessing` where given, else the model's own record; a
    `ValueError` saying how to give one where neither is there.

    Example:

    >>> import types
    >>> model = types.SimpleNamespace(name="depth_estimator", preprocessing=None)
    >>> processing_record(model, "given", "DenseProcessing")
    'given'
    >>> processing_record(model, None, "DenseProcessing")
    Traceback (most recent call last):
    ...
    ValueError: Model 'depth_estimator' carries no preprocessing record ...
    """
    record = preprocessing if preprocessing is not None else getattr(model, "preprocessing", None)
    if record is None:
        raise ValueError(
            f"Model {getattr(model, 'name', model)!r} carries no preprocessing record "
            "(`model.preprocessing` is None: it was built from scratch, or loaded from a folder "
            "without its image processor's settings, such as a transformers folder without "
            f"preprocessor_config.json). Pass preprocessing=keras_vit.{record_class}(...), set "
            "`model.preprocessing`, or put the checkpoint's preprocessor_config.json beside its weights."
        )
    return record


def check_encoder(encoder, task):
    """Raises a `ValueError` unless `encoder` is a keras_vit ViT the task can wrap.

    Example:

    >>> import keras_vit
    >>> encoder = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1,
    ...                         num_heads=2, mlp_dim=16, classes=3)
    >>> check_encoder(encoder, "Segmenter")
    Traceback (most recent call last):
    ...
    ValueError: `encoder` must be built with include_top=False and pooling=None: Segmenter reads its ...
    """
    if not isinstance(encoder, ViT):
        raise ValueError(
            f"`encoder` must be a keras_vit.ViT or ViTHybrid. Received: encoder={type(encoder).__name__}"
        )
    if encoder.include_top or encoder.pooling is not None:
        raise ValueError(
            f"`encoder` must be built with include_top=False and pooling=None: {task} reads its "
            f"tokens. Received: encoder {encoder.name!r} with include_top={encoder.include_top}, "
            f"pooling={encoder.pooling!r}"
        )
    if getattr(encoder, "pooled_norm", False):
        raise ValueError(
            f"`encoder` must normalise its tokens (pooled_norm=False): {task} reads them after the "
            f"final norm. Received: encoder {encoder.name!r} with pooled_norm=True"
        )


class DenseTask(ModelBase, keras.Model):
    """The base of the dense task models (not used on its own).

    Subclasses set `self.encoder` and `self.preprocessing` in their
    constructor, name their main output `MAIN_OUTPUT`, list the layers a
    LoRA-adapted model keeps trainable in `head_layer_names`, and implement
    `call` and `get_config`.
    """

    MAIN_OUTPUT = None
    TASK = "dense task"

    @classmethod
    def _check_keywords(cls, kwargs):
        allowed = argument_names(cls.__init__) + KERAS_LAYER_ARGUMENTS
        check_keywords(kwargs, allowed, cls.__name__)

    # What the input checks and the loader read from a model.
    @property
    def effective_patch_size(self):
        """Image pixels covered by one of the encoder's tokens."""
        return self.encoder.effective_patch_size

    @property
    def stem_stride(self):
        return self.encoder.stem_stride

    @property
    def num_channels(self):
        return self.encoder.num_channels

    @property
    def image_size(self):
        """The encoder's image size `(height, width)` (other multiples of
        the patch size are accepted)."""
        return tuple(self.encoder.image_size)

    @property
    def grid_size(self):
        return tuple(self.encoder.grid_size)

    @property
    def input_shape(self):
        return (None,) + self.image_size + (self.num_channels,)

    @property
    def head_layer_names(self):
        """Top-level names of the task's own layers (not the encoder's)."""
        return ()

    def _check_input_spec(self, shape, dtype, name="x"):
        check_images(self, shape, dtype, name)

    def _main(self, y_pred, y=None):
        """What the loss and metrics compare with the targets `y`: the main output."""
        return y_pred[self.MAIN_OUTPUT] if isinstance(y_pred, dict) else y_pred

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The compiled loss on the main output (the dict's other entries
        are for reading, not training)."""
        return super().compute_loss(x, y, self._main(y_pred, y), sample_weight, training)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        """The compiled metrics on the main output."""
        return super().compute_metrics(x, y, self._main(y_pred, y), sample_weight)

    def build(self, input_shape=None):
        # Built in the constructor (the encoder is a built functional model
        # and the task's layers build themselves there); `load_model` and
        # Keras' fit callbacks call this again.
        self.built = True

    def _copy_config(self, encoder):
        config = self.get_config()
        config["encoder"] = encoder
        config.pop("trainable", None)
        return config

    def for_inference(self, image_size=None):
        """A frozen copy of the model for serving (what `model.export` traces).

        The encoder is copied by `ViT.for_inference` (its position embedding
        resized once for `image_size`; a hybrid's kernels standardised
        once), the task's own layers with their weights.

        Args:
            image_size: None (the model's own size), an int or
                `(height, width)`.

        Returns:
            A new model of the same class with `trainable=False`.
        """
        from keras_vit.models.lora import refuse_adapters

        refuse_adapters(self, "`for_inference()`")
        encoder = self.encoder.for_inference(image_size=image_size)
        copy = type(self)(**self._copy_config(encoder))
        own = {v.path: v for v in self.weights}
        encoder_paths = {v.path for v in encoder.weights}
        for variable in copy.weights:
            if variable.path not in encoder_paths:
                variable.assign(own[variable.path])
        copy.trainable = False
        return copy

    @property
    def encoder_config(self):
        """The encoder's `EncoderConfig` (the image checks read its options)."""
        return self.encoder.encoder_config

    def task_config(self):
        """The config entries every task model has: its encoder (serialised),
        preprocessing, name, trainability and dtype policy; `get_config` adds
        the task's own."""
        return {
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "preprocessing": None if self.preprocessing is None else self.preprocessing.get_config(),
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("encoder"), dict):
            config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)

    @classmethod
    def from_preset(cls, handle, **overrides):
        """`keras_vit.from_preset(handle)`, refusing a preset of another task.

        Example:

        >>> DepthEstimator.from_preset("hf://depth-anything/Depth-Anything-V2-Small-hf")  # doctest: +SKIP
        """
        return task_from_preset(cls, handle, **overrides)


def task_from_preset(cls, handle, **overrides):
    """`keras_vit.from_preset(handle, **overrides)` if it holds a model of
    task class `cls`, else a `ValueError` naming what it holds (a task
    class's `from_preset`).

    Example:

    >>> import keras_vit, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1, num_heads=2,
    ...               mlp_dim=8, classes=3).save_to_preset(folder)
    >>> task_from_preset(keras_vit.Segmenter, folder)
    Traceback (most recent call last):
    ...
    ValueError: ... holds a ViT, not a Segmenter; load it with keras_vit.from_preset.
    """
    model = _from_preset(handle, **overrides)
    if not isinstance(model, cls):
        raise ValueError(
            f"{handle!r} holds a {type(model).__name__}, not a {cls.__name__}; load it with keras_vit.from_preset."
        )
    return model


class ExportableTask:
    """`model.export` of a task model through keras_vit's exporters
    (`keras_vit.export.export_model`): every format of the backend, named
    inputs and outputs, the batch dynamic unless `input_signature` (an
    `InputSpec` of a one-input model) fixes it."""

    def export(self, filepath, format="onnx", verbose=None, input_signature=None, **kwargs):
        """Writes the model as a serving artifact (see the class docstring).

        Args:
            filepath: the artifact's path (`.onnx`, `.xml`; a folder for
                "tf_saved_model").
            format: "onnx" (default), "openvino", "tf_saved_model", ...
            verbose: None or bool: the exporters' own messages.
            input_signature: None, or for a model of one image input an
                `InputSpec` fixing the batch.
            **kwargs: `batch_size`, as `keras_vit.export.export_model` takes it.

        Returns:
            The path.
        """
        from keras_vit import export

        options = {}
        if input_signature is not None:
            if isinstance(self.input, dict):
                raise ValueError(
                    f"Model {self.name!r} takes named inputs of fixed sizes: its artifact takes them as they are "
                    "(`batch_size=` fixes the batch). Received: an input_signature"
                )
            options = export.signature_options(self, input_signature)
        return export.export_model(self, filepath, format, verbose=bool(verbose), **options, **kwargs)
