"""Self-supervised pre-training of a keras_vit encoder by masked patch prediction.

The paper's §4.6 objective (arXiv:2010.11929, App. B.1.2): half of the patch
embeddings of every image are corrupted (80 % replaced by a learnable [mask]
embedding, 10 % by another patch, 10 % kept) and the model predicts the
3-bit mean colour of every corrupted patch. No labels are used. The encoder
weights it writes (`<run-dir>/encoder.weights.h5`) are the starting point of
`examples/finetune.py --weights`.

Any variant (`--model ViTB16`), any dataset `finetune.py` accepts (labels are
ignored), any distribution and any Keras backend
(`KERAS_BACKEND=jax|tensorflow|torch`).

With no arguments it runs offline on a CPU: the demo ViT of `finetune.py`
learns to fill in scikit-learn's digits (upscaled to 64 px, a 4x4 grid of
16 px patches) and prints the held-out masked-prediction loss.

Examples:

    python examples/pretrain_masked_patches.py                # offline digits demo
    python examples/pretrain_masked_patches.py --smoke        # seconds, for tests
    python examples/finetune.py --weights runs/digits_demo_mpp/encoder.weights.h5 \\
        --image-size 64 --optimizer adamw                      # then fine-tune
    python examples/pretrain_masked_patches.py --model ViTB16 --dataset imagenet2012 \\
        --manual-dir ~/imagenet --total-steps 100000 --distribution auto

Defaults off the demo follow the paper's recipe: Adam, base learning rate
2e-4 for batch 4096, 10k warm-up steps, cosine decay (1M steps on JFT; set
`--total-steps`), 224 px.

A run killed at any point resumes from its last completed evaluation
interval ("epoch") when started again with the same `--run-dir`.
"""

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools.front_end import THREADS_HELP, ArgumentParser, configure_threads, quiet_imports  # noqa: E402

# TensorFlow's C++ start-up notices (oneDNN, CUDA) kept out of the terminal.
quiet_imports("tensorflow", "keras_vit")

import keras  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit import pretraining, training  # noqa: E402
from keras_vit.architectures import get_variant  # noqa: E402
from keras_vit.training import data, datasets  # noqa: E402

# The encoders of examples/finetune.py, so that its --weights can load ours.
DEMO_MODEL = dict(patch_size=16, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=256)
SMOKE_MODEL = dict(patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32)

# Defaults where the flag is left unset: the offline demo (64 px digits, no
# augmentation: each 16 px patch is 2x2 pixels of the 8x8 digit), the smoke
# test and the paper's recipe (App. B.1.2).
DEMO = dict(image_size=64, batch_size=32, total_steps=1500, warmup_steps=150,
            eval_every=250, lr=1e-3, weight_decay=0.0, area_min=1.0, flip=False)
SMOKE = dict(image_size=32, batch_size=8, total_steps=4, warmup_steps=1,
             eval_every=2, lr=1e-3, weight_decay=0.0, area_min=1.0, flip=False)
