"""The readers and writers of each checkpoint layout, each a table on `keras_vit.weights.rules`.

- `official`: official vit_jax and big_vision `.npz` files (the canonical
  layout itself, plus Linen numbering, scanned blocks, big_vision's position
  embedding);
- `timm`: timm state dicts and timm Hub directories of timm's
  `VisionTransformer` and what every timm reader shares (`timm_args`);
  the other timm model classes are read by their family's module in
  `keras_vit.families` (`eva`, `vit_relpos`, `vit_hybrid`, `sam`);
- `transformers_family`, `keras_hub_family`: the base classes of the
  families of the sources that come in families (what a family declares,
  what every family does the same way), `registry.FamilyRegistry` the
  table of one source's families, `transformers_processor` the
  transformers image processor files;
- `keras_vit`: keras_vit's own `.weights.h5` / `.keras` files;
- `conventions`: the rules of the PyTorch and Keras naming conventions the
  tables are written with.

The families themselves (their tables of names, config fields and tensors)
live one module per family in `keras_vit.families`. Each reader returns a
`keras_vit.weights.canonical.Checkpoint`; `keras_vit.weights.readers` picks
one by file name, `keras_vit.presets` by directory layout.
"""
