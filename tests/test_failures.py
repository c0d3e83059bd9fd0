"""Nothing lost when a call fails: fault injection, input checks, random streams, atomic saving.

What a trainer does when a call fails runs on every backend: the jax trainer
is the one that detaches variables while it runs
(`keras_vit.execution.jax_state`), the others must keep the same guarantees.
The model under each trainer is one of `FAMILIES`, a different one per job
(`FAMILY`); the input checks, warnings, seeds' bookkeeping and atomic files
are keras_vit's own Python and run once.
"""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import keras
import numpy as np
import pytest

import keras_vit
import keras_vit.training
from conftest import ROOT, TINY, per_backend, runs_once, spread, to_numpy
from families import make_model
from keras_vit import saving

# The model families these tests run on (tests/families.py): the trainers'
# tests take one per job, so that each family meets some trainer.
FAMILIES = ("hybrid", "vit")
FAMILY = per_backend(jax="hybrid", tensorflow="vit", torch="hybrid")


def _weights(model):
    return [to_numpy(v).copy() for v in model.weights]


def _assert_same(actual, expected):
    assert len(actual) == len(expected)
    for a, b in zip(actual, expected):
        np.testing.assert_array_equal(a, b)


def _compiled_model(family="vit", **kwargs):
    model = make_model(family, classes=3, classifier_activation="softmax", **kwargs)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="sparse_categorical_crossentropy")
    return model


def _data(n=12, size=32):
    rng = np.random.default_rng(1)
    return rng.normal(size=(n, size, size, 3)).astype("float32"), rng.integers(0, 3, n)


class _Interrupt(keras.callbacks.Callback):
    """Raises KeyboardInterrupt at the end of batch `at`, after recording the weights."""

    def __init__(self, hook, at=2):
        super().__init__()
        self.at = at
        self.recorded = None
        setattr(self, f"on_{hook}_batch_end", self._end)

    def _end(self, batch, logs=None):
        if batch == self.at:
            self.recorded = _weights(self.model)
            raise KeyboardInterrupt


def _still_works(model, tmp_path, x, batch_size=None):
    """The model predicts, saves and reloads with the same outputs.

    `batch_size`: that of a predict the test ran already, whose compiled
    function (an XLA compilation on a TensorFlow CPU) serves again.
    """
    expected = model.predict(x, batch_size=batch_size, verbose=0)
    path = tmp_path / "after.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_allclose(restored.predict(x, batch_size=batch_size, verbose=0), expected, atol=1e-6)
    model.save_weights(tmp_path / "after.weights.h5")


@pytest.mark.parametrize("family", [FAMILY])
@pytest.mark.parametrize("method", ["predict", "evaluate"])
def test_interrupt_during_inference_keeps_the_weights(tmp_path, family, method):
    model = _compiled_model(family)
    x, y = _data()
    before = _weights(model)
    hook = {"predict": "predict", "evaluate": "test"}[method]
    callback = _Interrupt(hook)
    args = (x,) if method == "predict" else (x, y)
    with pytest.raises(KeyboardInterrupt):
        getattr(model, method)(*args, batch_size=2, verbose=0, callbacks=[callback])
    _assert_same(_weights(model), before)
    _still_works(model, tmp_path, x, batch_size=2)


@pytest.mark.parametrize("family", [FAMILY])
def test_interrupt_during_fit_keeps_the_last_completed_step(tmp_path, family):
    model = _compiled_model(family)
    x, y = _data()
    callback = _Interrupt("train", at=2)
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[callback])
    assert callback.recorded is not None
    # The values after the third step, as the callback saw them.
    _assert_same(_weights(model), callback.recorded)
    _still_works(model, tmp_path, x)
    # Training goes on from there (in batches of the traced size: no new trace).
    model.fit(x, y, batch_size=2, epochs=1, verbose=0)


def _bad_batches(x, channels=1):
    """Batches the input checks cannot see in advance: they fail inside the first step."""
    def generate():
        while True:
            yield x[:2, :, :, :channels]
    return generate()


@pytest.mark.parametrize("family", [FAMILY])
def test_failure_in_the_first_step_keeps_the_weights(tmp_path, family):
    model = _compiled_model(family)
    x, y = _data()
    before = _weights(model)
    with pytest.raises(Exception):
        model.predict(_bad_batches(x), steps=2, verbose=0)
    _assert_same(_weights(model), before)
    bad_labels = np.zeros((len(x), 7, 2), "float32")  # the loss fails on them
    with pytest.raises(Exception):
        model.evaluate(x, bad_labels, batch_size=4, verbose=0)
    _assert_same(_weights(model), before)
    with pytest.raises(Exception):
        model.fit(x, bad_labels, batch_size=4, epochs=1, verbose=0)
    _assert_same(_weights(model), before)
    with pytest.raises(Exception):
        model.train_on_batch(x[:4], bad_labels[:4])
    with pytest.raises(Exception):
        model.test_on_batch(x[:4], bad_labels[:4])
    _assert_same(_weights(model), before)
    _still_works(model, tmp_path, x)


