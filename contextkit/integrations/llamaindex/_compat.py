"""Which llama-index-core versions the plug-in supports, checked once on import."""

from __future__ import annotations

from importlib import metadata

from contextkit.core.errors import LlamaIndexVersionError

__all__ = ["SUPPORTED", "LlamaIndexVersionError", "check_version"]

#: Versions the plug-in is tested against (inclusive lower bound, exclusive upper bound): CI runs the plug-in's
#: tests at the lower bound as well as at the newest release (``.ci/run``). 0.14.20 is the first release that
#: passes them all: earlier 0.14 releases lack the NOT condition and TEXT_MATCH_INSENSITIVE (which
#: ``ContextKitVectorStore`` evaluates with LlamaIndex's own code), 0.14.0 needs NLTK data from the network.
SUPPORTED = ("0.14.20", "0.15")


def _tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_version(installed: str | None = None) -> str:
    """The installed llama-index-core version, or a clear error naming the supported ones."""
    if installed is None:
        try:
            installed = metadata.version("llama-index-core")
        except metadata.PackageNotFoundError:
            raise LlamaIndexVersionError(
                "the LlamaIndex plug-in needs llama-index-core: pip install 'llama-index-core>=0.14.20,<0.15'") from None
    low, high = SUPPORTED
    if not _tuple(low) <= _tuple(installed) < _tuple(high):
        raise LlamaIndexVersionError(
            f"llama-index-core {installed} is not supported by contextkit's plug-in; supported: "
            f">={low},<{high} (pip install 'llama-index-core>={low},<{high}')")
    return installed
