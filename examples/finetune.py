"""Fine-tunes a keras_vit model on an image-classification dataset with model.fit.

Any variant (`--model ViTB16`), any weights (a registered name, a checkpoint
path, or none), any dataset (scikit-learn digits, a TensorFlow Datasets name,
a folder with one subfolder per class), any distribution (one flag) and any
Keras backend (`KERAS_BACKEND=jax|tensorflow|torch`).

With no arguments it runs offline in a few minutes on a CPU: a small ViT
learns scikit-learn's 8x8 handwritten digits (upscaled to 32x32) from
scratch and prints the held-out accuracy.

Examples:

    python examples/finetune.py                       # offline digits demo
    python examples/finetune.py --smoke               # seconds, for tests
    python examples/finetune.py --data my_photos --model ViTTi16 \\
        --weights augreg-i21k --recipe cpu             # your own photos, on a CPU
    python examples/finetune.py --data my_photos --model ViTB16 \\
        --weights augreg-i21k --output my_vit          # the paper's recipe (GPU, TPU)
    python examples/finetune.py --model ViTB16 --weights imagenet21k \\
        --dataset cifar10 --total-steps 10000 --lr 0.01 \\
        --device-batch-size 128 --distribution auto --run-dir runs/b16_c10

Recipes (`--recipe`; each flag given replaces its value):

- `paper` (the default with `--weights`): the paper's fine-tuning recipe
  (arXiv:2010.11929 §4.1, App. B.1.1): SGD momentum 0.9, global batch 512,
  500 updates at 384 px, warm-up then cosine decay, gradient clipping at
  norm 1, no weight decay. For a GPU or TPU.
- `cpu`: the same optimizer sized for a CPU: 100 updates of batch 32 at
  224 px. With ViT-Ti/16 on a few hundred photos it takes minutes.
- without `--weights` the model trains from scratch with the pre-training
  recipe (AdamW with weight decay, arXiv:2010.11929 Table 3).

`--total-steps N` makes exactly N parameter updates: the run is cut into
evaluation intervals of `--eval-every` updates, the last one shorter. The
warm-up is the recipe's, at most a fifth of the run. The banner prints the
schedule.

With `--data FOLDER` (one sub-folder of images per class, the layout of
`keras.utils.image_dataset_from_directory`) every image is decoded once
before training (one that does not decode is named; `--skip-unreadable`
leaves such files out), a `--validation-split` of the images is held out
(fixed by `--seed`), and the model starts from `--weights` or `--preset`
with that checkpoint's own GELU and input scaling: a file that does not
record them (a bare `.npz`, a `.weights.h5`) needs `--gelu` and
`--preprocessing`.

The run's model is written as keras_vit presets (configuration, weights
without optimizer state, class names, preprocessing; the head predicts
probabilities): `--output` (default `<run-dir>/preset`) at the end and
`<run-dir>/best` at the best evaluation. `keras_vit.from_preset(path)`,
`keras_vit.classify(path, images)` and `keras-vit classify path IMAGE...`
reload them.

On the torch backend, torch's CPU threads are the physical cores the
process may use (`--threads` or `OMP_NUM_THREADS` to change; on a machine
shared with other jobs, fewer run faster).

Several processes (one per host, or N on this machine with
tools/launch_local.py): every process runs the same command with its place,
from flags or the environment (keras_vit.training.multiprocess):

    python examples/finetune.py ... --coordinator 10.0.0.1:1234 \\
        --num-processes 2 --process-id 0 --distribution data   # host 0
    python tools/launch_local.py -n 2 -- python examples/finetune.py --smoke

A run killed at any point resumes from its last completed evaluation
interval ("epoch") when started again with the same `--run-dir`.
"""

import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools.front_end import (  # noqa: E402  (standard library only: --help answers at once)
    THREADS_HELP,
    ArgumentParser,
    configure_threads,
    quiet_imports,
)

# A small ViT for the offline demo: 4 layers of width 64 over a 2x2 grid of
# 16 px patches (each a 4x4 quadrant of the 8x8 digit upscaled to 32 px).
# On two CPU cores it learns faster and generalises better from 1 438 images
# than finer patches or a ViT-Ti width (measured: 0.96 vs 0.88-0.94).
DEMO_MODEL = dict(patch_size=16, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=256)
SMOKE_MODEL = dict(patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32)

