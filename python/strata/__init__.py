"""strata: matrix optimizers (Shampoo, SOAP, KL-Shampoo, Muon, AdamW tail) over a C runtime.

`import strata` loads libstrata.so through ctypes (strata._lib says where it
looks) and needs no other package; `import strata.torch` adds the
torch.optim optimizers and needs PyTorch.
"""
from ._lib import (Config, StrataError, check, default_config, lib)

__all__ = ["Config", "StrataError", "check", "default_config", "lib", "version"]


def version() -> str:
    """The loaded library's version, "MAJOR.MINOR.PATCH" (strata_version())."""
    return lib().strata_version().decode()
