"""What the machine has, as the kernels' hardware rules read it.

A fast path measured faster on one machine can be slower on another: torch's
oneDNN projections beat its default GEMM on AVX-512 CPUs and lost to it on
an AVX2-only one (docs/performance.md). So each override's rule
(`registry.Override.pays`) reads the machine from here, never assumes it:

- `cpu_isa()`: the widest x86 vector instruction set the CPU's math
  libraries may use: "avx512" (AVX-512 F, BW, DQ and VL), "avx2" (AVX2 and
  FMA) or "baseline" (anything else, other architectures included). Read
  from the CPU's flags (`/proc/cpuinfo`, else torch's
  `get_cpu_capability()` where torch is loaded) and capped by oneDNN's
  `ONEDNN_MAX_CPU_ISA` (or `DNNL_MAX_CPU_ISA`) where set.
- `cpu_vendor()`: "intel", "amd" or "other", from `/proc/cpuinfo`'s
  `vendor_id`. MKL, torch's default float32 GEMM, runs its AVX-512 code on
  Intel CPUs and slower code on AMD ones, so the faster of it and oneDNN
  depends on the vendor too (docs/performance.md).
- `device()`: the backend's default device kind: "cpu", "gpu" or "tpu"
  (torch places each tensor itself; its rules read the tensor's device).

`assume(...)` replaces any of them within a context, so that every branch of
a rule can be tested on any machine.
"""

import contextlib
import functools
import os
import pathlib

import keras

ISAS = ("baseline", "avx2", "avx512")
VENDORS = ("intel", "amd", "other")
_ASSUMED = {}


@contextlib.contextmanager
def assume(cpu_isa=None, device=None, cpu_vendor=None):
    """Within this context the hardware rules see these values (None: the machine's).

    Args:
        cpu_isa: None or one of `ISAS`.
        device: None or "cpu", "gpu" or "tpu".
        cpu_vendor: None or one of `VENDORS`.

    Example:

    >>> with assume(cpu_isa="avx2", device="gpu", cpu_vendor="amd"):
    ...     cpu_isa(), device(), on_cpu(), on_accelerator(), cpu_vendor()
    ('avx2', 'gpu', False, True, 'amd')
    """
    if cpu_isa is not None and cpu_isa not in ISAS:
        raise ValueError(f"`cpu_isa` must be one of {ISAS}. Received: cpu_isa={cpu_isa!r}")
    if device is not None and device not in ("cpu", "gpu", "tpu"):
        raise ValueError(f"`device` must be 'cpu', 'gpu' or 'tpu'. Received: device={device!r}")
    if cpu_vendor is not None and cpu_vendor not in VENDORS:
        raise ValueError(f"`cpu_vendor` must be one of {VENDORS}. Received: cpu_vendor={cpu_vendor!r}")
    given = {"cpu_isa": cpu_isa, "device": device, "cpu_vendor": cpu_vendor}
    previous = dict(_ASSUMED)
    _ASSUMED.update({k: v for k, v in given.items() if v is not None})
    try:
        yield
    finally:
        _ASSUMED.clear()
        _ASSUMED.update(previous)


def cpu_isa():
    """"avx512", "avx2" or "baseline": the vector ISA the CPU's math libraries may use."""
    return _ASSUMED.get("cpu_isa") or _cpu_isa()


@functools.lru_cache(maxsize=None)
def _cpu_isa():
    # oneDNN reads its cap once, when it loads: so does this.
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
    return _capped(_flags_isa(cpu_flags()), cap)


def cpu_vendor():
    """"intel", "amd" or "other": who made the CPU."""
    return _ASSUMED.get("cpu_vendor") or _cpu_vendor()


@functools.lru_cache(maxsize=None)
def _cpu_vendor():
    vendor_id = _cpuinfo("vendor_id")
    return "other" if vendor_id is None else _vendor(vendor_id)


def _vendor(vendor_id):
    """The vendor of a CPUID vendor string.

    Example:

    >>> _vendor(" GenuineIntel"), _vendor("AuthenticAMD"), _vendor("CentaurHauls")
    ('intel', 'amd', 'other')
    """
    return {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(vendor_id.strip(), "other")


def device():
    """The backend's default device kind: "cpu", "gpu" or "tpu"."""
    return _ASSUMED.get("device") or _backend_device(keras.backend.backend())


def on_cpu(*args):
    """A hardware rule: the backend's default device is a CPU (the op's arguments are ignored)."""
    return device() == "cpu"


def on_accelerator(*args):
    """A hardware rule: the backend's default device is not a CPU."""
    return device() != "cpu"


@functools.lru_cache(maxsize=None)
def _backend_device(backend):
    if backend == "jax":
        import jax

        return {"cuda": "gpu", "rocm": "gpu"}.get(jax.default_backend(), jax.default_backend())
    if backend == "tensorflow":
        import tensorflow as tf

        return "gpu" if tf.config.list_logical_devices("GPU") else "cpu"
    return "cpu"


@functools.lru_cache(maxsize=None)
def cpu_flags():
    """The CPU's feature flags (lower case), e.g. {"avx2", "avx512f", ...}; empty if unknown."""
    flags = _cpuinfo("flags")
    return _torch_flags() if flags is None else frozenset(flags.split())


def _cpuinfo(field):
    """The value of the first `field` line of `/proc/cpuinfo`, or None."""
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1]
    except OSError:
        pass
    return None


def _torch_flags():
    """Flags implied by torch's CPU capability, where torch is loaded and /proc is not there."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return frozenset()
    capability = torch.backends.cpu.get_cpu_capability().lower()
    if capability.startswith("avx512"):
        return frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"})
    return frozenset({"avx2", "fma"}) if capability == "avx2" else frozenset()


def _flags_isa(flags):
    """The ISA `flags` (a CPU's feature flags) give.

    Example:

    >>> _flags_isa({"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"})
    'avx512'
    >>> _flags_isa({"avx2", "fma", "avx512f"}), _flags_isa({"neon"})
    ('avx2', 'baseline')
    """
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= set(flags):
        return "avx512"
    return "avx2" if {"avx2", "fma"} <= set(flags) else "baseline"


def _capped(isa, cap):
    """`isa` lowered to oneDNN's ISA cap (an `ONEDNN_MAX_CPU_ISA` value) if that is lower.

    Example:

    >>> _capped("avx512", "AVX2"), _capped("avx512", "AVX512_CORE_BF16"), _capped("avx2", None)
    ('avx2', 'avx512', 'avx2')
    """
    if not cap:
        return isa
    cap = cap.strip().lower()
    limit = "avx512" if cap.startswith(("avx512", "avx10", "amx", "all", "default")) else (
        "avx2" if cap.startswith("avx2") else "baseline"
    )
    return min(isa, limit, key=ISAS.index)
