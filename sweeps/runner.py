"""Run a sweep: Optuna studies over the suite, W worker processes, one MLflow parent run.

Optuna is used directly, not through Hydra's Optuna sweeper (which needs optuna<3). Each trial
composes its config with Hydra (the spec's base overrides, the sampled point, one seed, one
algorithm), runs the normal training path (``run_suite``) as an MLflow child run of the sweep's
parent run, reports its evaluations to Optuna (``trial.report(value, step=<eval index>)``) and
stops when the pruner says so.

Choices worth knowing:

- Equal effort: with ``equal_effort: true`` each algorithm has its own study (``<name>-<alg>``)
  and ``trials / len(algorithms)`` trials. A study per algorithm (rather than a round-robin over a
  categorical in one study) keeps the sampler's model, the median pruner's comparison and the
  importances within one algorithm, so a weak algorithm's trials are not pruned for being that
  algorithm. Without it, one study samples ``algorithm`` like any categorical.
- Exact trial counts: the main process creates the studies and computes how many trials are
  missing; each missing trial is one task for the worker pool (``study.optimize(n_trials=1)``),
  so W workers never overshoot. ``--trials N`` counts every trial of the study whatever its
  state (COMPLETE, PRUNED, FAIL) but one an interrupted sweep left RUNNING: ``--resume`` marks
  such a trial FAIL (user attr ``error`` starting "interrupted"), does not count it, queues its
  point again when it was a queued one, and runs the rest, so a sweep killed mid-trial (a session
  that ends) loses no point of its grid. Several ``--resume`` processes (on several
  machines) may share one RDB storage: a running trial records a heartbeat, a trial with a fresh
  one is left to its process, and a task that finds its study full runs nothing (two processes
  that check the last free slot at the same instant may still run one trial too many).
- Reports: the evaluation at budget fraction 0 is not reported. It is the shared warm start, the
  same for every trial, and Optuna's median pruner compares a trial's best value so far: with
  it, a run that collapses from the start would still look as good as the start.
- Failures: a trial whose run fails (or whose config fails) is FAIL with its error in the user
  attr ``error``, and the study goes on. A pruned trial's MLflow run ends KILLED, tagged
  ``trial_state=PRUNED``.
- Storage: ``sqlite:///...`` (RDB, with a 60 s busy timeout and retries for "database is
  locked"), any other SQLAlchemy URL, or a file path for Optuna's JournalStorage (the choice when
  the storage sits on NFS). The MLflow store and experiment, and the Optuna studies, are created
  once by the main process before any worker starts.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import multiprocessing as mp
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.telemetry.tracking import retry_locked
from sweeps.spec import SAMPLERS, SpecError, SweepSpec, check_spec, trial_overrides

__all__ = [
    "TAG_STUDY",
    "TAG_TRIAL",
    "TAG_TRIAL_STATE",
    "BestTrial",
    "MlflowTrialCallback",
    "SweepResult",
    "make_pruner",
    "make_sampler",
    "make_storage",
    "objective_value",
    "render_markdown",
    "run_sweep",
]

log = logging.getLogger(__name__)

#: Tags on each trial's MLflow child run.
TAG_STUDY = "study_name"
TAG_TRIAL = "trial_number"
TAG_TRIAL_STATE = "trial_state"
_ATTR_PARENT = "mlflow_parent_run_id"
_ATTR_ERROR = "error"
_INTERRUPTED = "interrupted"
_ATTR_ADMISSIBLE = "admissible"


#: A running trial's process records a heartbeat in an RDB storage this often (seconds); a
#: RUNNING trial whose last one is older than the grace period belongs to a dead process. Other
#: sweep processes sharing the storage (``--resume`` on several machines) leave a trial with a
#: fresh heartbeat alone.
HEARTBEAT_S = 10
HEARTBEAT_GRACE_S = 60
#: A RUNNING trial younger than this (seconds) belongs to a live process even before its first
#: heartbeat: two ``--resume`` processes starting together would otherwise fail each other's.
NEW_TRIAL_S = 5.0


class TrialFailed(RuntimeError):
    """The suite recorded the trial's run as FAILED (it catches run errors itself)."""


# --------------------------------------------------------------------------- Optuna factories


def make_storage(url: str) -> Any:
    """An Optuna storage for ``url``: an RDB URL (``sqlite:///optuna.db``, ``postgresql://``),
    or a file path (optionally ``journal:<path>``) for JournalStorage. A database server is
    probed first, so one that does not answer fails in seconds naming ``--storage``
    (:class:`SpecError`), and ``postgresql://`` takes the driver installed here."""
    import optuna

    from benchmarks.telemetry.store import PreflightError, check_database, database_uri

    if "://" in url:
        kwargs: dict[str, Any] | None = None
        url = database_uri(url)
        if not url.startswith("sqlite:"):
            try:
                check_database("--storage", url)
            except PreflightError as e:
                raise SpecError(str(e)) from e
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
            # Several workers write to one file: wait for the lock instead of failing at once.
            kwargs = {"connect_args": {"timeout": 60}}
        with warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.9
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return retry_locked(
                lambda: optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=kwargs,
                    heartbeat_interval=HEARTBEAT_S,
                    grace_period=HEARTBEAT_GRACE_S,
                ),
                "open storage",
            )
    from optuna.storages.journal import JournalFileBackend

    path = Path(url.removeprefix("journal:"))
    path.parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