# Defaults where the flag is left unset: the offline demo, the smoke test,
# the fine-tuning recipes (pretrained weights) and training from scratch.
# Without --warmup-steps the warm-up is the table's, but at most a fifth of
# the run (`keras_vit.training.default_warmup_steps`).
DEMO = dict(image_size=32, batch_size=64, total_steps=500, warmup_steps=50,
            eval_every=100, lr=3e-3, weight_decay=0.05, area_min=0.6, flip=False)
SMOKE = dict(image_size=16, batch_size=32, total_steps=4, warmup_steps=1,
             eval_every=2, lr=1e-3, weight_decay=0.0, area_min=0.6, flip=False)
RECIPES = {
    "paper": dict(image_size=384, batch_size=512, total_steps=500, warmup_steps=500,
                  eval_every=100, lr=0.03, weight_decay=0.0, area_min=0.05, flip=True),
    "cpu": dict(image_size=224, batch_size=32, total_steps=100, warmup_steps=500,
                eval_every=25, lr=0.01, weight_decay=0.0, area_min=0.25, flip=True),
}
SCRATCH = dict(image_size=224, batch_size=512, total_steps=10_000, warmup_steps=1_000,
               eval_every=1_000, lr=1e-3, weight_decay=0.03, area_min=0.05, flip=True)
# Copies of keras_vit's lists, so that the parser imports nothing heavy
# (tests/test_training_example.py checks them).
DISTRIBUTIONS = ("none", "auto", "data_parallel", "mirrored", "multi_worker", "model_parallel", "fsdp",
                 "tpu", "data", "model")  # keras_vit.training.distribute.NAMES
