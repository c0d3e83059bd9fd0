"""One module per checkpoint source, each a table on `keras_vit.weights.rules`.

- `official`: official vit_jax and big_vision `.npz` files (the canonical
  layout itself, plus Linen numbering, scanned blocks, big_vision's position
  embedding);
- `timm`: timm state dicts and timm Hub directories;
- `transformers`: transformers directories, read and written, through the
  registry of its families (`TRANSFORMERS_FAMILIES`): one
  `transformers_family.TransformersFamily` subclass per module
  (`transformers_vit` for ViT/DeiT, `transformers_dinov2`, `transformers_dinov3`,
  `transformers_clip`, `transformers_siglip`, `transformers_siglip2`,
  `transformers_vit_mae`), processor files in `transformers_processor`;
- `keras_hub`: keras-hub presets, through the registry of its families
  (`KERAS_HUB_FAMILIES`): one `keras_hub_family.KerasHubFamily` subclass per
  module (`keras_hub_vit`, `keras_hub_dinov2`, `keras_hub_siglip`, `keras_hub_clip`);
- `keras_vit`: keras_vit's own `.weights.h5` / `.keras` files;
- `transformers_image_text`, `keras_hub_image_text`: the text towers and
  logit scale and bias of the two-tower image-text checkpoints (CLIP,
  MetaCLIP 2, SigLIP, SigLIP 2), beside the vision families that read their
  image towers (`keras_vit.image_text_presets` puts them together).

The tables are written with the rules of the PyTorch and Keras naming
conventions (`conventions`); both registries are a `families.FamilyRegistry`.
Each reader returns a `keras_vit.weights.canonical.Checkpoint`;
`keras_vit.weights.readers` picks one by file name, `keras_vit.presets` by
directory layout.
"""