def make_sampler(spec: SweepSpec, seed: int) -> Any:
    """The spec's sampler (Optuna 5 factories are keyword-only) with ``seed``. Trials of an
    ``admissible`` spec set their constraints themselves (``Trial.set_constraint``), which TPE
    and GP read."""
    import optuna

    cls = getattr(optuna.samplers, SAMPLERS[spec.sampler.type][0])
    return cls(seed=seed, **spec.sampler.kwargs)


def make_pruner(spec: SweepSpec) -> Any:
    """The spec's pruner; ``none`` is Optuna's NopPruner."""
    import optuna

    kind = spec.pruner.type
    if kind == "none":
        return optuna.pruners.NopPruner()
    cls = optuna.pruners.MedianPruner if kind == "median" else optuna.pruners.HyperbandPruner
    return cls(**spec.pruner.kwargs)


# --------------------------------------------------------------------------- objective


def objective_value(metric: str, evals: Sequence[tuple[float, float]]) -> float:
    """The objective from (budget fraction, accuracy) pairs so far.

    ``auc``: trapezoidal area under accuracy versus budget fraction, divided by the fractions it
    covers (1 when the evaluations include 0 and 1), so it reads as a mean accuracy in [0, 1].
    Any ``eval/<task>/accuracy``: the last accuracy. Reported at every evaluation, each value is
    what the objective would be if the budget ended there.
    """
    if not evals:
        raise TrialFailed("the run made no evaluation")
    if metric != "auc" or len(evals) == 1:
        return float(evals[-1][1])
    area = sum(
        (f1 - f0) * (a0 + a1) / 2 for (f0, a0), (f1, a1) in zip(evals, evals[1:], strict=False)
    )
    span = evals[-1][0] - evals[0][0]
    return float(area / span) if span > 0 else float(sum(a for _, a in evals) / len(evals))


@dataclass(frozen=True)
class _Context:
    """What every trial of one sweep shares; picklable, sent to each worker."""

    spec: SweepSpec
    storage: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    fixed: tuple[str, ...]
    log_level: int = logging.INFO


class _Objective:
    """One trial: compose the config, run the suite for one algorithm and seed, report evals."""

    def __init__(self, ctx: _Context, study_name: str, algorithm: str | None) -> None:
        self.ctx, self.study_name, self.algorithm = ctx, study_name, algorithm

    def __call__(self, trial: Any) -> float:
        import optuna

        from benchmarks.config import compose_config
        from benchmarks.suite.run import run_suite

        spec = self.ctx.spec
        try:
            alg = self.algorithm or trial.suggest_categorical("algorithm", list(spec.algorithms))
            sampled = [p.override(alg, p.suggest(trial, alg)) for p in spec.params_for(alg)]
            trial.set_user_attr("algorithm", alg)
            trial.set_user_attr("overrides", sampled)
            cfg = compose_config(trial_overrides(spec, alg, sampled, self.ctx.fixed))
            evals: dict[int, list[tuple[float, float]]] = {}

            def on_eval(_alg: str, seed: int, fraction: float, accuracy: float) -> None:
                mine = evals.setdefault(seed, [])
                mine.append((fraction, accuracy))
                if fraction <= 0.0 or spec.starts > 1:
                    # fraction 0: the warm start, the same for every trial; several starts:
                    # the value is their mean, known at the end (the spec allows no pruner)
                    return
                value = objective_value(spec.objective.metric, mine)
                trial.report(value, step=len(mine) - 1)
                if trial.should_prune():
                    raise optuna.TrialPruned(
                        f"pruned at evaluation {len(mine) - 1} (budget fraction {fraction:.3g}), "
                        f"{spec.objective.metric}={value:.4f}"
                    )

            result = run_suite(
                cfg,
                progress=False,
                parent_run_id=self.ctx.parent_run_id,
                extra_tags={TAG_TRIAL: str(trial.number), TAG_STUDY: self.study_name},
                on_eval=on_eval,
            )
            ids = [r.run_id for r in result.runs if r.run_id]
            if ids:
                trial.set_user_attr("mlflow_run_id", ids[0])
                trial.set_user_attr("mlflow_run_ids", ids)
            failed = [r for r in result.runs if r.status != "FINISHED"]
            if failed:
                raise TrialFailed(failed[0].error or f"run ended {failed[0].status}")
            per_start = [objective_value(spec.objective.metric, evals[s]) for s in sorted(evals)]
            trial.set_user_attr("values_per_start", per_start)
            self._check_admissible(trial, alg, ids)
            return float(sum(per_start) / len(per_start))
        except optuna.TrialPruned:
            raise
        except Exception as e:
            trial.set_user_attr(_ATTR_ERROR, f"{type(e).__name__}: {e}"[:2000])
            raise

    def _check_admissible(self, trial: Any, algorithm: str, run_ids: Sequence[str]) -> None:
        """Record the spec's ``admissible`` metrics, whether the trial reaches every minimum, and
        the constraint values the sampler reads (``Trial.set_constraint``, <= 0: feasible).

        Each metric is read per start as the claims' gates read it (:mod:`analysis.claims.gates`,
        the one implementation of "can this testbed separate the algorithms"), at the trial's
        weakest start. A critic (``critic_gate``) is the claims' critic gate itself
        (:func:`analysis.claims.gates.critic_gate`): its prompt-level Pearson, per run the mean of
        the second half of its evals, per start the mean over its runs, against the threshold
        calibrated on the inert critic. Any other metric: its final value, per start the mean
        over its runs (:func:`final_per_start`), against the spec's minimum. Why the weakest
        start and not the claims' 95% lower bound over starts: a trial has two starts, where the
        bound has t = 6.31 and admits almost nothing, and the screen's two starts are fixed, so
        its pass rate does not fall as a suite adds starts. A metric a run never logged counts as
        missed."""
        rules = self.ctx.spec.admissible_for(algorithm)
        if not rules:
            return
        from mlflow.tracking import MlflowClient

        from analysis.claims.gates import CRITIC_PEARSON_MIN, critic_gate, start_gate
        from benchmarks.telemetry import metrics as M
        from sweeps.spec import CRITIC_GATE

        client = MlflowClient(self.ctx.tracking_uri)
        runs = [(rid, client.get_run(rid).data) for rid in run_ids]
        finals = [(d.tags.get(M.TAG_START, ""), d.metrics) for _, d in runs]
        ok = True
        for metric, minimum in rules.items():
            if minimum == CRITIC_GATE:
                histories = [
                    (d.tags.get(M.TAG_START, ""), _history(client, rid, metric)) for rid, d in runs
                ]
                per_start = late_per_start(histories)
                gate = critic_gate(metric, per_start, confidence=None)
                threshold = CRITIC_PEARSON_MIN
            else:
                per_start = final_per_start(finals, metric)
                threshold = float(minimum)
                gate = start_gate(metric, per_start, threshold, confidence=None)
            value = gate.value if per_start else None
            trial.set_user_attr(f"final/{metric}", value)
            trial.set_user_attr(f"final_per_start/{metric}", per_start)
            ok = ok and gate.passes
            margin = 1.0 if value is None or not math.isfinite(value) else threshold - value
            trial.set_constraint(metric, margin)
        trial.set_user_attr(_ATTR_ADMISSIBLE, ok)


