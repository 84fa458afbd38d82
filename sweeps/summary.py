"""What a sweep leaves: the best trial per algorithm, every trial as a row, the parameter
importances, and ``sweep_summary.md`` / ``.json`` logged to the parent run.

:func:`best_trials` and :func:`trial_rows` read the studies from the storage, so the summary at
the end of a sweep and the tuning export (:mod:`sweeps.export`) report the same trials.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from mlflow.entities import Metric
from optuna.importance import FanovaImportanceEvaluator, get_param_importances
from optuna.trial import TrialState

from analysis import to_markdown
from sweeps.spec import SweepSpec
from sweeps.storage import ATTR_ADMISSIBLE, ATTR_ERROR, Studies, interrupted

__all__ = [
    "BestTrial",
    "SweepResult",
    "best_trials",
    "render_markdown",
    "trial_rows",
    "write_summary",
]


@dataclass
class BestTrial:
    """The best complete trial of one algorithm (None fields: no trial completed)."""

    algorithm: str
    study: str
    value: float | None
    number: int | None
    params: dict[str, Any]
    mlflow_run_id: str | None
    complete: int
    pruned: int
    failed: int
    #: Complete trials that met the spec's ``admissible`` rule (all complete ones without one).
    admissible: int = 0


@dataclass
class SweepResult:
    """What a sweep leaves: where everything is, the best trial per algorithm, importances."""

    name: str
    studies: list[str]
    storage: str
    tracking_uri: str
    experiment: str
    parent_run_id: str
    output_dir: Path
    metric: str
    direction: str
    best: list[BestTrial] = field(default_factory=list)
    #: Study -> parameter -> importance, or study -> why none could be computed.
    importances: dict[str, dict[str, float] | str] = field(default_factory=dict)
    states: dict[str, int] = field(default_factory=dict)
    #: Every trial, in study order: its state, value, per-start values, admissibility metrics.
    trials: list[dict[str, Any]] = field(default_factory=list)
    trials_run: int = 0
    wall_s: float = 0.0
    summary_md: Path | None = None
    summary_json: Path | None = None

    @property
    def dashboard_command(self) -> str:
        """How to open the storage in optuna-dashboard (extra ``dashboard``)."""
        return f"optuna-dashboard {self.storage}"


def _short_name(name: str, algorithm: str) -> str:
    return name.removeprefix(f"algorithm.{algorithm}.")


def best_trials(spec: SweepSpec, studies: Mapping[str, tuple[Any, str | None]]) -> list[BestTrial]:
    """Per algorithm, the trial the sweep ships: the best complete admissible one (None when it
    has none yet), with its trial counts. The summary and the tuning export both read this.

    An exact tie (an accuracy over a finite eval set ties) goes to the point tried first: the
    spec's enqueue order, then the sampler's. The first attempt counts, failed or not, so the
    order in which interruptions let trials complete cannot decide it."""
    sign = 1.0 if spec.objective.direction == "maximize" else -1.0
    best: list[BestTrial] = []
    for name, (study, fixed_alg) in studies.items():
        trials = study.get_trials(deepcopy=False)
        for alg in [fixed_alg] if fixed_alg else spec.algorithms:
            mine = trials if fixed_alg else [t for t in trials if t.params.get("algorithm") == alg]
            done = [t for t in mine if t.state == TrialState.COMPLETE and t.value is not None]
            counted = [t for t in done if t.user_attrs.get(ATTR_ADMISSIBLE, True)]
            first: dict[tuple[Any, ...], int] = {}
            for t in sorted(mine, key=lambda t: t.number):
                first.setdefault(_point(t), t.number)
            top = max(counted, key=lambda t: (sign * t.value, -first[_point(t)]), default=None)
            best.append(
                BestTrial(
                    algorithm=alg,
                    study=name,
                    value=None if top is None else float(top.value),
                    number=None if top is None else top.number,
                    params={}
                    if top is None
                    else {
                        _short_name(k, alg): v for k, v in top.params.items() if k != "algorithm"
                    },
                    mlflow_run_id=None if top is None else top.user_attrs.get("mlflow_run_id"),
                    complete=len(done),
                    admissible=len(counted),
                    pruned=sum(t.state == TrialState.PRUNED for t in mine),
                    failed=sum(t.state == TrialState.FAIL and not interrupted(t) for t in mine),
                )
            )
    return best


def _point(trial: Any) -> tuple[Any, ...]:
    """A trial's point in the search space, as a key."""
    return tuple(sorted(trial.params.items()))


