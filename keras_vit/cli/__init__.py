"""The work of the `keras-vit` commands: `inspect`, `classify`, `export` (`commands`), `zero-shot`,
`detect` and `masks` (`tasks`), `depth` and `segment` (`dense`), `presets` (`presets`: the names
every command takes); `files` turns the command
line's images (files and folders) into files, in chunks, and names each image's outputs.

The console script's front end (`tools/commands.py`, installed as
`keras_vit_tools.commands`) parses the command line before anything of
keras_vit loads (importing keras_vit imports Keras and a backend, several
seconds that `--help` and a usage error should not cost), then runs
`keras_vit.cli.commands.run(args)`.
"""