def _history(client: Any, run_id: str, metric: str) -> list[float]:
    """A run's logged values of ``metric`` in step order (empty: never logged)."""
    points = client.get_metric_history(run_id, metric)
    return [m.value for m in sorted(points, key=lambda m: (m.step, m.timestamp))]


def late_per_start(runs: Sequence[tuple[str, Sequence[float]]]) -> dict[str, float]:
    """A critic metric per start as the claims' critic gate reads it
    (:func:`analysis.claims.gates.late_means_per_start`), from (start, the run's values in step
    order) pairs, one per run; empty when any run never logged it (the trial then misses)."""
    from analysis.claims.gates import late_means_per_start

    if not runs or any(not len(values) for _, values in runs):
        return {}
    return late_means_per_start(runs)


def final_per_start(
    finals: Sequence[tuple[str, Mapping[str, float]]], metric: str
) -> dict[str, float]:
    """``metric``'s final value per start, averaged over the start's runs
    (:func:`analysis.claims.gates.per_start_means`), from (start, final metrics) pairs, one per run;
    empty when any run lacks the metric (the trial then misses)."""
    from analysis.claims.gates import per_start_means

    if not finals or any(metric not in m for _, m in finals):
        return {}
    return per_start_means((start, float(m[metric])) for start, m in finals)


# --------------------------------------------------------------------------- MLflow callback


class MlflowTrialCallback:
    """Mirror each finished trial onto its MLflow child run (an Optuna ``callbacks`` entry).

    The suite creates the child run and ends it FINISHED or FAILED; this adds what only Optuna
    knows afterwards: tag ``trial_state`` (COMPLETE, PRUNED, FAIL), the sampled parameters as
    params ``optuna.<name>``, metric ``sweep/objective``, status KILLED for a pruned run, and a
    placeholder run for a trial that failed before its run existed, so every trial has one.
    Written here because optuna-integration's MLflowCallback is deprecated; it never raises.
    """

    def __init__(self, tracking_uri: str, experiment_id: str, parent_run_id: str) -> None:
        self.tracking_uri, self.experiment_id = tracking_uri, experiment_id
        self.parent_run_id = parent_run_id

    def __call__(self, study: Any, trial: Any) -> None:
        try:
            self._mirror(study.study_name, trial)
        except Exception as e:  # tracking trouble must not end the study
            log.warning("MLflow: could not record trial %d: %s", trial.number, e)

    def _mirror(self, study_name: str, trial: Any) -> None:
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        from benchmarks.telemetry import metrics as M

        client = MlflowClient(self.tracking_uri)
        state = trial.state.name
        runs = client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.{TAG_STUDY} = '{study_name}' AND tags.{TAG_TRIAL} = '{trial.number}'",
        )
        ids = [r.info.run_id for r in runs]
        error = trial.user_attrs.get(_ATTR_ERROR)
        if not ids:
            alg = trial.user_attrs.get("algorithm") or trial.params.get("algorithm", "")
            run = client.create_run(
                self.experiment_id,
                run_name=f"trial-{trial.number}-{alg}".rstrip("-"),
                tags={
                    MLFLOW_PARENT_RUN_ID: self.parent_run_id,
                    M.TAG_ROLE: "trial",
                    M.TAG_ALGORITHM: str(alg),
                    TAG_STUDY: study_name,
                    TAG_TRIAL: str(trial.number),
                },
            )
            ids = [run.info.run_id]
        ts = int(time.time() * 1000)
        for rid in ids:
            tags = [RunTag(TAG_TRIAL_STATE, state)]
            if error:
                tags.append(RunTag("error", str(error)[:5000]))
            params = [Param(f"optuna.{k}", str(v)[:6000]) for k, v in trial.params.items()]
            metrics = []
            if trial.value is not None and math.isfinite(trial.value):
                metrics.append(Metric("sweep/objective", float(trial.value), ts, 0))
            client.log_batch(rid, metrics=metrics, params=params, tags=tags)
            status = client.get_run(rid).info.status
            if state == "PRUNED":
                client.set_terminated(rid, "KILLED")
            elif state == "FAIL" and status in ("RUNNING", "SCHEDULED"):
                client.set_terminated(rid, "FAILED")


