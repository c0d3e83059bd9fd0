"""How keras_vit models run: what every model class inherits besides its architecture.

`ModelBase` is a mixin placed before `keras.Model` in the bases of every
keras_vit model class (`ViT`, `ViTHybrid` and the pre-training wrappers). It
holds what depends on the backend and on the data rather than on the
architecture:

- Inputs are checked before any work starts, in `fit`, `evaluate`,
  `predict`, their `*_on_batch` forms and direct calls: a model class says
  what it takes in `_check_input_spec(shape, dtype, name)`, which raises a
  `ValueError` naming the argument, the value and what the model takes.
  Batches from a Python generator are checked one by one as Keras draws
  them, in Python and outside the compiled step (which costs nothing
  there): a bad later batch gets the same error on every backend, not a
  reshape error from inside the graph.
- Nothing is lost when such a call fails or is interrupted: the variables
  keep the values of the moment of failure (for `fit`: of the last completed
  step), on every backend (`keras_vit.models.jax_guard` for jax, whose
  trainer detaches them while it runs).
- Saving is atomic: `save` and `save_weights` write a temporary file and
  rename it over the target (`keras_vit.saving.atomic_path`), so a process
  killed while saving leaves the previous file intact.
- Several processes: saving gathers the weights that a jax model-parallel
  layout splits over processes (`keras_vit.saving.gathered_variables`), and
  `fit` refuses to run under a torch process group of several processes,
  where each would train its own model unsynchronised.
- On a TensorFlow CPU, inference is compiled with XLA when the choice was
  left to Keras (`jit_compile="auto"`). Keras' "auto" turns XLA off there;
  for inference it pays (ViT-B/16, batch 8: 1.34x the images/s of the graph
  runtime, `tools/benchmark.py`), while training measured faster without it
  (2.43 against 3.05 images/s for S/16), so only the predict function is
  compiled. Not under a bfloat16 compute dtype: there the graph runtime's
  oneDNN matmuls run bfloat16 at twice float32's rate where XLA's CPU dots
  do not (B/16, batch 2: 2.25x XLA's float32 against 0.93x,
  `keras_vit.layers.kernels` has the matmul rates). That predict function
  is traced inside `kernels.xla_compiled()`, so that attention over many
  tokens takes its heads a group at a time, as on jax. Since the graph
  runtime's products fuse their GELU, B/16 ran level on both in float32
  (2-core EPYC, medians of 6 interleaved calls: batch 8 1,435 ms under XLA
  against 1,418, batch 1 211 against 209); XLA stays the choice.
"""

import contextlib
import sys
import types

import keras

from keras_vit import kernels
from keras_vit.models.jax_guard import JaxStateGuard
from keras_vit.saving import atomic_path, gathered_variables


def input_spec_of(x):
    """`(shape, dtype)` of the batches `x` feeds, when known without reading data.

    Arrays and tensors of any library, and `tf.data.Dataset`s (of images, or
    of tuples whose first element is the images); None otherwise.
    """
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(x, tf.data.Dataset):
        spec = x.element_spec
        spec = spec[0] if isinstance(spec, (tuple, list)) and spec else spec
        if not isinstance(spec, tf.TensorSpec) or spec.shape.rank is None:
            return None
        return tuple(spec.shape), spec.dtype.name
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None or isinstance(x, (dict, list, tuple)):
        return None
    try:
        dtype = keras.backend.standardize_dtype(dtype)
    except ValueError:
        dtype = str(dtype)
    return tuple(shape), dtype


def _argument(args, kwargs, name="x"):
    return args[0] if args else kwargs.get(name)


def _replace_argument(args, kwargs, position, name, function):
    """`(args, kwargs)` with the argument at `position`/`name` passed through `function`."""
    if len(args) > position:
        args = args[:position] + (function(args[position]),) + args[position + 1:]
    elif kwargs.get(name) is not None:
        kwargs = dict(kwargs, **{name: function(kwargs[name])})
    return args, kwargs


