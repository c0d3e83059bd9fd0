"""A run directory and the callbacks that make a `fit` resumable.

`run_callbacks(run_dir)` returns stock Keras callbacks writing into one
folder:

    run_dir/
      backup/             BackupAndRestore state (weights, optimizer, epoch);
                          removed when training completes
      best.weights.h5     weights of the best epoch (by `monitor`)
      final.weights.h5    weights at the end of training
      log.csv             one row of metrics per epoch (appended on resume)
      tensorboard/        TensorBoard logs (when TensorFlow and TensorBoard are installed)

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
import warnings

import keras

from keras_vit.saving import atomic_path
from keras_vit.training import multiprocess


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
    callbacks.append(SaveFinalWeights(os.path.join(run_dir, "final.weights.h5")))
    return callbacks