# --------------------------------------------------------------------------- one trial (a task)


def _init_worker(level: int) -> None:
    """Logging in a spawned worker (it inherits no configuration)."""
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s"
    )
    for noisy in ("alembic", "mlflow", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _run_trial(ctx: _Context, study_name: str, algorithm: str | None, seed: int) -> dict[str, Any]:
    """Run one trial of ``study_name`` (in a worker process, or in-process for one worker)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.perf_counter()
    storage = make_storage(ctx.storage)
    study = retry_locked(
        lambda: optuna.load_study(
            study_name=study_name,
            storage=storage,
            sampler=make_sampler(ctx.spec, seed),
            pruner=make_pruner(ctx.spec),
        ),
        "load study",
    )
    target = ctx.spec.trials // len(ctx.spec.studies)
    held = sum(t.state.name != "WAITING" and not _interrupted(t) for t in _study_trials(study))
    if held >= target:  # another sweep process sharing the storage filled it meanwhile
        log.info(
            "%s holds %d trials (of %d) already: this task runs none", study_name, held, target
        )
        return {"study": study_name, "number": None, "state": "SKIPPED", "value": None}
    finished: list[Any] = []
    study.optimize(
        _Objective(ctx, study_name, algorithm),
        n_trials=1,
        catch=(Exception,),
        callbacks=[
            MlflowTrialCallback(ctx.tracking_uri, ctx.experiment_id, ctx.parent_run_id),
            lambda _study, trial: finished.append(trial),
        ],
    )
    last = finished[-1]
    out = {
        "study": study_name,
        "number": last.number,
        "state": last.state.name,
        "value": last.value,
        "algorithm": last.user_attrs.get("algorithm", algorithm),
        "params": dict(last.params),
        "wall_s": time.perf_counter() - t0,
    }
    log.info(
        "%s trial %d (%s): %s%s in %.0f s",
        study_name,
        out["number"],
        out["algorithm"],
        out["state"],
        "" if out["value"] is None else f" {out['value']:.4f}",
        out["wall_s"],
    )
    return out


# --------------------------------------------------------------------------- results


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
    has none yet), with its trial counts. The summary and the tuning export both read this."""
    from optuna.trial import TrialState

    sign = 1.0 if spec.objective.direction == "maximize" else -1.0
    best: list[BestTrial] = []
    for name, (study, fixed_alg) in studies.items():
        trials = study.get_trials(deepcopy=False)
        for alg in [fixed_alg] if fixed_alg else spec.algorithms:
            mine = trials if fixed_alg else [t for t in trials if t.params.get("algorithm") == alg]
            done = [t for t in mine if t.state == TrialState.COMPLETE and t.value is not None]
            counted = [t for t in done if t.user_attrs.get(_ATTR_ADMISSIBLE, True)]
            top = max(counted, key=lambda t: sign * t.value, default=None)
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
                    failed=sum(t.state == TrialState.FAIL and not _interrupted(t) for t in mine),
                )
            )
    return best


def _summarize(
    spec: SweepSpec, studies: Mapping[str, tuple[Any, str | None]]
) -> tuple[list[BestTrial], dict[str, dict[str, float] | str], dict[str, int]]:
    """Best complete trial per algorithm, fANOVA importances per study, trial counts by state."""
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances
    from optuna.trial import TrialState

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
                    "error": t.user_attrs.get(_ATTR_ERROR),
                    "interrupted": _interrupted(t),
                    "value": t.value,
                    "values_per_start": t.user_attrs.get("values_per_start"),
                    "admissible": t.user_attrs.get(_ATTR_ADMISSIBLE) if rules else None,
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


