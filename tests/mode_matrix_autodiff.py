"""Gradients and vectorized maps of the mode matrix's model, by each backend's
own autodiff (tests/test_mode_matrix_transforms.py).

- `gradients`: the outputs, the loss and its gradients with respect to the
  input images and to every trainable weight: `jax.grad` of
  `model.stateless_call` (compiled by `jax.jit`, or op by op for the
  reference), `tf.GradientTape`, torch's autograd.
- `mapped_gradients`: the same per batch of a stack of batches, under the
  backend's vectorizing map: `jax.vmap` of `jax.grad`, `torch.func.vmap` of
  `torch.func.grad_and_value` (both of `stateless_call`),
  `tf.vectorized_map` of a `GradientTape`'s gradients (without its
  fallback to a loop: every op is vectorized).

The loss is a sum over the images, weighted per image where asked, so
that a batch's gradients are the sums of its parts' (the reference takes
each half of a batch by the weights of the other half set to zero: the
same shapes as the whole batch, whose ops jax has compiled already when it
runs them one by one).
"""

import dataclasses

import keras
import numpy as np

from conftest import to_numpy
from kernel_helpers import BACKEND


@dataclasses.dataclass
class Gradients:
    """`outputs`, `loss`, `inputs` (the input images' gradient) and `weights`
    (the trainable weights' gradients, in `model.trainable_variables`'
    order); under a map each has the mapped axis first."""

    outputs: np.ndarray
    loss: np.ndarray
    inputs: np.ndarray
    weights: list


def loss(outputs, labels):
    """The summed categorical cross-entropy of softmax `outputs` (linear in
    `labels`: scaled labels weight their images)."""
    return -keras.ops.sum(keras.ops.cast(labels, "float32") * keras.ops.log(outputs))


def _numpy(outputs, value, inputs, weights):
    return Gradients(to_numpy(outputs), to_numpy(value), to_numpy(inputs), [to_numpy(w) for w in weights])


def gradients(model, x, y, weights=None, jit=True):
    """The model's outputs, loss and gradients on `(x, y)`, the images
    weighted by `weights` (None: 1); `jit` (jax only): compiled by XLA, else
    op by op."""
    if weights is not None:  # scaled labels weight their images (`loss`)
        y = np.asarray(y, "float32") * np.asarray(weights, "float32")[:, None]
    return {"jax": _jax_gradients, "tensorflow": _tf_gradients, "torch": _torch_gradients}[BACKEND](
        model, x, y, jit)


def mapped_gradients(model, xs, ys):
    """`gradients` of each batch of `xs` `(n, batch, ...)` under the backend's vectorizing map."""
    return {"jax": _jax_mapped, "tensorflow": _tf_mapped, "torch": _torch_mapped}[BACKEND](model, xs, ys)


# --- jax ---------------------------------------------------------------------


def _jax_loss(model):
    non_trainable = [v.value for v in model.non_trainable_variables]

    def value(trainable, x, y):
        outputs, _ = model.stateless_call(trainable, non_trainable, x, training=False)
        return loss(outputs, y), outputs

    return value


def _jax_gradients(model, x, y, jit):
    import jax

    step = jax.value_and_grad(_jax_loss(model), argnums=(0, 1), has_aux=True)
    step = jax.jit(step) if jit else step
    (value, outputs), (weights, inputs) = step([v.value for v in model.trainable_variables], x, y)
    return _numpy(outputs, value, inputs, weights)


def _jax_mapped(model, xs, ys):
    import jax

    step = jax.value_and_grad(_jax_loss(model), argnums=(0, 1), has_aux=True)
    step = jax.jit(jax.vmap(step, in_axes=(None, 0, 0)))
    (value, outputs), (weights, inputs) = step([v.value for v in model.trainable_variables], xs, ys)
    return _numpy(outputs, value, inputs, weights)


# --- tensorflow --------------------------------------------------------------


def _tf_step(model):
    import tensorflow as tf

    def step(x, y):
        with tf.GradientTape() as tape:
            tape.watch(x)
            outputs = model(x, training=False)
            value = loss(outputs, y)
        inputs, *weights = tape.gradient(value, [x, *model.trainable_variables])
        return outputs, value, inputs, weights

    return step


def _tf_gradients(model, x, y, jit):
    import tensorflow as tf

    return _numpy(*_tf_step(model)(tf.convert_to_tensor(x), tf.convert_to_tensor(y, "float32")))


def _tf_mapped(model, xs, ys):
    import tensorflow as tf

    step = _tf_step(model)
    elements = (tf.convert_to_tensor(xs), tf.convert_to_tensor(ys, "float32"))
    return _numpy(*tf.vectorized_map(lambda e: step(*e), elements, fallback_to_while_loop=False))


# --- torch -------------------------------------------------------------------


def _torch_loss(model):
    non_trainable = [v.value.detach() for v in model.non_trainable_variables]

    def value(trainable, x, y):
        outputs, _ = model.stateless_call(trainable, non_trainable, x, training=False)
        return loss(outputs, y), outputs

    return value


def _torch_gradients(model, x, y, jit):
    import torch

    x = torch.tensor(np.asarray(x), requires_grad=True)
    weights = [v.value for v in model.trainable_variables]
    outputs = model(x, training=False)
    value = loss(outputs, torch.as_tensor(np.asarray(y)))
    inputs, *grads = torch.autograd.grad(value, [x, *weights])
    return _numpy(outputs.detach(), value.detach(), inputs, grads)


def _torch_mapped(model, xs, ys):
    import torch
    from torch.func import grad_and_value, vmap

    trainable = [v.value.detach() for v in model.trainable_variables]
    step = vmap(grad_and_value(_torch_loss(model), argnums=(0, 1), has_aux=True), in_dims=(None, 0, 0))
    (weights, inputs), (value, outputs) = step(
        trainable, torch.as_tensor(np.asarray(xs)), torch.as_tensor(np.asarray(ys, "float32")))
    return _numpy(outputs, value, inputs, weights)
