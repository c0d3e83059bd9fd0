"""What every command line does before it imports Keras: standard library only.

- `ArgumentParser`: argparse without prefix matching, whose errors name a
  misspelt flag and the closest valid one (`--weigths` is not reported as
  "--weights is required"); `model_then_images` gives a command the
  positionals `MODEL IMAGE...` (or `--preset MODEL` and images only).
- `configure_threads`: torch's intra-op threads set to the physical cores
  this process may use (its CPU affinity and the container's CPU quota),
  unless `OMP_NUM_THREADS` or a `--threads` flag says otherwise. torch's own
  default, one thread per logical CPU with OpenMP's busy-waiting, fights the
  tf.data input pipeline and any other job for the same cores.
- `quiet_imports`: the C++ start-up banners of TensorFlow, XLA and CUDA
  (oneDNN notices, "Could not find cuda drivers") kept out of the terminal.
- `lean_keras_import`: Keras imported without the optional libraries it
  loads for features no command uses (`KERAS_EXTRAS`), a command's first
  seconds and a fifth of its memory.
- `bounded` (and `COUNT`, `FRACTION`, `NON_NEGATIVE`, `FINITE`): the
  `type` of a numeric flag, which refuses a value of the wrong kind or out
  of its range as a usage error naming the flag, the value and what is
  allowed, before anything loads.

The examples (`examples/*.py`) and the console scripts
(`keras_vit.cli.parsers`) call these; `import keras_vit` alone changes
nothing of the process.
"""

import argparse
import contextlib
import difflib
import functools
import importlib.util
import json
import math
import os
import sys

THREADS_HELP = (
    "threads of torch's CPU operations (default: the physical cores this process may "
    "use, or OMP_NUM_THREADS when set; on a machine shared with other jobs, fewer run faster)"
)


