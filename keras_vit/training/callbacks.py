"""A run directory and the callbacks that make a `fit` resumable.

`run_callbacks(run_dir)` returns stock Keras callbacks writing into one
folder:

    run_dir/
      backup/             BackupAndRestore state (weights, optimizer, epoch);
                          removed when training completes
      best.weights.h5     weights of the best epoch (by `monitor`; `save_best`)
      final.weights.h5    weights at the end of training (`save_final`)
      log.csv             one row of metrics per epoch (appended on resume)
      tensorboard/        TensorBoard logs (when TensorFlow and TensorBoard are installed)

A `.weights.h5` file holds arrays only: reloaded into a model it takes that
model's configuration (GELU, image size, class names). `SavePreset` writes
a whole keras_vit preset instead (configuration, weights, class names,
preprocessing; `keras_vit.from_preset` reloads it as it was trained), at
the end of training or at each best epoch; `examples/finetune.py` keeps its
run's weights that way.

`StopAfterUpdates` ends `fit` after an exact number of parameter updates,
mid-epoch if need be (the last evaluation interval is cut short; Keras still
evaluates and calls `on_epoch_end` for it).

With several processes (`keras_vit.training.multiprocess`), each process
backs up into `backup/process_<i>/`: every process holds the whole model
(keras_vit models gather weights split over processes when saving) and the
backups neither race on one file nor need a shared file system; the weights
files are renamed into place atomically, so all processes may write them.

A run killed at any point restarts, with the same command and `run_dir`, from
its last completed epoch: `BackupAndRestore` reloads the weights and the
optimizer state (including `optimizer.iterations`, so learning-rate schedules
continue) and skips the finished epochs.

Every weights file is written atomically (`keras_vit.saving.atomic_path`: a
temporary file in the same folder, renamed when complete), so a run killed
while saving keeps the previous file: keras_vit models save this way
whichever callback asks them to, and `SaveFinalWeights` does it for any model.
"""

import os
import tempfile
import warnings

import keras

from keras_vit.saving import atomic_path
from keras_vit.training import multiprocess
from keras_vit.validation import check_int


class SaveFinalWeights(keras.callbacks.Callback):
    """Saves the model's weights when `fit` ends normally, atomically.

    Args:
        filepath: str, a `.weights.h5` path.
    """

    def __init__(self, filepath):
        super().__init__()
        if not str(filepath).endswith(".weights.h5"):
            raise ValueError(
                "`filepath` must end with '.weights.h5'. "
                f"Received: filepath={filepath!r}"
            )
        self.filepath = str(filepath)

    def on_train_end(self, logs=None):
        with atomic_path(self.filepath) as temporary:
            self.model.save_weights(temporary, overwrite=True)