def test_ctrl_c_at_any_moment_of_predict_keeps_the_weights(tmp_path):
    """A real SIGINT, sent while predict runs, wherever it lands.

    In a process of its own: after some of the exporters' runtimes have run
    in a test process, a SIGINT there ends the process instead of raising
    `KeyboardInterrupt`, which would take the test runner down with it.
    """
    script = (
        "import pathlib, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "import test_failures\n"
        f"test_failures._ctrl_c_during_predict(pathlib.Path({str(tmp_path)!r}))\n"
        "print('weights kept')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert proc.returncode == 0 and "weights kept" in proc.stdout, (
        proc.stdout[-2000:] + proc.stderr[-4000:]
    )


def _ctrl_c_during_predict(tmp_path):
    model = _compiled_model()
    x, _ = _data(64)
    before = _weights(model)
    model.predict(x, batch_size=2, verbose=0)  # compiled once, so the delays below fall in the loop
    start = time.perf_counter()
    model.predict(x, batch_size=2, verbose=0)
    duration = time.perf_counter() - start
    # Python's own handler, whatever an earlier test's library left installed
    # (a default action would end the test process instead of raising).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_predict_at(model, x, duration, before)
    finally:
        signal.signal(signal.SIGINT, previous)
    _still_works(model, tmp_path, x, batch_size=2)


def _interrupt_predict_at(model, x, duration, before):
    for fraction in (0.1, 0.35, 0.6, 0.85):
        timer = threading.Timer(duration * fraction, os.kill, (os.getpid(), signal.SIGINT))
        try:
            # Inside the `try`: a short delay can fire while `start` still
            # waits for the timer thread.
            timer.start()
            model.predict(x, batch_size=2, verbose=0)
            # On a loaded machine the timer may fire after predict: the
            # signal is sent once the join returns, and handled in the sleep.
            timer.join()
            time.sleep(0.5)
        except KeyboardInterrupt:
            timer.join()
        _assert_same(_weights(model), before)


def test_pre_training_keeps_the_encoder_when_fit_is_interrupted_or_fails(tmp_path):
    """The masked patch prediction task runs on the same runtime: the
    encoder it trains in place keeps the last completed step."""
    from keras_vit import pretraining

    encoder = keras_vit.ViT(**TINY, include_top=False)
    task = pretraining.MaskedPatchPrediction(encoder, seed=0)
    task.compile(optimizer=keras.optimizers.SGD(0.05))
    images = np.random.default_rng(0).integers(0, 256, (12, 32, 32, 3)).astype("uint8")
    callback = _Interrupt("train", at=2)
    with pytest.raises(KeyboardInterrupt):
        task.fit(images, batch_size=2, epochs=2, verbose=0, callbacks=[callback])
    _assert_same(_weights(task), callback.recorded)
    # What the encoder saves is the pre-training so far.
    encoder.save_weights(tmp_path / "encoder.weights.h5")
    reloaded = keras_vit.ViT(**TINY, include_top=False, weights=str(tmp_path / "encoder.weights.h5"),
                             mlp_activation="gelu_tanh")
    _assert_same(_weights(reloaded), _weights(encoder))

    def grey_batches():  # only the first step sees that they are not RGB
        while True:
            yield (images[:2, :, :, :1],)

    before = _weights(task)
    with pytest.raises(ValueError, match="must be RGB"):
        task.fit(grey_batches(), steps_per_epoch=2, epochs=1, verbose=0)
    _assert_same(_weights(task), before)
    assert np.isfinite(task.fit(images, batch_size=2, epochs=1, verbose=0).history["loss"]).all()


# Input checks, before any work.


@spread("keras_vit's input checks run before the backend's step; each family once")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_input_checks_name_what_the_model_takes(family):
    model = _compiled_model(family)
    x, _ = _data(2)
    gray = x[..., :1]
    for call in (model.predict, model.predict_on_batch, model):
        with pytest.raises(ValueError, match=r"takes 3-channel images.*\(2, 32, 32, 1\)"):
            call(gray)
    with pytest.raises(ValueError, match=r"must be a batch of images.*\(32, 32, 3\)"):
        model.predict(x[0])
    multiple = model.effective_patch_size[0]
    height = 32 + multiple // 2
    with pytest.raises(ValueError, match=rf"height must be a multiple of {multiple}.*\(2, {height}, 32, 3\)"):
        model.predict(np.zeros((2, height, 32, 3), "float32"))
    with pytest.raises(ValueError, match="takes 3-channel images"):
        model.fit(gray, np.zeros(2), verbose=0)
    with pytest.raises(ValueError, match="validation_data"):
        model.fit(x, np.zeros(2), validation_data=(gray, np.zeros(2)), verbose=0)


