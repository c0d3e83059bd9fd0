"""Does masked patch prediction help? A small offline experiment.

Pre-trains a small ViT by masked patch prediction on scikit-learn's digits
(upscaled to 64 px, labels unused), then measures it with the same labelled
budget as the same encoder from its random initialisation:

- few-shot linear accuracy (`keras_vit.inspection.evaluation.few_shot_linear`,
  `--shots` labelled images per class) of the frozen, average-pooled patch
  tokens;
- fine-tuning accuracy: a classifier on the encoder trained on the same
  `--shots` images per class for `--finetune-steps` updates.

Both on the 359 held-out digits, per seed; also the held-out masked-prediction
loss against the loss of predicting each position's colour frequencies (the
image ignored). torch runs with one intra-op thread (`--torch-threads`, see
`limit_torch_threads`). Usage (one backend per process):

    KERAS_BACKEND=jax python tools/pretraining_experiment.py --seeds 0 1 2
"""

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit import pretraining, training  # noqa: E402
from keras_vit.inspection.evaluation import few_shot_linear  # noqa: E402
from keras_vit.training import datasets  # noqa: E402

# The demo encoder of examples/pretrain_masked_patches.py (and finetune.py):
# 64 px digits in a 4x4 grid of 16 px patches, each 2x2 original pixels.
IMAGE_SIZE = 64
ENCODER = dict(patch_size=16, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=256)


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a = p.add_argument
    a("--seeds", type=int, nargs="+", default=[0, 1, 2], help="random seeds, one run each")
    a("--pretrain-steps", type=int, default=1500, help="masked patch prediction updates")
    a("--pretrain-batch", type=int, default=32, help="pre-training batch size")
    a("--pretrain-lr", type=float, default=1e-3, help="pre-training peak learning rate (Adam)")
    a("--target", default="mean_color", choices=pretraining.TARGETS, help="pre-training target")
    a("--shots", type=int, default=10, help="labelled training images per class")
    a("--finetune-steps", type=int, default=100, help="fine-tuning updates on the labelled images")
    a("--finetune-lr", type=float, default=1e-3, help="fine-tuning peak learning rate (AdamW)")
    a("--hidden-size", type=int, default=ENCODER["hidden_size"], help="encoder width")
    a("--num-layers", type=int, default=ENCODER["num_layers"], help="encoder depth")
    a("--torch-threads", type=int, default=1, help="torch intra-op threads (0: torch's default)")
    a("--output", default=None, help="write the results as JSON to this file")
    return p


def digits(image_size):
    """Upscaled digits (bilinear, as the training pipelines) in [0, 255]."""
    (x_train, y_train), (x_test, y_test) = datasets.digits_arrays()

    def up(x):
        x = keras.ops.image.resize(x.astype("float32"), (image_size, image_size))
        return np.clip(np.asarray(keras.ops.convert_to_numpy(x)), 0, 255).round().astype("uint8")

    return (up(x_train), y_train), (up(x_test), y_test)


