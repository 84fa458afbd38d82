"""The Ray cluster a suite (``jobs=ray``) or a sweep (``--ray-address``) runs its tasks on.

``ray.address`` is ``auto`` (``$RAY_ADDRESS``, else the cluster ``ray start --head`` made on
this machine, found the way Ray itself finds it) or ``<host>:<port>`` of the head node's GCS.
:func:`check_ray_address` resolves it and opens one TCP connection to it with a short timeout,
before any compute: ``ray.init`` on an address nobody answers retries for a minute or more, which
to a user looks like a hang. :func:`connected` joins the cluster for the length of a block (and
leaves it after, unless this process had joined it before).
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator

from benchmarks.telemetry.store import CLUSTER_EXTRA, PROBE_TIMEOUT_S, PreflightError

log = logging.getLogger(__name__)

__all__ = ["check_ray_address", "connected"]


def _import_ray(key: str, address: str):
    try:
        import ray
    except ImportError as e:
        raise PreflightError(
            f"{key}={address}: Ray is not installed; pip install 'sppo-bench[{CLUSTER_EXTRA}]'"
        ) from e
    return ray


def check_ray_address(
    address: str, key: str = "ray.address", timeout: float = PROBE_TIMEOUT_S
) -> str:
    """``address`` as the ``<host>:<port>`` of a Ray head node that accepts a connection within
    ``timeout`` seconds; raise :class:`PreflightError` naming ``key`` otherwise."""
    _import_ray(key, address)
    from ray._private.services import canonicalize_bootstrap_address  # how ray.init resolves it

    try:
        resolved = canonicalize_bootstrap_address(address)
    except Exception as e:  # a malformed address, an unknown host name
        raise PreflightError(f"{key}={address}: not a Ray address ({e})") from e
    if resolved is None:
        raise PreflightError(
            f"{key}={address}: no Ray cluster found ($RAY_ADDRESS is unset and no cluster was "
            "started on this machine); start one with `ray start --head`, or set "
            f"{key}=<host>:<port> of its head node"
        )
    host, _, port = resolved.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise PreflightError(
            f"{key}={address}: no Ray head node answers at {resolved} within {timeout:g} s ({e}); "
            f"start one there (`ray start --head --port={port}`) or fix the address"
        ) from e
    return resolved


@contextlib.contextmanager
def connected(address: str, key: str = "ray.address") -> Iterator[None]:
    """This process joined to the Ray cluster at ``address`` (checked first) for the block. A
    process already joined (a test's local cluster, a user's own ``ray.init``) stays joined."""
    ray = _import_ray(key, address)
    if ray.is_initialized():
        yield
        return
    resolved = check_ray_address(address, key)
    ray.init(address=resolved, logging_level=logging.WARNING, log_to_driver=True)
    log.info("joined the Ray cluster at %s: %s", resolved, ray.cluster_resources())
    try:
        yield
    finally:
        ray.shutdown()