PAPER = dict(image_size=224, batch_size=4096, total_steps=1_000_000, warmup_steps=10_000,
             eval_every=10_000, lr=2e-4, weight_decay=0.0, area_min=0.05, flip=True)


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
        "digits) or of the paper's masked patch prediction recipe.",
        formatter_class=_HelpFormatter,
    )
    a = p.add_argument
    a("--model", default=None, help="keras_vit constructor name (ViTTi16, ViTB16, R50ViTB16, ...); default: the demo ViT of finetune.py")
    a("--weights", default=None, help="start from these weights (registered name or checkpoint path); default: random init")
    a("--dataset", default="digits", help="'digits' (scikit-learn, offline), a tfds name ('cifar10', 'tfds:imagenet2012') or an image folder; labels are ignored")
    a("--train-split", default="train", help="pre-training split (tfds split string or folder subset)")
    a("--eval-split", default="test", help="held-out split for the masked-prediction loss")
    a("--tfds-data-dir", default=None, help="tfds data_dir")
    a("--manual-dir", default=None, help="tfds manual_dir with manually downloaded files (imagenet2012)")
    a("--download", action="store_true", help="let tfds download and prepare the dataset (needs internet)")
    a("--image-size", type=int, default=None, help="pre-training resolution (paper: 224)")
    a("--preprocessing", default="auto", choices=("auto", "inception", "imagenet"), help="the encoder's input scaling, applied inside the task; auto: the encoder's own (what --weights expect), else inception ([-1, 1])")
    a("--target", default="mean_color", choices=pretraining.TARGETS, help="mean_color: 3-bit mean colour (paper's best); downsized: 4x4 downsized patch; pixels: L2 on the normalised patch")
    a("--rate", type=float, default=0.5, help="fraction of the patches of every image that are corrupted")
    a("--mask-rate", type=float, default=0.8, help="of the corrupted patches: share replaced by the [mask] embedding")
    a("--replace-rate", type=float, default=0.1, help="of the corrupted patches: share replaced by another patch of the image")
    a("--bits", type=int, default=3, help="bits per colour channel of the colour targets")
    a("--area-min", type=float, default=None, help="smallest area fraction of the inception random crop (1 disables it)")
    a("--flip", action=argparse.BooleanOptionalAction, default=None, help="random horizontal flips")
    a("--batch-size", type=int, default=None, help="global batch size per parameter update (paper: 4096)")
    a("--device-batch-size", type=int, default=None, help="examples per forward pass over all replicas; gradients of batch/device-batch micro-batches are accumulated")
    a("--total-steps", type=int, default=None, help="parameter updates (paper: 1M on JFT)")
    a("--warmup-steps", type=int, default=None, help="linear warm-up updates (paper: 10k)")
    a("--eval-every", type=int, default=None, help="updates per 'epoch': evaluation, backup and log interval")
    a("--lr", type=float, default=None, help="peak learning rate for the global --batch-size (paper: 2e-4 at 4096)")
    a("--decay", default="cosine", choices=("cosine", "linear", "constant"), help="learning-rate decay after warm-up")
    a("--weight-decay", type=float, default=None, help="decoupled weight decay (paper: none)")
    a("--clipnorm", type=float, default=1.0, help="global gradient-norm clipping (0 disables)")
    a("--dropout", type=float, default=0.0, help="dropout rate of the encoder")
    a("--dtype-policy", default=None, help="Keras dtype policy, e.g. mixed_bfloat16 on TPU/GPU")
    a("--distribution", default="none", choices=training.distribute.NAMES, help="how to use several devices (see keras_vit.training.distribute)")
    a("--tpu", default=None, help="TPU for --distribution tpu on tensorflow: 'local', a TPU name or grpc://host:port")
    a("--model-parallel", type=int, default=2, help="devices per model replica with --distribution model_parallel (jax)")
    a("--run-dir", default=None, help="folder for backups, weights, CSV and TensorBoard logs; default runs/<dataset>_<model>_mpp")
    a("--seed", type=int, default=0, help="random seed (data order, initialisation, corruption)")
    a("--threads", type=int, default=None, help=THREADS_HELP)
    a("--verbose", type=int, default=1, choices=(0, 1, 2), help="fit verbosity: 1 progress bar, 2 one line per epoch")
    a("--smoke", action="store_true", help="tiny model and a few steps on digits, for tests (seconds)")
    return p


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def resolve(args):
    """Fills unset flags from the matching defaults table."""
    if args.smoke:
        table, args.dataset = SMOKE, "digits"
    elif args.dataset == "digits" and args.model is None:
        table = DEMO
    else:
        table = PAPER
    for key, value in table.items():
        if getattr(args, key) is None and key != "warmup_steps":
            setattr(args, key, value)
    if args.warmup_steps is None:  # the table's, at most a fifth of the run
        args.warmup_steps = training.default_warmup_steps(args.total_steps, table["warmup_steps"])
    if args.model is None:
        args.model = "smoke" if args.smoke else "demo"
    if args.run_dir is None:
        name = os.path.basename(os.path.normpath(args.dataset)).replace("tfds:", "")
        args.run_dir = os.path.join("runs", f"{name}_{args.model}_mpp")
    return args


def model_config(args):
    if args.model in ("demo", "smoke"):
        return DEMO_MODEL if args.model == "demo" else SMOKE_MODEL
    try:
        return dict(get_variant(args.model).config)
    except ValueError:
        raise SystemExit(f"--model {args.model!r} is not a keras_vit constructor (e.g. ViTB16).") from None


def build_encoder(args):
    common = dict(image_size=args.image_size, include_top=False, dropout_rate=args.dropout)
    if args.model in ("demo", "smoke"):
        # The name finetune.py gives the same model.
        common.update(model_config(args), name=f"vit_{args.model}")
        return keras_vit.load_model("ViT", weights=args.weights, **common)
    return keras_vit.load_model(args.model, weights=args.weights, **common)