def torch_process_group_size():
    """Processes in an initialised torch process group (1 when there is none).

    Reads `torch.distributed` only when it was imported: no group can
    exist otherwise.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size()


def refuse_torch_processes(why):
    """Raises the error for training over several processes with torch."""
    raise RuntimeError(
        f"keras_vit cannot train over several processes on the torch backend ({why}): "
        "Keras 3 has no torch distribution, so each process would train its "
        "own copy of the model, unsynchronised. Train in one process (one "
        "device), or use KERAS_BACKEND=jax (data or model parallel over "
        "processes) or tensorflow (MultiWorkerMirroredStrategy)."
    )


def _all_variables(model):
    variables = list(model.variables) + list(getattr(model, "metrics_variables", []))
    if getattr(model, "optimizer", None) is not None:
        variables += list(model.optimizer.variables)
    return variables


class ModelBase(JaxStateGuard):
    """Input checks, failure safety, atomic saving and backend execution policy."""

    def _check_input_spec(self, shape, dtype, name="x"):
        """Hook: raises a `ValueError` for inputs the model cannot take."""

    def _check_data(self, x, name="x"):
        spec = input_spec_of(x)
        if spec is not None:
            self._check_input_spec(spec[0], spec[1], name)

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
        if keras.backend.backend() == "torch" and torch_process_group_size() > 1:
            refuse_torch_processes(f"a torch process group of {torch_process_group_size()} is initialised")
        self._check_data(_argument(args, kwargs))
        validation = args[7] if len(args) > 7 else kwargs.get("validation_data")
        self._check_validation_data(validation)
        args, kwargs = self._with_checked_generators(args, kwargs, validation=7)
        with self._state_kept(), self._batch_errors():
            return super().fit(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        self._check_data(_argument(args, kwargs))
        args, kwargs = self._with_checked_generators(args, kwargs)
        with self._state_kept(), self._batch_errors():
            return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        self._check_data(_argument(args, kwargs))
        args, kwargs = self._with_checked_generators(args, kwargs)
        with self._state_kept(), self._batch_errors():
            return super().predict(*args, **kwargs)

    def train_on_batch(self, *args, **kwargs):
        self._check_data(_argument(args, kwargs))
        with self._state_kept():
            return super().train_on_batch(*args, **kwargs)

    def test_on_batch(self, *args, **kwargs):
        self._check_data(_argument(args, kwargs))
        with self._state_kept():
            return super().test_on_batch(*args, **kwargs)

    def predict_on_batch(self, *args, **kwargs):
        self._check_data(_argument(args, kwargs))
        with self._state_kept():
            return super().predict_on_batch(*args, **kwargs)

    def make_train_function(self, force=False):
        super().make_train_function(force)
        self._record_steps("train_function")

    def make_test_function(self, force=False):
        super().make_test_function(force)
        self._record_steps("test_function")

    def save(self, filepath, overwrite=True, **kwargs):
        """`keras.Model.save`, written to a temporary file and renamed."""
        if not overwrite or not str(filepath).endswith(".keras"):
            return super().save(filepath, overwrite=overwrite, **kwargs)
        with gathered_variables(_all_variables(self)), atomic_path(filepath) as temporary:
            return super().save(temporary, overwrite=True, **kwargs)

    def save_weights(self, filepath, overwrite=True, max_shard_size=None):
        """`keras.Model.save_weights`, written to a temporary file and renamed."""
        with gathered_variables(_all_variables(self)):
            if not overwrite or max_shard_size is not None:
                return super().save_weights(filepath, overwrite=overwrite, max_shard_size=max_shard_size)
            return self._save_weights_atomically(filepath)

    def _save_weights_atomically(self, filepath):
        with atomic_path(filepath) as temporary:
            return super().save_weights(temporary, overwrite=True)

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
                the model's.
            **kwargs: `image_size`, `batch_size`, `quantize` ("int8" for
                "onnx" and "openvino") and `sample_images`, as
                `keras_vit.export.export_model` takes them.

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
        from keras_vit.models.lora import lora_layers

        if lora_layers(self):
            # The exported copy (`for_inference`) takes the kernels without the adapters.
            raise ValueError(
                f"Model {self.name!r} has LoRA adapters: merge them into the kernels with "
                "`model.merge_lora()` before exporting."
            )
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
        from keras_vit.models import lora

        return lora.enable_lora(self, rank, targets, alpha=alpha, train_head=train_head, verbose=verbose)

    def save_lora_weights(self, filepath):
        """Writes the LoRA adapters alone to a `.lora.h5` file (`keras_vit.models.lora`)."""
        from keras_vit.models import lora

        lora.save_lora_weights(self, filepath)

    def load_lora_weights(self, filepath):
        """Loads adapters saved by `save_lora_weights` (enabling LoRA with the file's rank if needed)."""
        from keras_vit.models import lora

        lora.load_lora_weights(self, filepath)

    def merge_lora(self):
        """Folds the LoRA adapters into the kernels and removes them (for export); returns the model."""
        from keras_vit.models import lora

        return lora.merge_lora(self)

    def compile(self, *args, jit_compile="auto", **kwargs):
        """`keras.Model.compile`; with `jit_compile="auto"`, inference on a
        tensorflow CPU is compiled with XLA (see the module docstring)."""
        self._jit_compile_auto = jit_compile == "auto"
        super().compile(*args, jit_compile=jit_compile, **kwargs)

    def compile_from_config(self, config):
        """Compiles a loaded model as it was saved (Keras skips models whose
        `compile` is overridden; this one takes Keras' own arguments)."""
        self.compile(**keras.saving.deserialize_keras_object(config))
        if getattr(self, "optimizer", None) is not None and self.built:
            self.optimizer.build(self.trainable_variables)

    def _xla_inference(self):
        """Whether the predict function is XLA-compiled by this policy."""
        if keras.backend.backend() != "tensorflow":
            return False
        if not getattr(self, "_jit_compile_auto", True) or self.run_eagerly:
            return False
        import tensorflow as tf

        if self.jit_compile or tf.config.list_logical_devices("GPU"):
            return False  # Keras has decided already (XLA on accelerators).
        if any(layer.compute_dtype == "bfloat16" for layer in (self, *self.layers)):
            return False  # XLA's CPU dots run bfloat16 at float32 speed; oneDNN at 2x.
        return self.distribute_strategy.num_replicas_in_sync == 1

    def make_predict_function(self, force=False):
        if not self._xla_inference():
            super().make_predict_function(force)
            return self._record_steps("predict_function")
        chosen = self.jit_compile
        self.jit_compile = True
        try:
            super().make_predict_function(force)
        finally:
            self.jit_compile = chosen
        function = self.predict_function
        if function is None or getattr(function, "_traced_for_xla", False):
            return function

        def predict_function(*args, **kwargs):
            # The layers' kernels emit XLA's fastest form when traced here.
            with kernels.xla_compiled():
                return function(*args, **kwargs)

        predict_function._traced_for_xla = True
        self.predict_function = predict_function
        return predict_function