class StopAfterUpdates(keras.callbacks.Callback):
    """Stops `fit` after exactly `total_updates` parameter updates.

    `fit(epochs=ceil(total_updates / updates_per_epoch), ...)` alone would run
    whole epochs; this callback ends the last one early. It counts batches
    from the epoch number and the batch index, so a run resumed by
    `BackupAndRestore` (which restarts at a later epoch) stops at the same
    update.

    Args:
        total_updates: int, parameter updates of the run.
        updates_per_epoch: int, updates per `fit` epoch.
        steps_per_update: int, default 1: batches per update (gradient
            accumulation).

    Example:

    >>> callback = StopAfterUpdates(10, updates_per_epoch=4)
    >>> callback.epochs, callback.updates_in_epoch(2)
    (3, 2)
    """

    def __init__(self, total_updates, updates_per_epoch, steps_per_update=1):
        super().__init__()
        self.total_updates = check_int(total_updates, "total_updates", minimum=1)
        self.updates_per_epoch = check_int(updates_per_epoch, "updates_per_epoch", minimum=1)
        self.steps_per_update = check_int(steps_per_update, "steps_per_update", minimum=1)
        self._epoch = 0

    @property
    def epochs(self):
        """The `epochs` argument of `fit`: the last one may be partial."""
        return -(-self.total_updates // self.updates_per_epoch)

    @property
    def steps_per_epoch(self):
        """The `steps_per_epoch` argument of `fit`, in batches."""
        return self.updates_per_epoch * self.steps_per_update

    def updates_in_epoch(self, epoch):
        """Parameter updates made in `epoch` (0-based)."""
        done = epoch * self.updates_per_epoch
        return max(0, min(self.updates_per_epoch, self.total_updates - done))

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        batches = self._epoch * self.steps_per_epoch + batch + 1
        if batches >= self.total_updates * self.steps_per_update:
            self.model.stop_training = True


class SavePreset(keras.callbacks.Callback):
    """Writes the model as a keras_vit preset at the end of training, or at
    every epoch that improves `monitor`.

    The preset is written by `keras_vit.training.save_trained_preset`: the
    model's configuration with its head's activation (softmax by default, so
    that a model trained on logits predicts probabilities), its weights
    without the optimizer's state, class names and preprocessing. With
    several processes every process takes part (saving gathers weights split
    over them) and process 0 writes `directory`.

    Args:
        directory: the preset folder (replaced at each save).
        monitor: None (default: save when training ends) or a metric name
            such as "val_accuracy": save at each epoch that improves it.
        mode: "max" (default) or "min" for `monitor`.
        **preset_options: `class_names`, `preprocessing` and
            `classifier_activation` for `save_trained_preset`.
    """

    def __init__(self, directory, monitor=None, mode="max", **preset_options):
        super().__init__()
        if mode not in ("max", "min"):
            raise ValueError(f"`mode` must be 'max' or 'min'. Received: mode={mode!r}")
        from keras_vit.training.presets import PRESET_OPTIONS

        unknown = sorted(set(preset_options) - set(PRESET_OPTIONS))
        if unknown:
            raise ValueError(
                f"Unknown preset option(s) {unknown}; `SavePreset` takes {PRESET_OPTIONS}."
            )
        self.directory = os.fspath(directory)
        self.monitor, self.mode = monitor, mode
        self.preset_options = preset_options
        self.best = None

    def _save(self):
        from keras_vit.training.presets import save_trained_preset

        if multiprocess.process_index() == 0:
            save_trained_preset(self.model, self.directory, **self.preset_options)
            return
        with tempfile.TemporaryDirectory() as scratch:  # a collective every process joins
            save_trained_preset(self.model, scratch, **self.preset_options)

    def on_epoch_end(self, epoch, logs=None):
        if self.monitor is None:
            return
        value = (logs or {}).get(self.monitor)
        if value is None:
            warnings.warn(f"SavePreset: no {self.monitor!r} in the epoch's logs; nothing saved.",
                          stacklevel=2)
            return
        better = self.best is None or (value > self.best if self.mode == "max" else value < self.best)
        if better:
            self.best = value
            self._save()

    def on_train_end(self, logs=None):
        if self.monitor is None:
            self._save()


def _tensorboard_available():
    try:
        # Keras writes the summaries with tf.summary, which needs both.
        import tensorboard  # noqa: F401
        import tensorflow  # noqa: F401
    except ImportError:
        return False
    return True


def run_callbacks(
    run_dir,
    monitor="val_accuracy",
    mode="max",
    backup=True,
    save_best=True,
    csv=True,
    tensorboard=True,
    backup_freq="epoch",
    save_final=True,
):
    """Callbacks that save, log and back up a run under `run_dir`.

    Args:
        run_dir: str, the run's folder (created if missing).
        monitor: str, default "val_accuracy", the quantity choosing the best
            weights; needs validation data in `fit`.
        mode: "max" (default) or "min" for `monitor`.
        backup: bool, default True: `keras.callbacks.BackupAndRestore`.
        save_best: bool, default True: `ModelCheckpoint` of the best epoch.
        csv: bool, default True: `CSVLogger` (appending, so a resumed run
            continues the same file).
        tensorboard: bool, default True: `TensorBoard` (skipped with a
            warning when TensorFlow or TensorBoard is not installed).
        backup_freq: "epoch" (default) or an int number of batches between
            backups.
        save_final: bool, default True: `SaveFinalWeights` at the end.

    Returns:
        A list of `keras.callbacks.Callback`. `BackupAndRestore` comes first
        so that its end-of-epoch backup is written before any other callback
        can stop the run.

    Example:

    >>> import tempfile
    >>> [type(c).__name__ for c in run_callbacks(tempfile.mkdtemp(), tensorboard=False)]
    ['BackupAndRestore', 'ModelCheckpoint', 'CSVLogger', 'SaveFinalWeights']
    """
    if mode not in ("max", "min"):
        raise ValueError(f"`mode` must be 'max' or 'min'. Received: mode={mode!r}")
    os.makedirs(run_dir, exist_ok=True)
    callbacks = []
    if backup:
        backup_dir = os.path.join(run_dir, "backup")
        if multiprocess.process_count() > 1:
            backup_dir = os.path.join(backup_dir, f"process_{multiprocess.process_index()}")
        callbacks.append(
            keras.callbacks.BackupAndRestore(
                backup_dir,
                save_freq=backup_freq,
                delete_checkpoint=True,
            )
        )
    if save_best:
        callbacks.append(
            keras.callbacks.ModelCheckpoint(
                os.path.join(run_dir, "best.weights.h5"),
                monitor=monitor,
                mode=mode,
                save_best_only=True,
                save_weights_only=True,
            )
        )
    if csv:
        callbacks.append(keras.callbacks.CSVLogger(os.path.join(run_dir, "log.csv"), append=True))
    if tensorboard:
        if _tensorboard_available():
            callbacks.append(keras.callbacks.TensorBoard(os.path.join(run_dir, "tensorboard")))
        else:
            warnings.warn(
                "TensorFlow or TensorBoard is not installed: no TensorBoard logs.",
                stacklevel=2,
            )
    if save_final:
        callbacks.append(SaveFinalWeights(os.path.join(run_dir, "final.weights.h5")))
    return callbacks