CHECKPOINT_SUFFIXES = (".npz", ".safetensors", ".pth", ".pt", ".bin", ".h5", ".keras")
# What a checkpoint file of each kind leaves open about its numerics
# (keras_vit.presets.resolver.numerics_unrecorded), known from its name alone.
UNRECORDED_BY_SUFFIX = {
    ".npz": ("mlp_activation", "preprocessing"),
    ".h5": ("mlp_activation", "preprocessing"),
    ".safetensors": ("preprocessing",),
    ".pth": ("preprocessing",),
    ".pt": ("preprocessing",),
    ".bin": ("preprocessing",),
}


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default only when it is a value (unset flags explain theirs)."""

    def _get_help_string(self, action):
        if action.default in (None, False):
            return action.help
        return super()._get_help_string(action)


def build_parser():
    p = ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Unset flags take the defaults of the offline demo (--dataset "
        "digits), of --recipe (with --weights or --preset) or of training from scratch.",
        formatter_class=_HelpFormatter,
    )
    a = p.add_argument
    a("--model", default=None, help="keras_vit constructor name (ViTTi16, ViTB16, ViTL16, R50ViTB16, ...); default: a small demo ViT")
    a("--weights", default=None, help="registered weights name (e.g. imagenet21k, augreg-i21k) or checkpoint path; default: none (random init)")
    a("--dataset", default="digits", help="'digits' (scikit-learn, offline), a tfds name ('cifar10', 'tfds:oxford_iiit_pet', 'imagenet2012') or an image folder (one subfolder per class, or train/ and test/ subfolders)")
    a("--train-split", default="train", help="training split (tfds split string or folder subset)")
    a("--eval-split", default="test", help="held-out split for evaluation (e.g. 'validation' for imagenet2012, 'train[98%%:]' for a held-out sub-split)")
    a("--tfds-data-dir", default=None, help="tfds data_dir")
    a("--manual-dir", default=None, help="tfds manual_dir with manually downloaded files (imagenet2012)")
    a("--download", action="store_true", help="let tfds download and prepare the dataset (needs internet)")
    a("--recipe", default=None, choices=tuple(RECIPES), help="fine-tuning sizes: paper (default: batch 512, 500 updates, 384 px; GPU/TPU) or cpu (batch 32, 100 updates, 224 px)")
    a("--image-size", type=int, default=None, help="training/eval resolution (paper recipe 384, cpu recipe 224)")
    a("--preprocessing", default="auto", choices=("auto", "inception", "imagenet"), help="input value range; auto: what the weights record ([-1, 1] for Google checkpoints); a file that records none needs it")
    a("--eval-crop", type=float, default=None, help="central-crop fraction at evaluation; default: resize the whole image (official)")
    a("--area-min", type=float, default=None, help="smallest area fraction of the inception random crop (1 disables it)")
    a("--flip", action=argparse.BooleanOptionalAction, default=None, help="random horizontal flips")
    a("--batch-size", type=int, default=None, help="global batch size per parameter update (paper: 512)")
    a("--device-batch-size", type=int, default=None, help="examples per forward pass over all replicas; gradients of batch/device-batch micro-batches are accumulated")
    a("--total-steps", type=int, default=None, help="parameter updates of the run, exactly (paper: 500 Pets/Flowers, 10k CIFAR, 20k ImageNet)")
    a("--warmup-steps", type=int, default=None, help="linear warm-up updates; default: the recipe's, at most a fifth of the run")
    a("--eval-every", type=int, default=None, help="updates per 'epoch': evaluation, backup and log interval (the last one ends with the run)")
    a("--optimizer", default="auto", choices=("auto", "sgd", "adamw"), help="sgd: fine-tuning recipe; adamw: pre-training recipe; auto: sgd with --weights, else adamw")
    a("--lr", type=float, default=None, help="peak learning rate, for the global --batch-size (scale linearly when changing it)")
    a("--decay", default="cosine", choices=("cosine", "linear", "constant"), help="learning-rate decay after warm-up")
    a("--weight-decay", type=float, default=None, help="AdamW decoupled weight decay (ignored by sgd, which uses none)")
    a("--clipnorm", type=float, default=1.0, help="global gradient-norm clipping (0 disables)")
    a("--label-smoothing", type=float, default=0.0, help="label smoothing")
    a("--lora-rank", type=int, default=None, help="train only LoRA adapters of this rank (and the head), the rest frozen (model.enable_lora)")
    a("--lora-targets", default="query,value", help="comma-separated projections LoRA adapts: query, key, value, out, Dense_0, Dense_1")
    a("--layer-decay", type=float, default=None, help="layer-wise learning-rate decay (BEiT/timm layer_decay, e.g. 0.75): block i learns at lr * decay ** (layers - i)")
    a("--dropout", type=float, default=0.0, help="dropout rate of the model (paper: 0.1 for ImageNet(-21k) pre-training)")
    a("--dtype-policy", default=None, help="Keras dtype policy, e.g. mixed_bfloat16 on TPU/GPU")
    a("--distribution", default="none", choices=DISTRIBUTIONS, help="how to use several devices (see keras_vit.training.distribute)")
    a("--tpu", default=None, help="TPU for --distribution tpu on tensorflow: 'local' (Cloud TPU VM), a TPU name or grpc://host:port; default: auto-detect (Colab, TPU VM, TPU_NAME)")
    a("--model-parallel", type=int, default=None,
      help="devices per model replica with --distribution model_parallel (default 2) or fsdp (default 1) (jax)")
    a("--run-dir", default=None, help="folder for backups, presets (preset/, best/), CSV and TensorBoard logs; default runs/<dataset>_<model>")
    a("--threads", type=int, default=None, help=THREADS_HELP)
    a("--seed", type=int, default=0, help="random seed")
    a("--verbose", type=int, default=1, choices=(0, 1, 2), help="fit verbosity: 1 progress bar, 2 one line per epoch")
    a("--smoke", action="store_true", help="tiny model and 4 updates at 16 px, for tests (seconds): on digits (from --weights when given), or on --data (then a random one: --model, --weights and --preset are ignored)")
    add_folder_arguments(p)
    add_process_arguments(p)
    return p


def add_folder_arguments(parser):
    g = parser.add_argument_group("your own images (--data)")
    g.add_argument("--data", default=None, help="image folder, one sub-folder per class (as keras.utils.image_dataset_from_directory); replaces --dataset, holding out --validation-split of the images")
    g.add_argument("--validation-split", type=float, default=0.2, help="fraction of the --data images held out for the accuracy, a fixed random choice given --seed")
    g.add_argument("--skip-unreadable", action="store_true", help="leave out --data images that do not decode (listed in a warning) instead of stopping")
    g.add_argument("--preset", default=None, help="start from a preset instead of --model/--weights: a keras_vit, transformers, timm or keras-hub directory, or hf://org/name")
    g.add_argument("--gelu", default="auto", choices=("auto", "tanh", "erf"), help="GELU flavour; auto: the checkpoint's (registry record, preset, .keras file, erf for timm files); a .npz or .weights.h5 file needs it (Google's .npz: tanh, DeiT's: erf)")
    g.add_argument("--output", default=None, help="keras_vit preset directory to write (config, weights, class names, preprocessing); default: <run-dir>/preset")


def add_process_arguments(parser):
    """Flags placing this process among several (unset: the environment)."""
    g = parser.add_argument_group(
        "several processes",
        "one process per host; unset flags come from KERAS_VIT_COORDINATOR/"
        "_NUM_PROCESSES/_PROCESS_ID (tools/launch_local.py), JAX_* or TF_CONFIG, "
        "or are detected on TPU pod slices",
    )
    a = g.add_argument
    a("--coordinator", default=None, help="HOST:PORT of process 0, the same in every process")
    a("--num-processes", type=int, default=None, help="processes in the job")
    a("--process-id", type=int, default=None, help="this process's index, 0 to --num-processes - 1")
    a("--bind-address", default=None, help="jax: where process 0's coordinator listens (default [::]:PORT)")
    a("--init-timeout", type=int, default=120, help="seconds to wait for every process to join")
    a("--heartbeat-timeout", type=int, default=60, help="jax: seconds before a silent process counts as lost")


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def check_paths(args):
    """The folders and files the flags name exist: checked before anything loads."""
    if args.data is not None and not os.path.isdir(args.data):
        what = "is a file, not a folder" if os.path.exists(args.data) else "does not exist"
        raise SystemExit(
            f"--data {args.data!r} {what} (resolved to {os.path.abspath(args.data)!r}): give a "
            "folder with one sub-folder of images per class."
        )
    weights = args.weights
    if weights and not args.smoke_data and (os.sep in weights or weights.lower().endswith(CHECKPOINT_SUFFIXES)):
        if not os.path.isfile(weights):
            raise SystemExit(f"--weights {weights!r}: no such file (resolved to {os.path.abspath(weights)!r}).")
    if args.preset and not args.smoke_data and not args.preset.startswith(("hf://", "kaggle://")):
        if not os.path.isdir(args.preset):
            raise SystemExit(f"--preset {args.preset!r}: no such folder (resolved to {os.path.abspath(args.preset)!r}).")


def check_numerics(args, unrecorded=None):
    """Refuses a checkpoint file that does not record its GELU or input scaling
    unless --gelu and --preprocessing say them.

    `unrecorded`: what the file leaves open; default: read by
    `keras_vit.presets.resolver.numerics_unrecorded` (which opens a `.keras` file).
    """
    if not args.weights or not os.path.isfile(args.weights):
        return
    if unrecorded is None:
        from keras_vit.presets.resolver import numerics_unrecorded

        unrecorded = numerics_unrecorded(args.weights)
    flags = {"mlp_activation": ("--gelu", args.gelu), "preprocessing": ("--preprocessing", args.preprocessing)}
    missing = [flags[what][0] for what in unrecorded if flags[what][1] == "auto"]
    if missing:
        raise SystemExit(
            f"--weights {args.weights!r} does not record the numerics it was trained with: give "
            f"{' and '.join(missing)} (Google's .npz: --gelu tanh --preprocessing inception; "
            "DeiT's .npz: --gelu erf --preprocessing imagenet; timm files: --preprocessing as "
            "the model card says). A registered name, a preset or a .keras file records them."
        )


def check_numerics_by_name(args):
    """`check_numerics` for the files whose name says what they record, before
    the libraries load (a `.keras` file is read after)."""
    name = (args.weights or "").lower()
    for suffix, unrecorded in UNRECORDED_BY_SUFFIX.items():
        if name.endswith(suffix) and not args.smoke_data:
            return check_numerics(args, unrecorded)
    return None


def _table(args, pretrained):
    """The defaults table for the run, and the recipe's name."""
    if args.smoke:
        return SMOKE, "smoke"
    if args.recipe is not None:
        if not pretrained:
            raise SystemExit(f"--recipe {args.recipe} fine-tunes a checkpoint: give --weights or --preset.")
        return RECIPES[args.recipe], args.recipe
    if args.dataset == "digits" and args.model is None:
        return DEMO, "demo"
    return (RECIPES["paper"], "paper") if pretrained else (SCRATCH, "scratch")