def build_task(args, encoder):
    task = pretraining.MaskedPatchPrediction(
        encoder, target=args.target, rate=args.rate, mask_rate=args.mask_rate,
        replace_rate=args.replace_rate, bits=args.bits,
        preprocessing=None if args.preprocessing == "auto" else args.preprocessing,
        seed=args.seed,
    )
    return training.compile_for_masked_patch_prediction(
        task, args.total_steps, base_lr=args.lr, warmup_steps=args.warmup_steps,
        decay=args.decay, weight_decay=args.weight_decay, global_batch_size=args.batch_size,
        device_batch_size=args.device_batch_size, global_clipnorm=args.clipnorm or None,
    )


def pipelines(args, step_batch):
    """Raw [0, 255] batches (the task scales them); labels ride along unused."""
    load = dict(data_dir=args.tfds_data_dir, manual_dir=args.manual_dir, download=args.download)
    train_source = datasets.load_source(args.dataset, args.train_split, **load)
    eval_source = datasets.load_source(args.dataset, args.eval_split, **load)
    small = (train_source.num_examples or 1 << 30) <= 50_000 and args.image_size <= 64
    train_ds = data.train_pipeline(
        train_source.dataset, args.image_size, step_batch, mode=None,
        area_range=(args.area_min, 1.0), flip=args.flip, cache=small, seed=args.seed,
    )
    eval_source_ds = eval_source.dataset.take(16) if args.smoke else eval_source.dataset
    eval_ds = data.eval_pipeline(eval_source_ds, args.image_size, step_batch, mode=None, cache=small)
    return train_ds, eval_ds, eval_source


def main(argv=None):
    args = resolve(parse_args(argv))
    configure_threads(args.threads)
    keras.utils.set_random_seed(args.seed)
    if args.dtype_policy:
        keras.config.set_dtype_policy(args.dtype_policy)
    config = model_config(args)
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
    train_ds, eval_ds, eval_source = pipelines(args, step_batch)
    epochs = math.ceil(args.total_steps / args.eval_every)
    print(
        f"backend={keras.backend.backend()} distribution={dist.name} "
        f"replicas={dist.num_replicas} model={args.model} weights={args.weights} "
        f"dataset={args.dataset} target={args.target} rate={args.rate} "
        f"image_size={args.image_size} batch={args.batch_size} "
        f"(x{accumulation} accumulation) updates={epochs * args.eval_every} "
        f"lr={args.lr} run_dir={args.run_dir}",
        flush=True,
    )
    start = time.time()
    with dist.scope():
        encoder = build_encoder(args)
        task = build_task(args, encoder)
        task.fit(
            train_ds,
            epochs=epochs,
            steps_per_epoch=args.eval_every * accumulation,
            validation_data=eval_ds,
            shuffle=False,  # the pipeline shuffles
            callbacks=training.run_callbacks(args.run_dir, monitor="val_loss", mode="min"),
            verbose=args.verbose,
        )
        results = task.evaluate(eval_ds, return_dict=True, verbose=0)
    seconds = time.time() - start
    weights_path = os.path.join(args.run_dir, "encoder.weights.h5")
    encoder.save_weights(weights_path)
    results.update(
        seconds=round(seconds, 1), updates=int(task.optimizer.iterations),
        encoder_weights=weights_path,
    )
    with open(os.path.join(args.run_dir, "results.json"), "w") as f:
        json.dump({**results, "args": vars(args)}, f, indent=1, default=str)
    chance = f" (uniform guess: {math.log(task.head.units):.3f})" if args.target == "mean_color" else ""
    print(
        f"held-out masked-patch loss: {results['loss']:.4f}{chance} "
        f"({16 if args.smoke else eval_source.num_examples or '?'} images, split "
        f"{args.eval_split!r}); {results['updates']} updates in {seconds:.0f}s\n"
        f"encoder weights: {weights_path}\n"
        f"fine-tune: python examples/finetune.py --weights {weights_path} "
        f"--image-size {args.image_size}"
        + ("" if args.model in ("demo", "smoke") else f" --model {args.model}")
        + (" --smoke" if args.smoke else ""),
        flush=True,
    )
    return results


if __name__ == "__main__":
    main()
