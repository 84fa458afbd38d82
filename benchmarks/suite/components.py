"""The typed configs of a suite's components, each read from its own node of the composed config
by its ``from_node``, which names a bad field and what it allows. A :class:`SuitePlan` holds
them; after validation, code reads their fields, never the node.

Built so far: ``ray`` and ``tracking``. The task, engine, warm-start and model nodes are still
carried as checked dicts on the plan (``benchmarks/suite/plan.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from algorithms.configkit import ConfigError, config_value

__all__ = ["RayConfig", "TrackingConfig"]


def _keys(node: Mapping[str, Any], prefix: str, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(node) - set(allowed))
    if unknown:
        raise ConfigError(f"{prefix}.{unknown[0]}: unknown key; allowed: {list(allowed)}")


@dataclass(frozen=True)
class RayConfig:
    """``ray``: the cluster ``jobs=ray`` runs a suite's tasks on. Checked whatever ``jobs`` is:
    a typo must not wait for the day ``jobs=ray`` is set."""

    #: ``auto`` (the cluster ``ray start --head`` made on this machine, or ``$RAY_ADDRESS``) or
    #: ``<host>:<port>`` of a Ray head node.
    address: str = "auto"
    #: Times Ray runs a task again after its worker or node died.
    max_retries: int = 3

    @classmethod
    def from_node(cls, node: Mapping[str, Any] | None) -> RayConfig:
        node = dict(node or {})
        _keys(node, "ray", ("address", "max_retries"))
        address = str(node.get("address", "auto")).strip()
        host, sep, port = address.rpartition(":")
        if address != "auto" and not (sep and host and port.isdigit() and 0 < int(port) < 65536):
            raise ConfigError(
                f"ray.address={address!r}: allowed 'auto' (the cluster `ray start --head` made on "
                "this machine, or $RAY_ADDRESS) or <host>:<port> of a Ray head node, e.g. "
                "10.0.0.5:6379"
            )
        retries = config_value("ray.max_retries", node.get("max_retries", 3), int, ge=0)
        return cls(address, retries)


@dataclass(frozen=True)
class TrackingConfig:
    """``tracking``: the MLflow store the runs log to, and their experiment."""

    #: The store's URI: ``tracking.uri``, else ``$MLFLOW_TRACKING_URI``, else the default SQLite
    #: file; a ``postgresql://`` URI names the driver installed here.
    uri: str
    #: Where :attr:`uri` came from, for messages: ``tracking.uri`` or ``MLFLOW_TRACKING_URI``.
    key: str
    experiment: str

    @classmethod
    def from_node(cls, node: Mapping[str, Any] | None) -> TrackingConfig:
        from benchmarks.telemetry.store import database_uri
        from benchmarks.telemetry.tracking import default_tracking_uri

        node = dict(node or {})
        _keys(node, "tracking", ("uri", "experiment"))
        experiment = node.get("experiment")
        if experiment is None or not str(experiment).strip():
            raise ConfigError(
                f"tracking.experiment={experiment!r}: must be a non-empty string, the MLflow "
                "experiment the runs log to"
            )
        from_env = not node.get("uri") and os.environ.get("MLFLOW_TRACKING_URI")
        uri = database_uri(str(node.get("uri") or default_tracking_uri()))
        key = "MLFLOW_TRACKING_URI" if from_env else "tracking.uri"
        return cls(uri, key, str(experiment))
