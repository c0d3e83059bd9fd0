"""Registry of published checkpoints (filled in by the weights module)."""

WEIGHTS = {}


def weights_names(architecture):
    """Registered weights names for an architecture such as "B/16"."""
    return sorted(name for arch, name in WEIGHTS if arch == architecture)