def resolve(args):
    """Fills unset flags from the matching defaults table and checks the inputs."""
    from keras_vit.training import default_warmup_steps

    args.smoke_data = args.smoke and args.data is not None
    check_paths(args)
    if args.data is not None:
        args.dataset = args.data
    pretrained = bool(args.weights or args.preset)
    if args.smoke_data:
        # The README's folder command, checked offline: no checkpoint.
        args.weights, args.preset, pretrained = None, None, False
    table, args.recipe = _table(args, pretrained)
    if args.smoke:
        args.model = None
        if args.data is None:
            args.dataset = "digits"
    for key, value in table.items():
        if getattr(args, key) is None and key != "warmup_steps":
            setattr(args, key, value)
    if args.warmup_steps is None:
        args.warmup_steps = default_warmup_steps(args.total_steps, table["warmup_steps"])
    if args.warmup_steps > args.total_steps:
        raise SystemExit(
            f"--warmup-steps {args.warmup_steps} is longer than the run (--total-steps {args.total_steps})."
        )
    if args.optimizer == "auto":
        args.optimizer = "sgd" if pretrained else "adamw"
    if args.model is None:
        args.model = "smoke" if args.smoke else "preset" if args.preset else "demo"
    if args.run_dir is None:
        name = os.path.basename(os.path.normpath(args.dataset)).replace("tfds:", "")
        args.run_dir = os.path.join("runs", f"{name}_{args.model}")
    if args.output is None:
        args.output = os.path.join(args.run_dir, "preset")
    check_numerics(args)
    if args.preprocessing == "auto":
        args.preprocessing = checkpoint_preprocessing(args)
    return args


