"""Export to serving runtimes, and running the artifacts there.

- `keras_vit.export.formats`: the one table of formats (which backend
  produces each, with which exporter, which runtime runs it);
- `keras_vit.export.pipeline`: `export_model`, what `model.export(path,
  format=...)` runs on a keras_vit model (and on a text tower);
- `keras_vit.export.inputs`: what an artifact takes (images, a NaFlex patch
  batch, or what the model declares);
- `keras_vit.export.serving`: `run_exported`, `load_exported` and
  `verify_export`, each artifact in its own runtime;
- `keras_vit.export.int8`: `quantize="int8"` by the runtime's own quantizer.
"""

from keras_vit.export.formats import (
    BACKEND_FORMATS,
    EXPORT_FORMATS,
    EXPORTERS,
    FORMATS,
    OPENVINO_PRECISIONS,
    QUANTIZED_FORMATS,
    RUNTIMES,
    SUFFIXES,
)
from keras_vit.export.inputs import INPUT_NAME, input_signature, signature_options
from keras_vit.export.pipeline import (
    MODEL_EXPORT_OPTIONS,
    check_format,
    export_model,
    output_name,
    output_names,
    prepare_model,
)
from keras_vit.export.serving import load_exported, require, run_exported, verify_export
