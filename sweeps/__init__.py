"""Optuna sweeps over the sppo-bench suite: YAML specs, parallel workers, MLflow child runs.

``sppo-bench sweep sweeps/lr_per_algorithm.yaml --workers 2`` tunes each algorithm with the same
number of trials; :func:`run_sweep` is the same from code. See :mod:`sweeps.runner` for the
choices made (a study per algorithm, exact trial counts, resume) and the modules it composes,
and :mod:`sweeps.spec` for the spec format.
"""

from sweeps.objective import objective_value
from sweeps.runner import run_sweep
from sweeps.spec import ParamSpec, SpecError, SweepSpec
from sweeps.spec_check import check_spec
from sweeps.spec_fields import load_spec, parse_spec
from sweeps.summary import BestTrial, SweepResult
from sweeps.tracking import TAG_STUDY, TAG_TRIAL, TAG_TRIAL_STATE, MlflowTrialCallback

__all__ = [
    "TAG_STUDY",
    "TAG_TRIAL",
    "TAG_TRIAL_STATE",
    "BestTrial",
    "MlflowTrialCallback",
    "ParamSpec",
    "SpecError",
    "SweepResult",
    "SweepSpec",
    "check_spec",
    "load_spec",
    "objective_value",
    "parse_spec",
    "run_sweep",
]