def render_markdown(result: SweepResult) -> str:
    """The best-trial table and the importances, as Markdown (logged to the parent run)."""
    lines = [
        f"# Sweep {result.name}",
        "",
        f"Objective: `{result.metric}` ({result.direction}). Storage: `{result.storage}` "
        f"(open with `{result.dashboard_command}`). Trials by state: "
        + ", ".join(f"{k} {v}" for k, v in sorted(result.states.items())),
        "",
        "## Best trial per algorithm",
        "",
        "| algorithm | best | trial | complete | admissible | pruned | failed | parameters |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in result.best:
        params = ", ".join(f"{k}={_fmt(v)}" for k, v in b.params.items()) or "-"
        value = "-" if b.value is None else f"{b.value:.4f}"
        number = "-" if b.number is None else str(b.number)
        lines.append(
            f"| {b.algorithm} | {value} | {number} | {b.complete} | {b.admissible} | {b.pruned} "
            f"| {b.failed} | {params} |"
        )
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
            "| algorithm | trial | state | value | per start | admissible | final metrics | "
            "parameters |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in result.trials:
            value = "-" if r["value"] is None else f"{r['value']:.4f}"
            per = r["values_per_start"]
            per = "-" if not per else " / ".join(f"{v:.3f}" for v in per)
            ok = {None: "-", True: "yes", False: "no"}[r["admissible"]]
            finals = ", ".join(
                f"{k}={'-' if v is None else f'{v:.3f}'}"
                + _per_start_text(r["finals_per_start"].get(k))
                for k, v in r["finals"].items()
            )
            params = ", ".join(f"{k}={_fmt(v)}" for k, v in r["params"].items()) or "-"
            lines.append(
                f"| {r['algorithm']} | {r['number']} | {r['state']} | {value} | {per} | {ok} | "
                f"{finals or '-'} | {params} |"
            )
    lines += ["", "## Parameter importances (fANOVA)", ""]
    for study, imp in result.importances.items():
        if isinstance(imp, str):
            lines.append(f"- `{study}`: {imp}")
            continue
        lines.append(f"- `{study}`: " + ", ".join(f"{k} {v:.3f}" for k, v in imp.items()))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the sweep


def _given(overrides: Sequence[str], key: str) -> bool:
    return any(o.lstrip("+~").split("=", 1)[0] == key for o in overrides)


@dataclass(frozen=True)
class _Plan:
    """A sweep's settings, resolved and checked: what every later step reads."""

    spec: SweepSpec
    name: str
    storage: str
    tracking_uri: str
    experiment: str
    output_dir: Path
    #: Overrides every trial gets after the sampled point (tracking, output dir, threads).
    fixed: tuple[str, ...]
    workers: int
    #: The base config (the spec's base overrides and budget, the first algorithm).
    base_cfg: Any
    #: The composed config per algorithm, at the search space's representative point.
    configs: dict[str, Any]


@dataclass
class _Studies:
    """The sweep's Optuna storage and its studies (study name -> (study, fixed algorithm))."""

    storage: Any
    studies: dict[str, tuple[Any, str | None]]


def _prepare(
    spec: SweepSpec,
    *,
    trials: int | None,
    workers: int,
    storage: str | None,
    study_name: str | None,
    tracking_uri: str | None,
    extra_overrides: Sequence[str],
) -> _Plan:
    """Resolve the arguments against the spec and check everything that can be wrong.

    Runs before anything is created, so a bad spec, argument or tracking URI raises
    :class:`SpecError` without leaving a storage, a study or an MLflow run behind.
    """
    from benchmarks.config import compose_config
    from benchmarks.telemetry.store import PreflightError, check_tracking_uri, database_uri
    from benchmarks.telemetry.tracking import default_tracking_uri

    if extra_overrides:
        spec = replace(spec, base_overrides=(*spec.base_overrides, *extra_overrides))
    if trials is not None:
        spec = spec.with_trials(trials)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SpecError(f"--workers={workers!r}: must be an integer >= 1")
    name = study_name or spec.name
    if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise SpecError(f"--study-name={name!r}: use letters, digits, '_', '.' or '-'")
    base = spec.base_overrides
    storage = storage or f"sqlite:///{Path.cwd() / 'optuna.db'}"
    try:
        base_cfg = compose_config([*base, *spec.budget, f"algorithm=[{spec.algorithms[0]}]"])
    except Exception as e:
        raise SpecError(f"base_overrides: {str(e).splitlines()[0] if str(e) else e}") from e
    uri = database_uri(tracking_uri or base_cfg.tracking.uri or default_tracking_uri())
    experiment = (
        str(base_cfg.tracking.experiment)
        if _given(base, "tracking.experiment")
        else f"sppo-bench-sweep-{name}"
    )
    out_dir = Path(
        str(base_cfg.output_dir) if _given(base, "output_dir") else f"outputs/sweeps/{name}"
    ).resolve()
    fixed = [f"tracking.uri={uri}", f"tracking.experiment={experiment}", f"output_dir={out_dir}"]
    if workers > 1 and not _given(base, "threads"):
        fixed.append(f"threads={max(1, (os.cpu_count() or 1) // workers)}")  # no oversubscription
    configs = check_spec(spec, fixed)  # every remaining spec error, before anything is created
    try:
        check_tracking_uri(uri, key="--tracking-uri" if tracking_uri else "tracking.uri")
    except PreflightError as e:
        raise SpecError(str(e)) from e
    return _Plan(
        spec=spec,
        name=name,
        storage=storage,
        tracking_uri=uri,
        experiment=experiment,
        output_dir=out_dir,
        fixed=tuple(fixed),
        workers=workers,
        base_cfg=base_cfg,
        configs=configs,
    )


def _open_studies(plan: _Plan, resume: bool) -> _Studies:
    """Create the sweep's studies, or load them with ``resume``, in the main process.

    Done once before any worker starts, so workers only ever load a study (never race to create
    one). A new study gets the spec and the spec's enqueued points; an existing one is refused
    without ``resume`` and checked to optimise in the spec's direction. A resumed study also
    gets the spec's enqueued points it holds no trial for, so extending a queued grid (and
    ``trials``) in the spec and resuming runs only the new points.
    """
    import optuna

    spec, name, direction = plan.spec, plan.name, plan.spec.objective.direction
    opt_storage = make_storage(plan.storage)
    present = set(optuna.get_all_study_names(opt_storage))
    clash = [f"{name}{suffix}" for suffix in spec.studies if f"{name}{suffix}" in present]
    if clash and not resume:
        raise SpecError(
            f"--study-name={name!r}: study {clash[0]!r} already exists in {plan.storage}; pass "
            "--resume to continue it, or another --study-name"
        )
    studies: dict[str, tuple[Any, str | None]] = {}
    for suffix, alg in spec.studies.items():
        sname = f"{name}{suffix}"
        if sname in present:
            study = optuna.load_study(study_name=sname, storage=opt_storage)
            if study.direction.name.lower() != direction:
                raise SpecError(
                    f"objective.direction={direction!r}: study {sname!r} was created to {study.direction.name.lower()}"
                )
        else:
            study = optuna.create_study(study_name=sname, storage=opt_storage, direction=direction)
            study.set_user_attr("spec", spec_dict(spec))
            if alg is not None:
                study.set_user_attr("algorithm", alg)
        for entry in spec.enqueue:
            params = dict(entry)
            if alg is not None and params["algorithm"] != alg:
                continue
            if alg is not None or len(spec.algorithms) == 1:
                params.pop("algorithm")
            # On resume only the points the study has not seen are queued: a grid extended in
            # the spec (more points, more trials) runs just its new points.
            study.enqueue_trial(params, user_attrs={"enqueued": True}, skip_if_exists=True)
        studies[sname] = (study, alg)
    return _Studies(opt_storage, studies)


def spec_dict(spec: SweepSpec) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(spec), default=str))


