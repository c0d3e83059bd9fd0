"""A trained classifier written as a preset that predicts as it will be used.

Training computes the loss from logits (`classifier_activation=None`, the
numerically stable form), but a model reloaded to classify images should
give probabilities, as `keras_vit.decode_predictions` and `keras-vit
inspect` show them. `save_trained_preset` writes the model's configuration
with the head's activation put back (a function without weights, so the
weights are the trained ones), its weights without the optimizer's state,
and the class names and preprocessing of its data.
"""

import contextlib

from keras_vit.validation import check_choice

# The activations a classifier's head may be saved with.
HEAD_ACTIVATIONS = ("softmax", "sigmoid", None)
PRESET_OPTIONS = ("class_names", "preprocessing", "classifier_activation")


@contextlib.contextmanager
def _head_activation(model, activation):
    # `get_config` reads the attribute; the graph in memory is unchanged.
    trained = model.classifier_activation
    model.classifier_activation = activation
    try:
        yield model
    finally:
        model.classifier_activation = trained


def save_trained_preset(model, directory, class_names=None, preprocessing=None,
                        classifier_activation="softmax"):
    """Writes a trained keras_vit classifier as a keras_vit preset.

    Args:
        model: a keras_vit `ViT` (or `ViTHybrid`), compiled or not.
        directory: the preset folder to write.
        class_names: None (the model's) or one string per class.
        preprocessing: None (the model's), a mode ("inception",
            "imagenet") or a `keras_vit.preprocessing.Preprocessing` record:
            how images were prepared for training.
        classifier_activation: "softmax" (default: the reloaded model
            predicts probabilities), "sigmoid" or None (logits). Ignored for
            a model without a head.

    Returns:
        `directory`.

    Example:

    >>> import tempfile, keras_vit
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1,
    ...                       num_heads=2, mlp_dim=8, classes=2, classifier_activation=None)
    >>> folder = save_trained_preset(model, tempfile.mkdtemp(), class_names=["no", "yes"],
    ...                              preprocessing="inception")
    >>> again = keras_vit.from_preset(folder)
    >>> again.classifier_activation, again.class_names
    ('softmax', ('no', 'yes'))
    """
    check_choice(classifier_activation, HEAD_ACTIVATIONS, "classifier_activation")
    if not model.include_top:
        classifier_activation = model.classifier_activation
    with _head_activation(model, classifier_activation):
        model.save_to_preset(directory, preprocessing=preprocessing, class_names=class_names)
    return directory
