"""What every keras_vit model class inherits besides its architecture.

`ModelBase` is a mixin placed before `keras.Model` in the bases of every
keras_vit model class (`ViT`, `ViTHybrid` and the pre-training wrappers).
It checks inputs before any work starts, in `fit`, `evaluate`, `predict`,
their `*_on_batch` forms and direct calls: a model class says what it takes
in `_check_input_spec(shape, dtype, name)`, which raises a `ValueError`
naming the argument, the value and what the model takes. Batches from a
Python generator are checked one by one as Keras draws them, in Python and
outside the compiled step: a bad later batch gets the same error on every
backend, not a reshape error from inside the graph.

The rest is one call each into its own home:

- nothing is lost when a call fails or is interrupted: each trainer call
  runs inside `keras_vit.execution.jax_state.keep_state` (jax's trainer
  detaches the variables while it runs);
- `save` and `save_weights` are atomic and gather the weights a jax
  layout splits over processes (`keras_vit.saving`);
- `fit` refuses a torch process group of several processes
  (`keras_vit.execution.processes`);
- inference on a TensorFlow CPU is compiled with XLA where `jit_compile`
  was left to Keras (`keras_vit.execution.tf_xla`);
- on TensorFlow the optimizer and metrics are built before the first step
  is traced, so it is traced once (`keras_vit.execution.tf_build`);
- `export` runs keras_vit's exporters (`keras_vit.export`);
- LoRA: `enable_lora`, `save_lora_weights`, `load_lora_weights` and
  `merge_lora` (`keras_vit.models.lora`), the methods keras-hub's models
  have.
"""

import contextlib
import types
from collections.abc import Mapping

import keras
import numpy as np

from keras_vit import saving
from keras_vit.execution import processes, tf_build, tf_xla
from keras_vit.execution.inputs import input_spec_of
from keras_vit.execution.jax_state import keep_state
from keras_vit.models import lora


def _argument(args, kwargs, name="x"):
    return args[0] if args else kwargs.get(name)


def _replace_argument(args, kwargs, position, name, function):
    """`(args, kwargs)` with the argument at `position`/`name` passed through `function`."""
    if len(args) > position:
        args = args[:position] + (function(args[position]),) + args[position + 1:]
    elif kwargs.get(name) is not None:
        kwargs = dict(kwargs, **{name: function(kwargs[name])})
    return args, kwargs