def build_encoder(args):
    config = dict(ENCODER, hidden_size=args.hidden_size, num_layers=args.num_layers,
                  mlp_dim=4 * args.hidden_size, num_heads=max(args.hidden_size // 16, 1))
    return keras_vit.ViT(image_size=IMAGE_SIZE, include_top=False, name="encoder", **config)


def pretrain(encoder, images, held_out, args, seed):
    """Masked patch prediction on the unlabelled images; the held-out loss."""
    steps_per_epoch = math.ceil(len(images) / args.pretrain_batch)
    epochs = max(round(args.pretrain_steps / steps_per_epoch), 1)
    task = pretraining.MaskedPatchPrediction(encoder, target=args.target, seed=seed)
    training.compile_for_masked_patch_prediction(
        task, epochs * steps_per_epoch, base_lr=args.pretrain_lr,
        warmup_steps=epochs * steps_per_epoch // 10, global_batch_size=args.pretrain_batch,
    )
    task.fit(images, batch_size=args.pretrain_batch, epochs=epochs, verbose=0)
    return float(task.evaluate(held_out, batch_size=128, verbose=0))


def few_shot(encoder, train, test, args, seed):
    features = keras_vit.ViT.from_config({**encoder.get_config(), "pooling": "avg"})
    features.set_weights(encoder.get_weights())
    scale = lambda x: keras_vit.preprocess_input(x.astype("float32"), mode="inception")  # noqa: E731
    result = few_shot_linear(
        features, (scale(train[0]), train[1]), (scale(test[0]), test[1]),
        shots=args.shots, seed=seed,
    )
    return result.accuracy


def finetune(encoder, train, test, args, seed):
    """Fine-tunes a classifier on `args.shots` labelled images per class."""
    rng = np.random.default_rng(seed)
    picked = np.concatenate(
        [rng.choice(np.flatnonzero(train[1] == c), args.shots, replace=False) for c in range(10)]
    )
    x = keras_vit.preprocess_input(train[0][picked].astype("float32"), mode="inception")
    y = train[1][picked]
    config = {**encoder.get_config(), "include_top": True, "classes": 10,
              "classifier_activation": None, "pooling": None, "name": "classifier"}
    model = keras_vit.ViT.from_config(config)  # zero-initialised head
    for layer in encoder.layers:
        model.get_layer(layer.name).set_weights(layer.get_weights())
    training.compile_for_pretraining(
        model, args.finetune_steps, base_lr=args.finetune_lr,
        warmup_steps=args.finetune_steps // 10, weight_decay=0.05,
        global_batch_size=len(y),
    )
    model.fit(x, y, batch_size=len(y), epochs=args.finetune_steps, verbose=0, shuffle=True)
    x_test = keras_vit.preprocess_input(test[0].astype("float32"), mode="inception")
    logits = model.predict(x_test, batch_size=128, verbose=0)
    return float((logits.argmax(-1) == test[1]).mean())


def position_only_loss(train_images, test_images, patch_size):
    """Cross-entropy of the held-out mean colours (3 bits) under each
    position's training frequencies (add-one-half smoothing): the loss of a
    model that ignores the image. A lower held-out masked-prediction loss
    (`--target mean_color`) uses the context."""
    train_ids = pretraining.mean_color_targets(train_images, patch_size)
    test_ids = pretraining.mean_color_targets(test_images, patch_size)
    losses = []
    for position in range(train_ids.shape[1]):
        counts = np.bincount(train_ids[:, position], minlength=512) + 0.5
        losses.append(-np.log(counts[test_ids[:, position]] / counts.sum()).mean())
    return float(np.mean(losses))


def run_seed(seed, train, test, args):
    keras.utils.set_random_seed(seed)
    encoder = build_encoder(args)
    initial = encoder.get_weights()
    row = {"seed": seed}
    start = time.time()
    row["random_few_shot"] = few_shot(encoder, train, test, args, seed)
    row["random_finetune"] = finetune(encoder, train, test, args, seed)
    keras.utils.set_random_seed(seed)
    encoder.set_weights(initial)
    row["heldout_loss"] = pretrain(encoder, train[0], test[0], args, seed)
    row["pretrained_few_shot"] = few_shot(encoder, train, test, args, seed)
    keras.utils.set_random_seed(seed)
    row["pretrained_finetune"] = finetune(encoder, train, test, args, seed)
    row["seconds"] = round(time.time() - start, 1)
    return row


def limit_torch_threads(threads):
    # Measured on 2 shared cores while other processes ran: with torch's
    # default 2 threads a pre-training step of this small model took 467 ms,
    # with 1 thread 61 ms (tensorflow: 27 ms, jax: 29 ms with their defaults).
    if threads and keras.backend.backend() == "torch":
        import torch

        torch.set_num_threads(threads)


def main(argv=None):
    args = build_parser().parse_args(argv)
    limit_torch_threads(args.torch_threads)
    start = time.time()
    train, test = digits(IMAGE_SIZE)
    rows = []
    for seed in args.seeds:
        row = run_seed(seed, train, test, args)
        rows.append(row)
        print(json.dumps(row), flush=True)
    keys = ("random_few_shot", "pretrained_few_shot", "random_finetune", "pretrained_finetune")
    summary = {k: round(float(np.mean([r[k] for r in rows])), 4) for k in keys}
    summary.update(
        heldout_loss=round(float(np.mean([r["heldout_loss"] for r in rows])), 4),
        position_only_loss=round(position_only_loss(train[0], test[0], ENCODER["patch_size"]), 4),
        backend=keras.backend.backend(), seconds=round(time.time() - start, 1),
        args=vars(args),
    )
    print(json.dumps(summary), flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"runs": rows, "summary": summary}, f, indent=1)
    return rows, summary


if __name__ == "__main__":
    main()