# Flags of other training scripts (Keras examples, transformers' Trainer,
# timm's train.py) and the flag here that does the same, for the hint.
OTHER_NAMES = {
    "--epochs": "--total-steps",
    "--num-epochs": "--total-steps",
    "--num-train-epochs": "--total-steps",
    "--max-steps": "--total-steps",
    "--steps": "--total-steps",
    "--learning-rate": "--lr",
    "--bs": "--batch-size",
    "--warmup": "--warmup-steps",
    "--warmup-epochs": "--warmup-steps",
    "--output-dir": "--run-dir",
    "--model-name": "--model",
}
# Flags other tools choose their backend with: keras_vit's commands take it
# from Keras' environment variable, as every Keras program does.
BACKEND_FLAGS = ("--backend", "--keras-backend", "--framework")
BACKEND_HINT = (
    ": the Keras backend is not a flag; set the environment variable KERAS_BACKEND before the "
    "command (KERAS_BACKEND=jax, tensorflow or torch, e.g. `KERAS_BACKEND=jax keras-vit ...`)"
)


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` that names a misspelt flag and the closest valid one.

    Prefix matching is off (`allow_abbrev=False`): `--weigths` is an
    unknown flag, reported before any "required" error, with the valid flag
    nearest to it. Sub-commands made from it behave the same.

    Example:

    >>> parser = ArgumentParser(prog="demo")
    >>> _ = parser.add_argument("--weights", required=True)
    >>> parser.unknown_flag(["--weigths", "w.npz"])
    "unrecognized argument '--weigths'; did you mean '--weights'?"
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _flags(self):
        return [s for action in self._actions for s in action.option_strings]

    def _command_parser(self, argv):
        """The sub-command's parser named in `argv`, and the arguments after it."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for i, token in enumerate(argv):
                    if token in action.choices:
                        return action.choices[token], argv[i + 1:]
        return None, ()

    def unknown_flag(self, argv):
        """The error message for the first unknown `--flag` in `argv`, or None."""
        argv = list(argv)
        command, rest = self._command_parser(argv)
        if command is not None:
            argv = argv[: len(argv) - len(rest) - 1]
            message = command.unknown_flag(rest) if isinstance(command, ArgumentParser) else None
            if message:
                return message
        flags = self._flags()
        for token in argv:
            if token == "--":
                break
            name = token.split("=", 1)[0]
            if name.startswith("--") and name not in flags:
                return f"unrecognized argument {name!r}{self._hint(name, flags)}"
        return None

    @staticmethod
    def _hint(name, flags):
        """"; did you mean '--flag'?" for an unknown flag `name`, or the valid flags.

        The same flag with `_` for `-`, or another script's name for one of
        these (`OTHER_NAMES`), is named before the closest spelling.

        Example:

        >>> ArgumentParser._hint("--epochs", ["--total-steps", "--preprocessing"])
        "; did you mean '--total-steps'?"
        >>> ArgumentParser._hint("--batch_size", ["--batch-size", "--seed"])
        "; did you mean '--batch-size'?"
        >>> ArgumentParser._hint("--backend", ["--seed"]).split(";")[0]
        ': the Keras backend is not a flag'
        """
        dashed = name.replace("_", "-")
        if dashed in BACKEND_FLAGS and dashed not in flags:
            return BACKEND_HINT
        if dashed in flags:
            return f"; did you mean {dashed!r}?"
        if OTHER_NAMES.get(dashed) in flags:
            return f"; did you mean {OTHER_NAMES[dashed]!r}?"
        match = difflib.get_close_matches(name, flags, n=1, cutoff=0.6)
        return f"; did you mean {match[0]!r}?" if match else f" (valid: {', '.join(flags)})"

    def parse_known_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(args, namespace)
        # A sub-command's parser runs here on its own namespace, which its
        # parent then copies: its model is taken from the images first.
        if getattr(self, "_model_first", None) is not None:
            self._take_model(namespace)
        return namespace, extras

    def model_then_images(self, dest, model_help):
        """Positionals `MODEL IMAGE...`, with `--preset MODEL` the model's other way in.

        The model comes first, as `keras-vit classify MODEL IMAGE...` takes
        it, or as `--preset`, and then every positional is an image. The
        parsed namespace holds the model in `dest` and the images in
        `images`.

        Example:

        >>> parser = ArgumentParser(prog="keras-vit detect")
        >>> parser.model_then_images("preset", "the detector")
        >>> args = parser.parse_args(["owlv2", "cat.jpg", "dog.jpg"])
        >>> args.preset, args.images
        ('owlv2', ['cat.jpg', 'dog.jpg'])
        >>> parser.parse_args(["cat.jpg", "--preset", "owlv2"]).images
        ['cat.jpg']
        """
        self.add_argument("_first", metavar="MODEL", help=f"{model_help} (or --preset MODEL: then image files only)")
        self.add_argument("images", nargs="*", metavar="IMAGE",
                          help="image files, folders (a folder: the images in it) or http(s) URLs")
        self.add_argument("--preset", dest=dest, default=None, metavar="MODEL", help=f"{model_help}, as an option")
        self._model_first = dest

    def _take_model(self, namespace):
        dest = self._model_first
        images = list(namespace.images)
        first = vars(namespace).pop("_first")
        if getattr(namespace, dest) is None:
            if not images:
                self.error(
                    f"give the model and then the images ({self.prog} MODEL IMAGE ...), "
                    f"or the model as --preset MODEL; got only {first!r}"
                )
            setattr(namespace, dest, first)
        else:
            images.insert(0, first)
        namespace.images = images

    def error(self, message):
        unknown = self.unknown_flag(getattr(self, "_argv", ()))
        super().error(unknown or message)


def physical_cores():
    """Physical cores this process may run on.

    The CPUs of its affinity mask, counted once per core (hyper-threads
    share one), and no more than the container's CPU quota
    (`/sys/fs/cgroup/cpu.max`) allows.

    Returns:
        int, at least 1.
    """
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        path = f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
        try:
            with open(path) as handle:
                cores.add(handle.read().strip())
        except OSError:
            cores.add(str(cpu))
    count = len(cores)
    try:
        with open("/sys/fs/cgroup/cpu.max") as handle:
            quota, period = handle.read().split()[:2]
        if quota != "max":
            count = min(count, max(1, int(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, count)


def configure_threads(threads=None):
    """Sets the threads torch's CPU operations use; call it before importing Keras.

    Args:
        threads: None (default: `OMP_NUM_THREADS` when set, else
            `physical_cores()`) or an int.

    Returns:
        `(threads, reason)`: the count and where it came from ("--threads",
        "OMP_NUM_THREADS" or "physical cores").
    """
    if threads is not None:
        if threads < 1:
            raise ValueError(f"--threads must be at least 1. Received: {threads}")
        count, reason = threads, "--threads"
    elif os.environ.get("OMP_NUM_THREADS", "").isdigit():
        count, reason = int(os.environ["OMP_NUM_THREADS"]), "OMP_NUM_THREADS"
    else:
        count, reason = physical_cores(), "physical cores"
    os.environ["OMP_NUM_THREADS"] = str(count)
    # Idle OpenMP threads sleep instead of spinning on cores other work needs.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    torch = sys.modules.get("torch")
    if torch is not None:  # imported already: OMP_NUM_THREADS came too late
        torch.set_num_threads(count)
    return count, reason


@contextlib.contextmanager
def _stderr_muted():
    """File descriptor 2 sent to /dev/null: C++ libraries write there directly."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def quiet_imports(*modules, lean_keras=False):
    """Imports `modules` (those installed) with their start-up banners muted.

    TensorFlow's C++ log threshold is raised to errors that stop the program
    (`TF_CPP_MIN_LOG_LEVEL=3`, unless set): its CPU-only start-up reports
    (oneDNN, missing CUDA drivers, XLA services) are notices, and its
    failures reach Python as exceptions. A module that fails to import is
    imported again unmuted, so that its error shows.

    Args:
        *modules: module names, e.g. "tensorflow", "keras_vit".
        lean_keras: "keras" imported by `lean_keras_import`.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    for name in modules:
        if name in sys.modules or importlib.util.find_spec(name) is None:
            continue
        load = lean_keras_import if lean_keras and name == "keras" else functools.partial(importlib.import_module, name)
        try:
            with _stderr_muted():
                load()
        except Exception:  # noqa: BLE001 (shown by the unmuted import below)
            load()


# Libraries Keras imports at its own import when they are installed, for
# features no keras-vit command uses: scikit-learn for its estimator
# wrappers, matplotlib for `plot_image_gallery`, jax for its Orbax
# checkpoint callback (on every backend, keras 3.15). Under torch they are
# about 200 MiB and 2 s of CPU of `import keras`'s 530 MiB and 6 s
# (docs/benchmarks.md, the startup comparison).
KERAS_EXTRAS = ("sklearn", "matplotlib", "jax")


def keras_backend_name():
    """The backend Keras will load: `KERAS_BACKEND`, else keras.json's, else None (unknown)."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME", os.path.join(os.path.expanduser("~"), ".keras"))
    try:
        with open(os.path.join(home, "keras.json")) as file:
            return json.load(file).get("backend", "tensorflow")
    except FileNotFoundError:
        return "tensorflow"  # Keras' default where no keras.json exists
    except (OSError, ValueError):
        return None


def lean_keras_import():
    """Imports Keras with its optional extras (`KERAS_EXTRAS`) left out.

    While Keras imports, each extra not yet loaded reads as not installed
    (its `sys.modules` entry is None), which Keras' optional imports pass
    over; then the entries are removed, so that code asking for one later
    (`keras-vit inspect`'s matplotlib) imports it as usual. jax stays where
    it is, or may be, the backend. A process that has imported Keras
    already is left as it is.

    Example:

    >>> lean_keras_import()
    >>> "keras" in sys.modules
    True
    """
    if "keras" in sys.modules:
        return
    backend = keras_backend_name()
    kept = [name for name in KERAS_EXTRAS
            if name not in sys.modules and (name != "jax" or backend not in (None, "jax"))]
    for name in kept:
        sys.modules[name] = None
    try:
        importlib.import_module("keras")
    finally:
        for name in kept:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


# Copies of keras_vit's lists (the modules that hold them import Keras),
# checked against them by tests/test_commands.py.
GELU_FLAVOURS = ("tanh", "erf")  # keras_vit.architectures.GELU_FLAVOURS
NORMALIZATIONS = ("inception", "imagenet")  # keras_vit.preprocessing.MODES
EXPORT_FORMATS = ("tf_saved_model", "onnx", "openvino", "litert", "torch")  # keras_vit.export.EXPORT_FORMATS
PRESET_FORMATS = ("keras_vit", "transformers", "timm")  # keras_vit.presets.PRESET_FORMATS
QUANTIZATIONS = ("int8", "float8")
OPENVINO_PRECISIONS = ("f32", "bf16", "f16")  # keras_vit.export.serving.OPENVINO_PRECISIONS


def parse_size(text):
    """`N` or `HxW` (also `H,W`) as an image size: an int or a pair of ints."""
    parts = text.lower().replace("x", ",").split(",")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or HxW, got {text!r}") from None
    if len(values) not in (1, 2) or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected N or HxW, got {text!r}")
    return values[0] if len(values) == 1 else values


def bounded(kind, minimum=None, maximum=None, above=None):
    """An argparse `type`: a number of `kind` (int or float, finite) within
    `[minimum, maximum]` (and `> above`), else a usage error that says so.

    Example:

    >>> FRACTION("0.5"), COUNT("3")
    (0.5, 3)
    >>> FRACTION("1.5")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be a number in [0, 1]; got '1.5'
    """
    what = "an int" if kind is int else "a number"
    if above is not None:
        allowed = f"{what} in ({above:g}, {maximum:g}]" if maximum is not None else f"{what} > {above:g}"
    elif minimum is not None and maximum is not None:
        allowed = f"{what} in [{minimum:g}, {maximum:g}]"
    elif minimum is not None:
        allowed = f"{what} >= {minimum:g}"
    else:
        allowed = what if kind is int else "a finite number"

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            value = None
        ok = (value is not None and math.isfinite(value) and (minimum is None or value >= minimum)
              and (maximum is None or value <= maximum) and (above is None or value > above))
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {allowed}; got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


COUNT = bounded(int, minimum=1)  # batch sizes, top-k, samples, threads
FRACTION = bounded(float, minimum=0, maximum=1)  # scores, IoUs, agreement
NON_NEGATIVE = bounded(float, minimum=0)  # tolerances, pixel coordinates
FINITE = bounded(float)