def _open_parent_run(plan: _Plan, opened: _Studies, resume: bool) -> tuple[Any, str, str]:
    """The MLflow store, the experiment and the sweep's parent run; returns (client, experiment
    id, parent run id).

    Created once in the main process, so workers only add child runs to it. With ``resume`` the
    parent run recorded on the studies is reopened (when it still exists), so a resumed sweep
    stays one run; each study records the parent's id for the next resume.
    """
    from mlflow.entities import Param
    from mlflow.tracking import MlflowClient

    from benchmarks.telemetry import metrics as M
    from benchmarks.telemetry.tracking import flatten, prepare_store

    uri, cfg = plan.tracking_uri, plan.base_cfg
    exp_id = prepare_store(uri, plan.experiment)
    client = MlflowClient(uri)
    parent_id = None
    if resume:
        for study, _ in opened.studies.values():
            rid = study.user_attrs.get(_ATTR_PARENT)
            if rid:
                try:
                    client.get_run(rid)
                    parent_id = rid
                    client.update_run(rid, status="RUNNING")
                    break
                except Exception:
                    log.warning("sweep parent run %s not found in %s; starting a new one", rid, uri)
    if parent_id is None:
        parent = client.create_run(
            exp_id,
            run_name=f"sweep-{plan.name}",
            tags={
                M.TAG_ROLE: "sweep",
                "sweep.name": plan.spec.name,
                "sweep.studies": ",".join(opened.studies),
                "sweep.storage": plan.storage,
                M.TAG_TASK: str(cfg.task.name),
                M.TAG_BUDGET_KIND: str(cfg.budget.kind),
                M.TAG_BUDGET_LIMIT: str(cfg.budget.limit),
            },
        )
        parent_id = parent.info.run_id
        as_dict = spec_dict(plan.spec)
        params = flatten(
            {"sweep": {k: v for k, v in as_dict.items() if k not in ("search_space", "enqueue")}}
        )
        client.log_batch(parent_id, params=[Param(k, v[:6000]) for k, v in params.items()])
        client.log_dict(parent_id, as_dict, "sweep/spec.json")
    for study, _ in opened.studies.values():
        study.set_user_attr(_ATTR_PARENT, parent_id)
    return client, exp_id, parent_id


def _study_trials(study: Any) -> list[Any]:
    return study.get_trials(deepcopy=False)


def _interrupted(trial: Any) -> bool:
    """A trial a killed sweep left RUNNING and ``--resume`` marked FAIL: not a result of its
    point, so it counts neither as a trial nor as a failure."""
    return str(trial.user_attrs.get(_ATTR_ERROR, "")).startswith(_INTERRUPTED)


def _live_trials(storage: Any, study: Any, trials: Sequence[Any]) -> set[int]:
    """Ids of the study's RUNNING trials (of ``trials``) another sweep process is running: those
    whose heartbeat is fresh, and those younger than ``NEW_TRIAL_S``, which have none yet (Optuna
    records the first one just after creating the trial). A storage without heartbeats
    (JournalStorage) has only the young ones: there, every older RUNNING trial counts as
    interrupted. Heartbeats are read from Optuna's table, which its public API only exposes as
    the stale trials."""
    import optuna
    import sqlalchemy
    from optuna.storages._rdb import models

    now = datetime.datetime.now()
    young = {
        t._trial_id
        for t in trials
        if t.datetime_start is not None and (now - t.datetime_start).total_seconds() < NEW_TRIAL_S
    }
    if not isinstance(storage, optuna.storages.RDBStorage) or storage.heartbeat_interval is None:
        return young
    stale = set(storage._get_stale_trial_ids(study._study_id))
    with storage.engine.connect() as conn:
        beating = set(conn.scalars(sqlalchemy.select(models.TrialHeartbeatModel.trial_id)))
    return (beating - stale) | young