def _summarize(
    spec: SweepSpec, studies: Mapping[str, tuple[Any, str | None]]
) -> tuple[list[BestTrial], dict[str, dict[str, float] | str], dict[str, int]]:
    """Best complete trial per algorithm, fANOVA importances per study, trial counts by state."""
    best = best_trials(spec, studies)
    importances: dict[str, dict[str, float] | str] = {}
    states: dict[str, int] = {}
    for name, (study, _) in studies.items():
        trials = study.get_trials(deepcopy=False)
        for t in trials:
            states[t.state.name] = states.get(t.state.name, 0) + 1
        n_done = sum(t.state == TrialState.COMPLETE for t in trials)
        if n_done < 2:
            importances[name] = f"needs at least 2 complete trials, has {n_done}"
            continue
        try:
            imp = get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=spec.seed))
            # Optuna reads only parameters whose range is the same in every complete trial: a
            # range widened on --resume leaves none.
            importances[name] = {k: float(v) for k, v in imp.items()} or (
                "no parameter has the same range in every complete trial"
            )
        except (ValueError, RuntimeError, optuna.exceptions.OptunaError) as e:
            same = "zero total variance" in str(e)
            importances[name] = (
                "all complete trials scored the same" if same else f"not computable: {e}"
            )
    return best, importances, states


def trial_rows(spec: SweepSpec, studies: Mapping[str, tuple[Any, str | None]]) -> list[dict]:
    """One row per trial: what the per-trial table of the summary shows."""
    rows = []
    for name, (study, fixed_alg) in studies.items():
        for t in study.get_trials(deepcopy=False):
            alg = fixed_alg or t.params.get("algorithm") or t.user_attrs.get("algorithm", "")
            rules = spec.admissible_for(alg)
            rows.append(
                {
                    "study": name,
                    "algorithm": alg,
                    "number": t.number,
                    "state": t.state.name,
                    "error": t.user_attrs.get(ATTR_ERROR),
                    "interrupted": interrupted(t),
                    "value": t.value,
                    "values_per_start": t.user_attrs.get("values_per_start"),
                    "admissible": t.user_attrs.get(ATTR_ADMISSIBLE) if rules else None,
                    "finals": {m: t.user_attrs.get(f"final/{m}") for m in rules},
                    "finals_per_start": {
                        m: t.user_attrs.get(f"final_per_start/{m}") or {} for m in rules
                    },
                    "params": {
                        _short_name(k, alg): v for k, v in t.params.items() if k != "algorithm"
                    },
                }
            )
    return rows


def _per_start_text(per_start: Mapping[str, float] | None) -> str:
    """`` (s0 0.239 / s1 -0.013)`` for a trial over several starts; empty for one."""
    if not per_start or len(per_start) < 2:
        return ""
    return " (" + " / ".join(f"{s} {v:.3f}" for s, v in per_start.items()) + ")"


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


#: The columns of the two tables (named also when there is no row).
_BEST_COLUMNS = "algorithm best trial complete admissible pruned failed parameters".split()
_TRIAL_COLUMNS = [
    *"algorithm trial state value".split(),
    *("per start", "admissible", "final metrics", "parameters"),
]


def _params_text(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in params.items()) or "-"


def _best_table(best: list[BestTrial]) -> pd.DataFrame:
    """The best trial per algorithm; the trial counts stay numbers (right-aligned by
    :func:`analysis.to_markdown`), the rest is the summary's own text."""
    rows = [
        {
            "algorithm": b.algorithm,
            "best": "-" if b.value is None else f"{b.value:.4f}",
            "trial": "-" if b.number is None else str(b.number),
            "complete": b.complete,
            "admissible": b.admissible,
            "pruned": b.pruned,
            "failed": b.failed,
            "parameters": _params_text(b.params),
        }
        for b in best
    ]
    return pd.DataFrame(rows, columns=_BEST_COLUMNS)


