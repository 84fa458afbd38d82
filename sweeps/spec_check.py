"""A sweep spec checked against the suite's composed Hydra config, once per algorithm, before any
trial: every search-space path exists, the metric is the task's, and one point of the search space
passes the suite's own validation.

Apart from :mod:`sweeps.spec_fields`, which reads the spec alone, because this pass composes
configs (Hydra, the suite's plan) and the structural one must not need them. A trial's overrides
(:func:`trial_overrides`) live here as the check composes exactly what a trial runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sweeps.spec import ALG_PATH, SpecError, SweepSpec, fail

__all__ = ["check_spec", "task_eval_name", "trial_overrides"]


def trial_overrides(
    spec: SweepSpec, algorithm: str, sampled: Sequence[str], fixed: Sequence[str] = ()
) -> list[str]:
    """The overrides of one trial: the spec's base and budget, the sampled point, then the
    sweep's own (``fixed``). Overrides aimed at another algorithm are dropped: Hydra would
    otherwise add that algorithm back to the trial's config."""
    out = []
    for o in [*spec.base_overrides, *spec.budget, *sampled]:
        m = ALG_PATH.match(o.lstrip("+~"))
        if m and m.group(1) != algorithm:
            continue
        out.append(o)
    starts = [f"seeds={spec.starts}"]
    if spec.starts > 1:  # independent starts: each seed trains its own
        starts.append("warmstart.per_seed=true")
    return [*out, *starts, f"algorithm=[{algorithm}]", "suite.report=false", *fixed]


def _has_path(cfg: Any, path: str) -> tuple[bool, str, list[str]]:
    """Whether ``path`` exists in ``cfg``; else the deepest existing prefix and its keys."""
    from omegaconf import DictConfig

    node, seen = cfg, []
    for part in path.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            keys = sorted(str(k) for k in node.keys()) if isinstance(node, DictConfig) else []
            return False, ".".join(seen) or "<root>", keys
        node, seen = node[part], [*seen, part]
    return True, path, []


def task_eval_name(task: Any) -> str:
    """The name the built task's whole eval set has in metric keys (``eval/<name>/accuracy``),
    read from the task's config node alone: the spec is checked before any trial, without
    generating or loading the task's problems. Each task's own default: the task's name for
    arith, the dataset's for Reasoning Gym, the first eval set's for a real dataset."""
    if task.get("eval_name"):
        return str(task["eval_name"])
    if task["name"] == "reasoning_gym":
        return str(task["dataset"])
    if task["name"] == "arith":
        return "arith"
    return str((list(task.get("eval_datasets") or []) or [task["name"]])[0])


def _sampled_paths(spec: SweepSpec, alg: str, cfg: Any) -> list[str]:
    """The overrides of the search space's representative point for ``alg``, once each path is
    found in the composed config, or is a field of the algorithm's config (an algorithm YAML
    lists only what it changes, so ``algorithm.<alg>.params.*`` may be absent)."""
    import dataclasses

    from algorithms import algorithm_class

    sampled = []
    for p in spec.params_for(alg):
        path = p.name(alg)
        ok, prefix, keys = _has_path(cfg, path)
        m = re.match(rf"^algorithm\.{re.escape(alg)}\.params\.([A-Za-z0-9_]+)$", path)
        if not ok and m:
            fields = [f.name for f in dataclasses.fields(algorithm_class(alg).Config)]
            if m.group(1) not in fields:
                raise fail(f"search_space.{p.path}", path, f"{alg} has no such parameter", fields)
            ok = True
        if not ok:
            raise fail(
                f"search_space.{p.path}",
                path,
                f"no such key in {alg}'s composed config (under {prefix})",
                keys,
            )
        sampled.append(p.override(alg, p.representative()))
    return sampled


def check_spec(spec: SweepSpec, fixed: Sequence[str] = ()) -> dict[str, Any]:
    """Compose each algorithm's trial config and check the spec against it, before any trial.

    Checks every search-space path exists (or is a field of the algorithm's config, for
    ``algorithm.<alg>.params.*``), the metric is the task's, and the search space's
    representative point (each low end, each first choice) passes the suite's own validation.
    Returns the composed config per algorithm (at that point).
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from benchmarks.config import compose_config
    from benchmarks.suite.plan import validate

    errors = (HydraException, OmegaConfBaseException, ValueError, KeyError)
    configs: dict[str, Any] = {}
    for alg in spec.algorithms:
        try:
            cfg = compose_config(trial_overrides(spec, alg, [], fixed))
        except errors as e:
            raise SpecError(
                f"base_overrides/budget/algorithms (composing {alg}'s config): {_short(e)}"
            ) from e
        sampled = _sampled_paths(spec, alg, cfg)
        allowed = ["auc", f"eval/{task_eval_name(cfg.task)}/accuracy"]
        if spec.objective.metric not in allowed:
            raise fail(
                "objective.metric",
                spec.objective.metric,
                f"unknown metric for task {str(cfg.task.name)!r}",
                allowed,
            )
        try:
            point = compose_config(trial_overrides(spec, alg, sampled, fixed))
            validate(point)
        except errors as e:
            raise SpecError(
                f"search_space: the point {sampled} fails the suite's validation for {alg}: "
                f"{_short(e)} (restrict a parameter with when_algorithm, or change its range)"
            ) from e
        configs[alg] = point
    return configs


def _short(e: Exception) -> str:
    msg = str(e).strip().splitlines()
    return msg[0] if msg else type(e).__name__