def _pending_tasks(
    spec: SweepSpec, opened: _Studies, callback: MlflowTrialCallback
) -> tuple[list[tuple[str, str | None]], int]:
    """The trials still to run, as (study, fixed algorithm) tasks; returns them and how many
    trials the studies already hold.

    Counting here, in the main process, is what makes trial counts exact: each task is one
    ``study.optimize(n_trials=1)``, so W workers never overshoot (and a task finds the study
    full, and runs nothing, when another sweep process sharing the storage filled it). A trial
    an interrupted sweep left RUNNING is marked FAIL first (it would otherwise count as done,
    and never finish), counted as no trial, and its queued point queued again; one whose
    heartbeat is fresh runs in another live sweep process and is counted as it is.
    Tasks go round-robin over the studies, so an interrupted equal-effort sweep leaves the
    algorithms with about the same number of trials.
    """
    import optuna

    opt_storage = opened.storage
    target = spec.trials // len(opened.studies)
    per_study: dict[str, list[tuple[str, str | None]]] = {}
    existing = 0
    for sname, (study, alg) in opened.studies.items():
        trials = _study_trials(study)
        live = _live_trials(opt_storage, study, trials)
        for t in trials:
            if t.state.name == "RUNNING" and t._trial_id not in live:
                why = f"{_INTERRUPTED}: left RUNNING by an earlier sweep process"
                opt_storage.set_trial_user_attr(t._trial_id, _ATTR_ERROR, why)
                study.tell(t.number, state=optuna.trial.TrialState.FAIL)
                callback(study, opt_storage.get_trial(t._trial_id))
                fixed = t.system_attrs.get("fixed_params")
                if fixed:  # a queued grid point: queue it again, or the grid would lose it
                    study.enqueue_trial(dict(fixed), user_attrs={"enqueued": True})
                log.warning("%s trial %d was left RUNNING; marked FAIL, run again", sname, t.number)
        done = [
            t for t in _study_trials(study) if t.state.name != "WAITING" and not _interrupted(t)
        ]
        existing += len(done)
        missing = max(0, target - len(done))
        per_study[sname] = [(sname, alg)] * missing
        if len(done) > target:
            log.warning(
                "%s already holds %d trials (> %d requested); running none",
                sname,
                len(done),
                target,
            )
    tasks: list[tuple[str, str | None]] = []
    for i in range(max((len(v) for v in per_study.values()), default=0)):
        tasks += [v[i] for v in per_study.values() if i < len(v)]
    return tasks, existing


def _prewarm(cfg: Any) -> None:
    """Build the warm starts (one per start of a trial) once in the main process, so W workers
    do not all train them and write the same cache directory at once. Best effort: on failure the first trials build
    it themselves."""
    try:
        import torch

        from benchmarks.suite.plan import validate
        from benchmarks.tasks.base import CharTask
        from benchmarks.training.modeling import build_char_tokenizer
        from benchmarks.training.start import policy_start

        if cfg.model.name_or_path is not None or not cfg.warmstart.enabled:
            return
        plan = validate(cfg)  # builds the task once; the plan holds it
        try:
            if not isinstance(plan.task, CharTask):
                return
            torch.set_num_threads(int(cfg.threads))  # as a trial would (threads per worker)
            tokenizer = build_char_tokenizer(plan.task.alphabet)
            for seed in sorted({plan.start_seed(s) for s in plan.seeds}):
                policy_start(plan.start_recipe, seed, plan.task, tokenizer)
        finally:
            plan.task.close()
    except Exception as e:
        log.warning("could not build the warm start before the workers start (%s); they will", e)


def _ray_trial(ctx: _Context, study_name: str, algorithm: str | None, seed: int) -> dict:
    """:func:`_run_trial` as a Ray task (its worker process configures its own logging)."""
    _init_worker(ctx.log_level)
    return _run_trial(ctx, study_name, algorithm, seed)


def _run_on_ray(
    ctx: _Context,
    tasks: Sequence[tuple[str, str | None]],
    seeds: Sequence[int],
    plan: _Plan,
    address: str,
) -> int:
    """Every task as a Ray task of the cluster at ``address``, ``plan.workers`` in flight, each
    with the trials' ``threads`` CPUs; returns how many ran. A task is not retried when its
    node dies: Optuna would count a second trial; the first stays RUNNING until a
    ``--resume`` marks it FAIL."""
    import ray

    from benchmarks.suite.cluster import connected

    threads = int(next(iter(plan.configs.values())).threads)
    queue = list(zip(tasks, seeds, strict=True))
    ran = 0
    with connected(address, key="--ray-address"):
        trial = ray.remote(_ray_trial).options(num_cpus=threads, max_retries=0)
        pending: list[Any] = []
        while queue or pending:
            while queue and len(pending) < plan.workers:
                (s, a), seed = queue.pop(0)
                pending.append(trial.remote(ctx, s, a, seed))
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
                ran += 1
            except ray.exceptions.RayError as e:  # the task's worker or node died
                log.error("a sweep task failed: %s", str(e).splitlines()[0] if str(e) else e)
    return ran