def _trials_table(trials: list[dict[str, Any]]) -> pd.DataFrame:
    """Every trial, one row each, as the summary's text."""
    rows = []
    for r in trials:
        per = r["values_per_start"]
        finals = ", ".join(
            f"{k}={'-' if v is None else f'{v:.3f}'}"
            + _per_start_text(r["finals_per_start"].get(k))
            for k, v in r["finals"].items()
        )
        rows.append(
            {
                "algorithm": r["algorithm"],
                "trial": str(r["number"]),
                "state": r["state"],
                "value": "-" if r["value"] is None else f"{r['value']:.4f}",
                "per start": "-" if not per else " / ".join(f"{v:.3f}" for v in per),
                "admissible": {None: "-", True: "yes", False: "no"}[r["admissible"]],
                "final metrics": finals or "-",
                "parameters": _params_text(r["params"]),
            }
        )
    return pd.DataFrame(rows, columns=_TRIAL_COLUMNS)


def render_markdown(result: SweepResult) -> str:
    """The best-trial table, every trial and the importances, as Markdown (logged to the parent
    run); the tables are written by :func:`analysis.to_markdown`."""
    lines = [
        f"# Sweep {result.name}",
        "",
        f"Objective: `{result.metric}` ({result.direction}). Storage: `{result.storage}` "
        f"(open with `{result.dashboard_command}`). Trials by state: "
        + ", ".join(f"{k} {v}" for k, v in sorted(result.states.items())),
        "",
        "## Best trial per algorithm",
        "",
        to_markdown(_best_table(result.best)).rstrip("\n"),
    ]
    if result.trials:
        lines += [
            "",
            "## Every trial",
            "",
            "Admissible: every start of the trial reaches the spec's `admissible` minimums, "
            "each start's runs averaged, as analysis.claims.gates reads them (the weakest "
            "start's value shown, each start's in brackets): a critic's prompt-level Pearson "
            "(`critic_gate`) as the claims' critic gate, each run's late-eval mean against "
            "the threshold calibrated on the inert critic; any other metric its final value. "
            "Only admissible trials can be best. Per start: the objective of each independent "
            "start.",
            "",
            to_markdown(_trials_table(result.trials)).rstrip("\n"),
        ]
    lines += ["", "## Parameter importances (fANOVA)", ""]
    for study, imp in result.importances.items():
        if isinstance(imp, str):
            lines.append(f"- `{study}`: {imp}")
            continue
        lines.append(f"- `{study}`: " + ", ".join(f"{k} {v:.3f}" for k, v in imp.items()))
    return "\n".join(lines) + "\n"


def write_summary(
    result: SweepResult, spec: SweepSpec, opened: Studies, client: Any, t0: float
) -> None:
    """Fill ``result`` with the best trial per algorithm, the importances and the trial counts,
    write ``sweep_summary.md`` and ``.json``, and log both and the best values to the parent run.

    The studies are reloaded from the storage: the workers' trials are not in the main
    process's study objects.
    """
    fresh = {
        s: (optuna.load_study(study_name=s, storage=opened.storage), a)
        for s, (_, a) in opened.studies.items()
    }
    result.best, result.importances, result.states = _summarize(spec, fresh)
    result.trials = trial_rows(spec, fresh)
    result.wall_s = time.perf_counter() - t0
    result.output_dir.mkdir(parents=True, exist_ok=True)
    result.summary_md = result.output_dir / "sweep_summary.md"
    result.summary_md.write_text(render_markdown(result))
    result.summary_json = result.output_dir / "sweep_summary.json"
    result.summary_json.write_text(json.dumps(_jsonable(result), indent=2))
    client.log_artifact(result.parent_run_id, str(result.summary_md), "sweep")
    client.log_artifact(result.parent_run_id, str(result.summary_json), "sweep")
    ts = int(time.time() * 1000)
    metrics = [
        Metric(f"sweep/best/{b.algorithm}", b.value, ts, 0)
        for b in result.best
        if b.value is not None
    ]
    metrics.append(Metric("sweep/wall_s", result.wall_s, ts, 0))
    client.log_batch(result.parent_run_id, metrics=metrics)


def _jsonable(result: SweepResult) -> dict[str, Any]:
    """``result`` as JSON-ready values (paths as strings), with the dashboard command."""
    d = asdict(result)
    for k in ("output_dir", "summary_md", "summary_json"):
        d[k] = None if d[k] is None else str(d[k])
    d["dashboard_command"] = result.dashboard_command
    return json.loads(json.dumps(d, default=str))