def load_data(args, load):
    """`(train, held-out)` sources: the --data folder split by --validation-split, or --dataset."""
    from keras_vit.training import datasets

    if args.data is None:
        return (datasets.load_source(args.dataset, args.train_split, **load),
                datasets.load_source(args.dataset, args.eval_split, **load))
    args.eval_split = f"{args.validation_split:.0%} held out"
    try:
        return datasets.image_folder_sources(
            args.data, args.validation_split, seed=args.seed,
            unreadable="skip" if args.skip_unreadable else "error",
        )
    except ValueError as error:
        raise SystemExit(f"--data: {error}".replace("unreadable='skip'; examples/finetune.py: ", "")) from None


def checkpoint_preprocessing(args):
    """The input scaling of the starting checkpoint: "inception" or "imagenet".

    A preset's or a `.keras` file's own record, the registry's for a named
    weight; "inception" (the Google checkpoints') for a model from scratch.
    """
    from keras_vit.weights.describe import describe_weights
    from keras_vit.weights.record import Preprocessing

    record = None
    if args.preset:
        from keras_vit.presets import describe_preset

        record = describe_preset(args.preset).arguments.get("preprocessing")
    elif args.weights:
        try:
            record = describe_weights(args.weights, model_config(args)).preprocessing
        except (ValueError, OSError):
            record = None  # the model build reports a bad --weights
    mode = Preprocessing.from_config(record).mode if record else None
    return mode or "inception"


def preprocessing_record(args):
    """What the evaluation pipeline does: a bilinear resize (and optional central crop)."""
    from keras_vit.weights.record import Preprocessing

    return Preprocessing.from_mode(
        args.preprocessing, image_size=args.image_size, crop_fraction=args.eval_crop,
        interpolation="bilinear",
    )


def join_processes(args):
    """Joins the other processes; several make --distribution span them all."""
    from keras_vit import training

    cluster = training.multiprocess.initialize(
        args.coordinator, args.num_processes, args.process_id, bind_address=args.bind_address,
        timeout=args.init_timeout, heartbeat_timeout=args.heartbeat_timeout,
    )
    if cluster.num_processes > 1 and cluster.backend == "tensorflow":
        if args.distribution in ("none", "auto", "data", "data_parallel", "mirrored"):
            args.distribution = "multi_worker"
    elif cluster.num_processes > 1 and args.distribution in ("none", "auto"):
        args.distribution = "data_parallel"
    return cluster