@runs_once("torch", "keras_vit reads the tf.data spec and warns before the backend's step")
def test_input_checks_read_a_tf_data_spec_and_warn_on_integer_pixels():
    tf = pytest.importorskip("tensorflow")
    model = _compiled_model()
    gray = tf.data.Dataset.from_tensor_slices(np.zeros((4, 32, 32, 1), "float32")).batch(2)
    with pytest.raises(ValueError, match="takes 3-channel images"):
        model.predict(gray, verbose=0)
    with pytest.warns(UserWarning, match=r"uint8.*preprocess_input"):
        model.predict(np.zeros((2, 32, 32, 3), "uint8"), verbose=0)
    # `predict` checks its input, and the model checks it again inside the
    # step: the warning is said once per model and dtype, not per check.
    other = _compiled_model()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            other.predict(np.zeros((2, 32, 32, 3), "uint8"), verbose=0)
    assert [str(w.message).split(":")[0] for w in caught if "uint8" in str(w.message)] == ["`x` holds uint8 values"]


@runs_once("torch", "the warning is keras_vit's, said before the backend's step")
def test_raw_float_pixels_get_a_warning_once_per_model():
    """Float images in [0, 255] fed straight to a model (the scaling forgotten)
    are said once, as integer pixels are; scaled images are not."""
    from keras_vit.preprocessing import Preprocessing

    model = keras_vit.ViT(**TINY, classes=3, preprocessing=Preprocessing.from_mode("imagenet", image_size=32))
    raw = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.predict(raw, verbose=0)
        model.predict(raw, verbose=0)
        model(raw)
        model.predict(keras_vit.preprocess_input(raw, model=model), verbose=0)
    said = [str(w.message) for w in caught if "raw [0, 255] pixels" in str(w.message)]
    assert len(said) == 1, said
    assert said[0].startswith("`x` holds values in [") and "preprocess_input(x, model=model)" in said[0]
    # A model whose own scaling takes [0, 255] values is fed them rightly.
    unscaled = keras_vit.ViT(**TINY, classes=3, preprocessing=Preprocessing(mean=(0, 0, 0), std=(1 / 255,) * 3))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*raw \\[0, 255\\] pixels")
        unscaled.predict(raw, verbose=0)


@runs_once("tensorflow", "the check is NumPy's; tensors of every backend pass through in test_preprocessing")
def test_preprocess_input_rejects_nan_and_passes_tensors_through():
    images = np.full((2, 4, 4, 3), 128.0, "float32")
    images[1, 2, 3, 0] = np.nan
    with pytest.raises(ValueError, match=r"1 NaN or infinite value.*index \(1, 2, 3, 0\)"):
        keras_vit.preprocess_input(images, mode="inception")
    images[1, 2, 3, 0] = np.inf
    with pytest.raises(ValueError, match="images"):
        keras_vit.preprocess_input(images, mode="inception")
    # Tensors are not read back to the host: NaN in, NaN out (documented).
    out = to_numpy(keras_vit.preprocess_input(keras.ops.convert_to_tensor(images), mode="inception"))
    assert np.isinf(out[1, 2, 3, 0]) and np.isfinite(out[0]).all()


# Random streams.


def test_stochastic_depth_draws_independent_masks_per_block():
    blocks = [keras_vit.layers.TransformerBlock(2, 8, stochastic_depth_rate=0.5) for _ in range(2)]
    ones = keras.ops.ones((256, 1, 1))
    masks = [to_numpy(block._drop_path(ones, training=True)) for block in blocks]
    for mask in masks:
        assert 0.3 < (mask > 0).mean() < 0.7  # each keeps about half the samples
    # Identical masks (a shared seed) would keep the same samples in every block.
    assert not np.array_equal(masks[0], masks[1])


@runs_once("torch", "the seeds' bookkeeping in the config is keras_vit's")
def test_seeds_are_in_the_config_and_derive_per_layer():
    model = keras_vit.ViT(**TINY, dropout_rate=0.1, stochastic_depth_rate=0.2, seed=7)
    assert model.get_config()["seed"] == 7
    seeds = [block.seed for block in model.encoder_blocks]
    assert len(set(seeds)) == len(seeds) and None not in seeds
    assert keras_vit.ViT.from_config(model.get_config()).get_config() == model.get_config()
    with pytest.raises(ValueError, match="seed"):
        keras_vit.ViT(**TINY, seed=-1)