def _run_tasks(
    ctx: _Context,
    tasks: Sequence[tuple[str, str | None]],
    seeds: Sequence[int],
    plan: _Plan,
    ray_address: str | None = None,
) -> int:
    """Run every task, in-process (one worker), in a pool of spawned workers, or as Ray tasks
    (``ray_address``); returns how many ran.

    Spawned, not forked: a worker starts clean of the main process's torch threads, SQLite
    connections and MLflow client. A trial's own errors are caught inside it (the trial ends
    FAIL); a worker that dies is logged and the other tasks go on.
    """
    ran = 0
    if ray_address is not None and tasks:
        _prewarm(next(iter(plan.configs.values())))  # this node's cache; others build their own
        return _run_on_ray(ctx, tasks, seeds, plan, ray_address)
    if plan.workers > 1 and len(tasks) > 1:
        _prewarm(next(iter(plan.configs.values())))
        with ProcessPoolExecutor(
            max_workers=min(plan.workers, len(tasks)),
            mp_context=mp.get_context("spawn"),
            initializer=_init_worker,
            initargs=(ctx.log_level,),
        ) as pool:
            futures = [
                pool.submit(_run_trial, ctx, s, a, seed)
                for (s, a), seed in zip(tasks, seeds, strict=True)
            ]
            for f in as_completed(futures):
                try:
                    f.result()
                    ran += 1
                except Exception as e:  # the worker itself died; trials inside are caught
                    log.error("a sweep worker failed: %s: %s", type(e).__name__, e)
    else:
        for (s, a), seed in zip(tasks, seeds, strict=True):
            _run_trial(ctx, s, a, seed)
            ran += 1
    return ran


def _write_summary(
    result: SweepResult, spec: SweepSpec, opened: _Studies, client: Any, t0: float
) -> None:
    """Fill ``result`` with the best trial per algorithm, the importances and the trial counts,
    write ``sweep_summary.md`` and ``.json``, and log both and the best values to the parent run.

    The studies are reloaded from the storage: the workers' trials are not in the main
    process's study objects.
    """
    import optuna
    from mlflow.entities import Metric

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


def run_sweep(
    spec: SweepSpec,
    *,
    trials: int | None = None,
    workers: int = 1,
    storage: str | None = None,
    resume: bool = False,
    study_name: str | None = None,
    tracking_uri: str | None = None,
    extra_overrides: Sequence[str] = (),
    ray_address: str | None = None,
) -> SweepResult:
    """Run (or resume) a sweep until its studies hold ``trials`` trials in all.

    Everything that can be wrong with the spec raises :class:`SpecError` before a storage, a
    study or an MLflow run is created. ``workers`` > 1 runs trials in that many spawned
    processes sharing the storage and the MLflow experiment; with ``ray_address`` (``auto`` or
    ``<host>:<port>``) they are ``workers`` tasks at a time of that Ray cluster instead. The
    parent run ends FINISHED, KILLED (interrupted) or FAILED.
    """
    import mlflow  # noqa: F401  (fail early if tracking is not installed)

    if ray_address is not None:
        from benchmarks.suite.cluster import check_ray_address
        from benchmarks.telemetry.store import PreflightError

        try:
            check_ray_address(ray_address, key="--ray-address")
        except PreflightError as e:
            raise SpecError(str(e)) from e

    t0 = time.perf_counter()
    plan = _prepare(
        spec,
        trials=trials,
        workers=workers,
        storage=storage,
        study_name=study_name,
        tracking_uri=tracking_uri,
        extra_overrides=extra_overrides,
    )
    spec = plan.spec
    opened = _open_studies(plan, resume)
    client, exp_id, parent_id = _open_parent_run(plan, opened, resume)
    ctx = _Context(
        spec,
        plan.storage,
        plan.tracking_uri,
        exp_id,
        parent_id,
        plan.fixed,
        logging.getLogger().getEffectiveLevel(),
    )
    result = SweepResult(
        name=plan.name,
        studies=list(opened.studies),
        storage=plan.storage,
        tracking_uri=plan.tracking_uri,
        experiment=plan.experiment,
        parent_run_id=parent_id,
        output_dir=plan.output_dir,
        metric=spec.objective.metric,
        direction=spec.objective.direction,
    )
    status = "FAILED"
    try:
        callback = MlflowTrialCallback(plan.tracking_uri, exp_id, parent_id)
        tasks, existing = _pending_tasks(spec, opened, callback)
        log.info(
            "sweep %s: %d trials to run (%d exist) over %s, %d worker(s); storage %s; MLflow %s run %s",
            plan.name,
            len(tasks),
            existing,
            list(opened.studies),
            plan.workers,
            plan.storage,
            plan.tracking_uri,
            parent_id,
        )
        seeds = [spec.seed + existing + i for i in range(len(tasks))]
        result.trials_run = _run_tasks(ctx, tasks, seeds, plan, ray_address)
        _write_summary(result, spec, opened, client, t0)
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        client.set_terminated(parent_id, status)
    return result


def _jsonable(result: SweepResult) -> dict[str, Any]:
    d = asdict(result)
    for k in ("output_dir", "summary_md", "summary_json"):
        d[k] = None if d[k] is None else str(d[k])
    d["dashboard_command"] = result.dashboard_command
    return json.loads(json.dumps(d, default=str))