def model_config(args):
    from keras_vit.architectures import get_variant

    if args.preset:
        from keras_vit.presets import describe_preset

        return describe_preset(args.preset).arguments
    if args.model in ("demo", "smoke"):
        return DEMO_MODEL if args.model == "demo" else SMOKE_MODEL
    try:
        return dict(get_variant(args.model).config)
    except ValueError:
        raise SystemExit(f"--model {args.model!r} is not a keras_vit constructor (e.g. ViTB16).") from None


def build_model(args, classes):
    """The model to fine-tune, from `keras_vit.load_model` as every command builds one."""
    import keras_vit
    from keras_vit.architectures import GELU_FLAVOURS

    common = dict(
        image_size=args.image_size, classes=classes, classifier_activation=None,
        dropout_rate=args.dropout,
    )
    if args.preset:
        if args.gelu != "auto":
            raise SystemExit("--gelu: a preset fixes its GELU; leave --gelu auto with --preset.")
        return keras_vit.load_model(args.preset, **common)
    if args.gelu != "auto":
        common["mlp_activation"] = GELU_FLAVOURS[args.gelu]
    if args.model in ("demo", "smoke"):
        common.update(model_config(args), name=f"vit_{args.model}")
        return keras_vit.load_model("ViT", weights=args.weights, **common)
    return keras_vit.load_model(args.model, weights=args.weights, **common)


def compile_model(model, args):
    from keras_vit import training

    kwargs = dict(
        base_lr=args.lr, warmup_steps=args.warmup_steps, decay=args.decay,
        global_batch_size=args.batch_size, device_batch_size=args.device_batch_size,
        global_clipnorm=args.clipnorm or None,
    )
    targets = tuple(t.strip() for t in args.lora_targets.split(",") if t.strip())
    if args.optimizer == "sgd":
        return training.compile_for_finetuning(
            model, args.total_steps, label_smoothing=args.label_smoothing, lora_rank=args.lora_rank,
            lora_targets=targets, layer_decay=args.layer_decay, **kwargs
        )
    if args.lora_rank is not None:
        model.enable_lora(args.lora_rank, targets=targets, train_head=True)
    return training.compile_for_pretraining(
        model, args.total_steps, label_smoothing=args.label_smoothing,
        weight_decay=args.weight_decay, layer_decay=args.layer_decay, **kwargs,
    )


def _points(stop):
    """The updates after which the held-out set is evaluated, as text."""
    ends = [min((epoch + 1) * stop.updates_per_epoch, stop.total_updates) for epoch in range(stop.epochs)]
    shown = ends if len(ends) <= 6 else ends[:3] + ["..."] + ends[-2:]
    return ", ".join(str(end) for end in shown)


def schedule_text(args, stop, accumulation):
    """One line saying what the run does: updates, warm-up, decay, evaluations."""
    decay = {"cosine": "cosine decay to 0", "linear": "linear decay",
             "constant": "constant rate"}[args.decay]
    return (
        f"schedule: {args.total_steps} updates of batch {args.batch_size}"
        + (f" ({accumulation} micro-batches each)" if accumulation > 1 else "")
        + f", {args.optimizer} at peak lr {args.lr:g}, warm-up {args.warmup_steps} updates, "
        f"then {decay} by update {args.total_steps}; held-out evaluation after updates {_points(stop)}"
    )


def banner(args, dist, classes, threads):
    import keras

    lines = [
        f"backend={keras.backend.backend()} distribution={dist.name} replicas={dist.num_replicas} "
        f"model={args.model} weights={args.weights or args.preset} recipe={args.recipe} "
        f"dataset={args.dataset} classes={classes} image_size={args.image_size} "
        f"preprocessing={args.preprocessing} run_dir={args.run_dir}"
    ]
    if keras.backend.backend() == "torch":
        lines.append(f"torch threads: {threads[0]} ({threads[1]}; --threads N or OMP_NUM_THREADS=N to change)")
    return "\n".join(lines)


def pipelines(args, train_source, eval_source, step_batch):
    from keras_vit.training import data

    small = (train_source.num_examples or 1 << 30) <= 50_000 and args.image_size <= 64
    train_ds = data.train_pipeline(
        train_source.dataset, args.image_size, step_batch, mode=args.preprocessing,
        area_range=(args.area_min, 1.0), flip=args.flip, cache=small, seed=args.seed,
    )
    eval_source_ds = eval_source.dataset.take(64) if args.smoke else eval_source.dataset
    eval_ds = data.eval_pipeline(
        eval_source_ds, args.image_size, step_batch, mode=args.preprocessing,
        crop_fraction=args.eval_crop, cache=small,
    )
    return train_ds, eval_ds