def _seeded_run(seed):
    keras.utils.set_random_seed(seed)
    model = keras_vit.ViT(**TINY, classes=3, dropout_rate=0.2, attention_dropout_rate=0.1,
                          stochastic_depth_rate=0.3)
    # The random streams are the model's and fit's; an optimizer draws none.
    # SGD has no slot variables, which TensorFlow's trainer would create
    # inside the trace of each run's train step (two traces, 9 s of 12).
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="sparse_categorical_crossentropy")
    x, y = _data(8)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    return _weights(model)


@contextlib.contextmanager
def tf_op_determinism():
    """TensorFlow's kernels and tf.data's parallel maps may run in any order
    unless told not to; the switch is process-wide, so it is turned back off."""
    import tensorflow as tf
    from tensorflow.python.framework import config  # only the switch-off is not public

    was_on = config.is_op_determinism_enabled()
    tf.config.experimental.enable_op_determinism()
    try:
        yield
    finally:
        if not was_on:
            config.disable_op_determinism()


def test_seeded_runs_are_reproducible(backend):
    with tf_op_determinism() if backend == "tensorflow" else contextlib.nullcontext():
        first = _seeded_run(3)
        keras.utils.clear_session()
        _assert_same(_seeded_run(3), first)
        keras.utils.clear_session()
        other = _seeded_run(4)
    assert any(not np.array_equal(a, b) for a, b in zip(first, other))


@runs_once("torch", "the pipeline is tf.data under every backend")
def test_the_training_pipeline_runs_under_op_determinism():
    tf = pytest.importorskip("tensorflow")
    from keras_vit.training import data

    images = np.random.default_rng(0).integers(0, 255, (4, 12, 12, 3), dtype=np.uint8)
    dataset = tf.data.Dataset.from_tensor_slices((images, np.arange(4)))

    def first_batch():
        keras.utils.set_random_seed(5)
        return next(iter(data.train_pipeline(dataset, 8, batch_size=4, area_range=(0.3, 1.0))))

    with tf_op_determinism():
        first, again = first_batch(), first_batch()
    np.testing.assert_array_equal(first[0].numpy(), again[0].numpy())


# Atomic checkpoints.


@runs_once("torch", "the write and rename are keras_vit.saving's")
def test_a_failure_between_write_and_rename_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    model = _compiled_model()
    x, _ = _data(2)
    path = tmp_path / "run.weights.h5"
    model.save_weights(path)
    expected = model.predict(x, verbose=0)
    for variable in model.weights:
        variable.assign(np.zeros(variable.shape, "float32"))

    def killed(*args):
        raise KeyboardInterrupt  # as if the process died before the rename

    monkeypatch.setattr(saving.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        model.save_weights(path)
    with pytest.raises(KeyboardInterrupt):
        model.save(tmp_path / "run.keras")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.weights.h5"]
    restored = _compiled_model()
    restored.load_weights(path)
    np.testing.assert_allclose(restored.predict(x, verbose=0), expected, atol=1e-6)


@runs_once("torch", "the write and rename are keras_vit.saving's")
def test_final_weights_callback_is_atomic(tmp_path, monkeypatch):
    model = _compiled_model()
    x, y = _data(4)
    run_dir = tmp_path / "run"
    callbacks = keras_vit.training.run_callbacks(str(run_dir), monitor="loss", mode="min", tensorboard=False)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=callbacks)
    final = run_dir / "final.weights.h5"
    saved = final.read_bytes()
    monkeypatch.setattr(saving.os, "replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    final_callback = keras_vit.training.SaveFinalWeights(str(final))
    final_callback.set_model(model)
    with pytest.raises(KeyboardInterrupt):
        final_callback.on_train_end()
    assert final.read_bytes() == saved


_WRITER = textwrap.dedent(
    """
    import sys
    import keras_vit
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=256, num_layers=4,
                          num_heads=4, mlp_dim=1024, classes=10)
    model.save_weights(sys.argv[1])
    print("ready", flush=True)
    while True:
        model.save_weights(sys.argv[1])
    """
)


@runs_once("jax", "the write to a temporary file and the rename are keras_vit.saving's, the same under "
           "every backend")
def test_killing_a_process_while_it_saves_leaves_a_loadable_checkpoint(tmp_path, backend):
    path = tmp_path / "loop.weights.h5"
    env = dict(os.environ, KERAS_BACKEND=backend)
    for delay in (0.1, 0.4):
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)], cwd=ROOT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(delay)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=256, num_layers=4,
                              num_heads=4, mlp_dim=1024, classes=10)
        model.load_weights(path)  # complete, whenever the kill came