class ModelBase:
    """Input checks, and the calls into saving, execution policy, export and LoRA."""

    def _check_input_spec(self, shape, dtype, name="x"):
        """Hook: raises a `ValueError` for inputs the model cannot take."""

    def _check_input_dict(self, x, name="x"):
        """Hook: raises a `ValueError` for a dict of inputs the model cannot take."""

    def _check_input_values(self, x, name="x"):
        """Hook: warns about NumPy inputs whose values look wrong (read on the host)."""

    def _check_data(self, x, name="x"):
        if isinstance(x, Mapping):
            self._check_input_dict(x, name)
            return
        spec = input_spec_of(x)
        if spec is not None:
            self._check_input_spec(spec[0], spec[1], name)
        if isinstance(x, np.ndarray):
            self._check_input_values(x, name)

    def _check_validation_data(self, data):
        if isinstance(data, (tuple, list)) and data:
            self._check_data(data[0], "validation_data")
        elif data is not None:
            self._check_data(data, "validation_data")

    def _checked_batches(self, data, name):
        """`data` itself, or for a Python generator one that checks every batch."""
        if not isinstance(data, types.GeneratorType):
            return data

        def batches():
            for number, batch in enumerate(data, 1):
                images = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
                try:
                    self._check_data(images, f"{name} (batch {number} of the generator)")
                except ValueError as error:
                    # tf.data wraps what a generator raises: kept for `_batch_errors`.
                    self._batch_error = error
                    raise
                yield batch

        return batches()

    @contextlib.contextmanager
    def _batch_errors(self):
        """Raises the input error of a generator's batch as itself."""
        self._batch_error = None
        try:
            yield
        except Exception:
            error, self._batch_error = self._batch_error, None
            if error is None:
                raise
            raise error from None

    def _with_checked_generators(self, args, kwargs, validation=None):
        args, kwargs = _replace_argument(args, kwargs, 0, "x", lambda d: self._checked_batches(d, "x"))
        if validation is not None:
            checked = lambda d: self._checked_batches(d, "validation_data")  # noqa: E731
            args, kwargs = _replace_argument(args, kwargs, validation, "validation_data", checked)
        return args, kwargs

    def __call__(self, *args, **kwargs):
        if args:
            self._check_data(args[0], "inputs")
        return super().__call__(*args, **kwargs)

    def fit(self, *args, **kwargs):
        processes.check_training_processes()
        self._check_data(_argument(args, kwargs))
        validation = args[7] if len(args) > 7 else kwargs.get("validation_data")
        self._check_validation_data(validation)
        args, kwargs = self._with_checked_generators(args, kwargs, validation=7)
        with keep_state(self), self._batch_errors():
            return super().fit(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        self._check_data(_argument(args, kwargs))
        args, kwargs = self._with_checked_generators(args, kwargs)
        with keep_state(self), self._batch_errors():
            return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        self._check_data(_argument(args, kwargs))
        args, kwargs = self._with_checked_generators(args, kwargs)
        with keep_state(self), self._batch_errors():
            return super().predict(*args, **kwargs)

    def train_on_batch(self, *args, **kwargs):
        self._check_data(_argument(args, kwargs))
        with keep_state(self):
            return super().train_on_batch(*args, **kwargs)

    def test_on_batch(self, *args, **kwargs):
        self._check_data(_argument(args, kwargs))
        with keep_state(self):
            return super().test_on_batch(*args, **kwargs)

    def predict_on_batch(self, *args, **kwargs):
        self._check_data(_argument(args, kwargs))
        with keep_state(self):
            return super().predict_on_batch(*args, **kwargs)

    def save(self, filepath, overwrite=True, **kwargs):
        """`keras.Model.save`, written to a temporary file and renamed (`keras_vit.saving`)."""
        return saving.save_model(self, super().save, filepath, overwrite=overwrite, **kwargs)

    def save_weights(self, filepath, overwrite=True, max_shard_size=None):
        """`keras.Model.save_weights`, written to a temporary file and renamed (`keras_vit.saving`)."""
        return saving.save_weights(self, super().save_weights, filepath, overwrite, max_shard_size)

    def load_weights(self, filepath, skip_mismatch=False, **kwargs):
        """`keras.Model.load_weights`; an Orbax checkpoint restores onto another mesh (`keras_vit.saving`)."""
        return saving.load_weights(self, super().load_weights, filepath, skip_mismatch=skip_mismatch, **kwargs)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Called by Keras' TensorFlow trainer only.
        return tf_build.symbolic_build(self, super()._maybe_symbolic_build, iterator, data_batch)

    def compile(self, *args, jit_compile="auto", **kwargs):
        """`keras.Model.compile`; with `jit_compile="auto"`, inference on a
        tensorflow CPU is compiled with XLA (`keras_vit.execution.tf_xla`)."""
        tf_xla.record_jit_compile(self, jit_compile)
        super().compile(*args, jit_compile=jit_compile, **kwargs)

    def compile_from_config(self, config):
        """Compiles a loaded model as it was saved (Keras skips models whose
        `compile` is overridden; this one takes Keras' own arguments)."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if getattr(self, "optimizer", None) is not None and self.built:
            self.optimizer.build(self.trainable_variables)

    def make_predict_function(self, force=False):
        return tf_xla.make_predict_function(self, super().make_predict_function, force)

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs):
        """`keras.Model.export` through keras_vit's exporters (`keras_vit.export`).

        Every format of the backend (`export.BACKEND_FORMATS`), with a
        dynamic batch and the outputs of `model.predict` (tested to 1e-4),
        where Keras' own exporters fail on these models.

        Args:
            filepath: the artifact's path (`.onnx`, `.xml`, `.tflite`,
                `.pt2`; a folder for "tf_saved_model").
            format: "tf_saved_model" (default), "onnx", "openvino",
                "litert" or "torch".
            verbose: None or bool: the exporters' own messages.
            input_signature: None, or one `keras.InputSpec` (or a list
                holding one) of shape `(batch, height, width, channels)`:
                a fixed batch and another image size. Its channels must be
                the model's. Or a dict of `InputSpec`s of a NaFlex patch
                batch with a fixed number of tokens `n` (`"patches"`,
                `"patch_coords"`, `"patch_valid"`; `keras_vit.models.patch_inputs`):
                the artifact takes that dict.
            **kwargs: `image_size`, `batch_size`, `quantize` ("int8" for
                "onnx" and "openvino"), `sample_images` and
                `naflex_length`, as `keras_vit.export.export_model` takes them.

        Returns:
            What `export_model` returns: the path (with `quantize`, a
            `QuantizedExport` carrying the top-1 agreement with float32).
        """
        from keras_vit import export

        if not callable(getattr(self, "for_inference", None)):
            raise ValueError(
                f"{type(self).__name__} is a training task, not a model to serve (its "
                "outputs depend on random corruption); export its encoder "
                "(`task.encoder.export(...)`) or a classifier built from it."
            )
        lora.refuse_adapters(self, "exporting")  # the exported copy (`for_inference`) reads the kernels
        options = export.signature_options(self, input_signature)
        unknown = set(kwargs) - set(export.MODEL_EXPORT_OPTIONS)
        if unknown:
            raise ValueError(
                f"Unknown keyword argument(s) to `export`: {sorted(unknown)}. "
                f"keras_vit's exporters take {export.MODEL_EXPORT_OPTIONS}."
            )
        options.update(kwargs)
        return export.export_model(self, filepath, format, verbose=bool(verbose), **options)

    def enable_lora(self, rank, targets=("query", "value"), alpha=None, train_head=True, verbose=True):
        """Enables LoRA on the blocks' projections and freezes the rest.

        Keras' own `enable_lora` on the chosen projections of every block
        (`keras_vit.models.lora`); compile after it.

        Args:
            rank: int, the adapters' rank.
            targets: names among "query", "key", "value", "out", "Dense_0"
                and "Dense_1"; default ("query", "value").
            alpha: None (default: `rank`) or a float: the update is scaled
                by `alpha / rank`.
            train_head: bool, default True: the classifier stays trainable.
            verbose: bool, default True: prints the trainable-parameter count.

        Returns:
            int, the number of trainable parameters.

        Example:

        >>> import keras_vit
        >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8,
        ...                       num_layers=1, num_heads=2, mlp_dim=8, classes=3)
        >>> model.enable_lora(2, targets=("query", "value"))
        LoRA rank 2 on query, value of 2 projections: 107 trainable parameters of 2,179 (4.91%).
        107
        """
        return lora.enable_lora(self, rank, targets, alpha=alpha, train_head=train_head, verbose=verbose)

    def save_lora_weights(self, filepath):
        """Writes the LoRA adapters alone to a `.lora.h5` file (`keras_vit.models.lora`)."""
        return lora.save_lora_weights(self, filepath)

    def load_lora_weights(self, filepath):
        """Loads adapters saved by `save_lora_weights` (enabling LoRA with the file's rank if needed)."""
        return lora.load_lora_weights(self, filepath)

    def merge_lora(self):
        """Folds the LoRA adapters into the kernels and removes them (for export); returns the model."""
        return lora.merge_lora(self)
