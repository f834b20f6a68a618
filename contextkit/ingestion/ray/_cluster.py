"""Connecting to Ray, with errors that say what to do instead of a long hang or a traceback."""

from __future__ import annotations

import logging
import os
import socket
from types import ModuleType

from contextkit.core.errors import RayClusterError, RayNotInstalledError
from contextkit.ingestion.ray import INSTALL_HINT

log = logging.getLogger(__name__)

#: Seconds to wait for a TCP answer from the cluster's address before calling it unreachable.
PROBE_TIMEOUT_S = 5.0


def import_ray() -> ModuleType:
    """Ray with Ray Data, or :class:`RayNotInstalledError` naming the extra to install."""
    try:
        import ray
        import ray.data  # noqa: F401 - the pipeline needs Ray Data, not only Ray core
    except ImportError as exc:
        raise RayNotInstalledError(f"engine='ray' needs Ray with Ray Data, which is not installed here: "
                                   f"{INSTALL_HINT}  ({exc})") from exc
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``ray://HOST:PORT`` or ``HOST:PORT``; None for ``auto``/``local``."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def probe(address: str) -> None:
    """Fail fast on an address nothing answers at: Ray itself may retry for a minute or more."""
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise RayClusterError(
            f"cannot reach the Ray cluster at {address} ({reason}); check that the cluster is up (`ray status` "
            f"on its head node) and the address: ray://HEAD:10001 for Ray Client from outside, HEAD:6379 or "
            f"'auto' from a node of the cluster") from None


def connect(address: str | None) -> ModuleType:
    """Ray, connected to ``address`` (None: ``RAY_ADDRESS`` if set, else a new local Ray).

    A Ray already initialised in this process (``ray.init`` by the caller, with its own
    ``runtime_env``) is used as it is.
    """
    ray = import_ray()
    if address and address not in ("auto", "local"):
        probe(address)
    if ray.is_initialized():
        return ray
    kwargs: dict = {"logging_level": logging.WARNING, "log_to_driver": False}
    if not address and not os.environ.get("RAY_ADDRESS"):  # starting a Ray here, not joining one
        kwargs["include_dashboard"] = False
    try:
        ray.init(address=address or None, **kwargs)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as exc:
        raise RayClusterError(f"cannot connect to the Ray cluster at {address or 'RAY_ADDRESS / local'}: "
                              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    log.info("connected to Ray (%s)", address or "RAY_ADDRESS / a new local Ray")
    return ray


def quiet_console() -> None:
    """For the CLI: Ray Data's console log (plans, progress, internal stack traces) off; its log files stay.

    The CLI prints one bar and one clear error of its own; a library user keeps Ray's defaults.
    """
    try:
        import ray.data  # noqa: F401 - configures the "ray.data" logger
    except ImportError:
        return  # ingest itself says how to install Ray
    for handler in logging.getLogger("ray.data").handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.setLevel(logging.CRITICAL)


def check_gpus(ray: ModuleType, num_gpus: float) -> None:
    """Refuse now, before any index is written, a GPU request the cluster cannot meet (Ray would wait forever)."""
    if num_gpus <= 0:
        return
    have = float(ray.cluster_resources().get("GPU", 0))
    if have < min(num_gpus, 1.0) or have < int(num_gpus):
        raise RayClusterError(f"asked for {num_gpus:g} GPU(s) for embedding; the Ray cluster has {have:g} "
                              f"(use --num-gpus 0 to embed on CPUs)")


def plan_actors(ray: ModuleType, num_gpus: float, blocks: int) -> tuple[int, float]:
    """``(actors, GPUs per actor)`` for the embedding pool.

    ``num_gpus >= 1``: that many actors with one GPU each; a fraction: one actor with
    that share; 0: CPU actors, one per cluster CPU but one (left for load + chunk tasks),
    never more than there are blocks.
    """
    if num_gpus > 0:
        return (1, num_gpus) if num_gpus < 1 else (max(1, min(int(num_gpus), blocks)), 1.0)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(1, min(cpus - 1, blocks)), 0.0
