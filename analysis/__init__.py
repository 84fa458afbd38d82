"""sppo-bench analysis: MLflow runs -> tidy pandas -> figures, fits, tables, report.

Reads only MLflow and the metric schema (:mod:`benchmarks.telemetry.metrics`); never imports torch, so a
notebook or CI job can analyse a store without the training stack. Typical use::

    from analysis import load_runs, eval_points, plot_panels, write_report

    df = load_runs("default-suite", tracking_uri="sqlite:///mlflow.db")
    points = eval_points(df)                  # one row per run x dataset x eval step
    plot_panels(points, x="compute/rollout_tokens", fit=True)
    plot_training_curves(df)                  # train/score_mean, entropy, critic EV over compute
    plot_calibration(load_calibration(df))    # SPPO's critic: sigmoid(v) vs success rate
    plot_accuracy_vs_horizon(points)          # suite=horizon: final accuracy per horizon
    verdicts(points)                          # paired verdicts on the suite's claims
    write_report(df, "reports/default-suite")

Uncertainty follows rliable (dict[algorithm] -> array(runs, tasks)): stratified bootstrap
intervals, IQM, probability of improvement (docs/design.md §6; the shapes follow rliable).
Comparisons of two algorithms pair them by seed (:mod:`analysis.verdicts`): a paired bootstrap
over seeds, a minimum detectable effect, and a verdict on each claim (docs/design.md §8).
"""

from ._common import (
    ALGORITHM_ORDER,
    DATASET_LABELS,
    TABLE1_DATASETS,
    algorithm_colors,
    order_algorithms,
    order_datasets,
)
from .calibration import (
    CALIBRATION_ARTIFACT,
    calibration_bins,
    calibration_trajectory,
    expected_calibration_error,
    load_calibration,
    plot_calibration,
    plot_calibration_trajectory,
)
from .curves import (
    Curve,
    aligned_curves,
    compute_to_target,
    describe_compute_to_target,
    final_scores,
    score_dict,
)
from .fit import SaturatingFit, fit_curves, fit_saturating, saturating_curve
from .horizon import horizon_points, horizon_table, plot_accuracy_vs_horizon
from .load import ITEM_TABLE_COLUMNS, TIDY_COLUMNS, eval_points, load_items, load_runs, run_params
from .notebook import resolve_tracking_uri, save_figure
from .plots import (
    plot_accuracy_table,
    plot_accuracy_vs_compute,
    plot_memory,
    plot_panels,
    plot_training_curves,
)
from .report import log_report_to_mlflow, write_report
from .stats import (
    bootstrap_ci,
    improvement_estimates,
    interval_estimates,
    iqm,
    probability_of_improvement,
    probability_of_improvement_ci,
    stratified_bootstrap,
)
from .tables import (
    accuracy_table,
    format_accuracy_table,
    format_number,
    improvement_table,
    iqm_table,
    memory_components_table,
    memory_table,
    summary_table,
    throughput_table,
    to_latex,
    to_markdown,
)
from .verdicts import (
    PairedEstimate,
    describe_verdicts,
    difficulty_groups,
    paired_difference,
    paired_ratio_of_means,
    rollouts_to_match,
    verdicts,
)

__all__ = [
    "ALGORITHM_ORDER",
    "CALIBRATION_ARTIFACT",
    "DATASET_LABELS",
    "TABLE1_DATASETS",
    "TIDY_COLUMNS",
    "accuracy_table",
    "algorithm_colors",
    "aligned_curves",
    "bootstrap_ci",
    "calibration_bins",
    "calibration_trajectory",
    "compute_to_target",
    "Curve",
    "describe_compute_to_target",
    "describe_verdicts",
    "difficulty_groups",
    "eval_points",
    "expected_calibration_error",
    "final_scores",
    "fit_curves",
    "fit_saturating",
    "format_accuracy_table",
    "format_number",
    "horizon_points",
    "horizon_table",
    "improvement_estimates",
    "improvement_table",
    "ITEM_TABLE_COLUMNS",
    "interval_estimates",
    "iqm",
    "iqm_table",
    "load_calibration",
    "load_items",
    "load_runs",
    "log_report_to_mlflow",
    "memory_components_table",
    "memory_table",
    "order_algorithms",
    "order_datasets",
    "PairedEstimate",
    "paired_difference",
    "paired_ratio_of_means",
    "plot_accuracy_table",
    "plot_accuracy_vs_compute",
    "plot_accuracy_vs_horizon",
    "plot_calibration",
    "plot_calibration_trajectory",
    "plot_memory",
    "plot_panels",
    "plot_training_curves",
    "probability_of_improvement",
    "probability_of_improvement_ci",
    "resolve_tracking_uri",
    "run_params",
    "rollouts_to_match",
    "saturating_curve",
    "SaturatingFit",
    "save_figure",
    "score_dict",
    "stratified_bootstrap",
    "summary_table",
    "throughput_table",
    "to_latex",
    "to_markdown",
    "verdicts",
    "write_report",
]
