#!/usr/bin/env bash
# Fine-tunes ViT-B/16 (ImageNet-21k weights) on CIFAR-10 on a Cloud TPU,
# following the paper's recipe (arXiv:2010.11929 §4.1, Table 4): SGD momentum
# 0.9, global batch 512, 10k updates, cosine decay after 500 warm-up steps,
# gradient clipping at norm 1, 384 px.
#
# Usage (on a Cloud TPU VM, e.g. v3-8 / v4-8, or a Colab TPU runtime):
#   pip install "keras-vit[tensorflow]"        # or: pip install -e ".[tensorflow]"
#   bash examples/finetune_tpu.sh [BACKEND] [extra finetune.py flags...]
#
# BACKEND is "tensorflow" (TPUStrategy, default) or "jax" (jax sees the TPU
# cores directly; DataParallel over them). Data: tfds downloads CIFAR-10 to
# $TFDS_DATA_DIR on first use (--download); point TFDS_DATA_DIR at a GCS
# bucket (gs://...) when the TPU cannot read local files (TPU Nodes).
#
# The global batch of 512 is split over the 8 TPU cores (64 each); a killed
# run resumes from its last completed evaluation interval when started again
# with the same --run-dir (a gs:// path works too with tensorflow).
set -euo pipefail

BACKEND="${1:-tensorflow}"
shift || true
RUN_DIR="${RUN_DIR:-runs/vit_b16_cifar10_tpu}"
TFDS_DATA_DIR="${TFDS_DATA_DIR:-$HOME/tensorflow_datasets}"

if [[ "$BACKEND" == "tensorflow" ]]; then
  # --tpu local: the TPU of this Cloud TPU VM; on Colab leave it out (the
  # runtime's TPU is found automatically); for a TPU Node pass its name or
  # grpc://host:8470.
  DIST=(--distribution tpu --tpu "${TPU:-local}")
else
  DIST=(--distribution tpu)
fi

KERAS_BACKEND="$BACKEND" python "$(dirname "$0")/finetune.py" \
  --model ViTB16 --weights imagenet21k \
  --dataset cifar10 --train-split train --eval-split test \
  --tfds-data-dir "$TFDS_DATA_DIR" --download \
  --image-size 384 --batch-size 512 \
  --total-steps 10000 --warmup-steps 500 --eval-every 1000 \
  --lr 0.01 --decay cosine --optimizer sgd \
  --dtype-policy mixed_bfloat16 \
  "${DIST[@]}" --run-dir "$RUN_DIR" --verbose 2 "$@"
