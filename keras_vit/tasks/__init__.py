"""Tasks: one module each, holding its task model, its one-call function and its post-processing.

- `keras_vit.tasks.images`: reading and preparing images, shared by every task;
- `keras_vit.tasks.classification`: `classify` (image files to named
  probabilities) and `decode_predictions`;
- `keras_vit.tasks.zero_shot`: `ImageTextModel` (two towers in one
  embedding space), zero-shot classifiers and retrieval;
- `keras_vit.tasks.detection`: open-vocabulary detection (OWL-ViT, OWLv2):
  `OpenVocabularyDetector`, `keras_vit.detect`;
- `keras_vit.tasks.prompt_masks`: promptable segmentation (SAM):
  `PromptableSegmenter` (its `ImageEmbedder` and `PromptDecoder`),
  `keras_vit.segment_prompts`;
- `keras_vit.tasks.mask_generation`: every object of an image (SAM's
  automatic masks): `keras_vit.generate_masks`;
- `keras_vit.tasks.presets`: `keras_vit.from_preset`, which builds the task
  model of a task checkpoint.

The encoders stay in `keras_vit.models`; a task model wraps one.
"""


class ExportableTask:
    """`model.export` of a task model through keras_vit's exporters
    (`keras_vit.export.export_model`): every format of the backend, named
    inputs and outputs, the batch dynamic unless `input_signature` (an
    `InputSpec` of a one-input model) fixes it."""

    def export(self, filepath, format="onnx", verbose=None, input_signature=None, **kwargs):
        """Writes the model as a serving artifact (see the class docstring).

        Args:
            filepath: the artifact's path (`.onnx`, `.xml`; a folder for
                "tf_saved_model").
            format: "onnx" (default), "openvino", "tf_saved_model", ...
            verbose: None or bool: the exporters' own messages.
            input_signature: None, or for a model of one image input an
                `InputSpec` fixing the batch.
            **kwargs: `batch_size`, as `keras_vit.export.export_model` takes it.

        Returns:
            The path.
        """
        from keras_vit import export

        options = {}
        if input_signature is not None:
            if isinstance(self.input, dict):
                raise ValueError(
                    f"Model {self.name!r} takes named inputs of fixed sizes: its artifact takes them as they are "
                    "(`batch_size=` fixes the batch). Received: an input_signature"
                )
            options = export.signature_options(self, input_signature)
        return export.export_model(self, filepath, format, verbose=bool(verbose), **options, **kwargs)