def distribution(args, config):
    from keras_vit import training

    dist = training.get_distribution(
        args.distribution, tpu=args.tpu, model_parallel=args.model_parallel,
        num_heads=config["num_heads"], mlp_dim=config["mlp_dim"],
    )
    accumulation = training.accumulation_steps(args.batch_size, args.device_batch_size)
    step_batch = args.batch_size // accumulation
    if step_batch % dist.num_replicas:
        raise SystemExit(
            f"The per-step batch ({step_batch}) must be a multiple of the "
            f"{dist.num_replicas} replicas of {dist.name!r}."
        )
    return dist, accumulation, step_batch


def fit(args, dist, accumulation, datasets, class_names):
    """Builds, compiles and trains the model; writes its presets; returns it."""
    from keras_vit import training

    train_ds, eval_ds = datasets
    stop = training.StopAfterUpdates(args.total_steps, args.eval_every, accumulation)
    preset = dict(class_names=list(class_names), preprocessing=preprocessing_record(args))
    callbacks = training.run_callbacks(args.run_dir, save_best=False, save_final=False) + [
        stop,
        training.SavePreset(os.path.join(args.run_dir, "best"), monitor="val_accuracy", **preset),
        training.SavePreset(args.output, **preset),
    ]
    with dist.scope():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = build_model(args, len(class_names))
        for note in caught:  # e.g. the new head: said in one line, not as a code location
            print(f"note: {note.message}", flush=True)
        compile_model(model, args)
        # The "epochs" are evaluation intervals of `eval_every` updates.
        model.fit(
            train_ds, epochs=stop.epochs, steps_per_epoch=stop.steps_per_epoch,
            validation_data=eval_ds, shuffle=False,  # the pipeline shuffles
            callbacks=callbacks, verbose=args.verbose,
        )
        results = model.evaluate(eval_ds, return_dict=True, verbose=0)
    return model, results, stop


def main(argv=None):
    args = parse_args(argv)
    args.smoke_data = args.smoke and args.data is not None
    check_paths(args)  # before the libraries load: a typo answers at once
    check_numerics_by_name(args)
    threads = configure_threads(args.threads)
    quiet_imports("tensorflow", "keras_vit")
    import keras

    args = resolve(args)
    cluster = join_processes(args)
    keras.utils.set_random_seed(args.seed)
    if args.dtype_policy:
        keras.config.set_dtype_policy(args.dtype_policy)
    dist, accumulation, step_batch = distribution(args, model_config(args))
    load = dict(data_dir=args.tfds_data_dir, manual_dir=args.manual_dir, download=args.download)
    train_source, eval_source = load_data(args, load)
    datasets = pipelines(args, train_source, eval_source, step_batch)
    from keras_vit.training import StopAfterUpdates

    print(banner(args, dist, len(train_source.class_names), threads), flush=True)
    print(schedule_text(args, StopAfterUpdates(args.total_steps, args.eval_every), accumulation), flush=True)
    start = time.time()
    model, results, _ = fit(args, dist, accumulation, datasets, train_source.class_names)
    seconds = time.time() - start
    results.update(seconds=round(seconds, 1), updates=int(keras.ops.convert_to_numpy(model.optimizer.iterations)))
    if cluster.process_id == 0:
        with open(os.path.join(args.run_dir, "results.json"), "w") as f:
            json.dump({**results, "args": vars(args)}, f, indent=1, default=str)
    held = min(64, eval_source.num_examples or 64) if args.smoke else eval_source.num_examples or "?"
    print(
        f"held-out accuracy: {results['accuracy']:.4f} ({held} images, split {args.eval_split!r}); "
        f"{results['updates']} updates in {seconds:.0f}s",
        flush=True,
    )
    if cluster.process_id == 0:
        print(
            f"preset: {args.output} (best evaluation: {os.path.join(args.run_dir, 'best')}); reload it "
            f"with keras_vit.from_preset({args.output!r}), or classify images with "
            f"keras_vit.classify({args.output!r}, images) or `keras-vit classify {args.output} IMAGE...`",
            flush=True,
        )
    return results


if __name__ == "__main__":
    main()
