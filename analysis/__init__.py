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
    items = load_items(df)                    # every eval's per-item scores, with the start
    claims_table(claims, items, df)           # the declared claims: gates, Holm, verdicts
    write_report(df, "reports/default-suite")

Uncertainty follows rliable (dict[algorithm] -> array(runs, tasks)): stratified bootstrap
intervals, IQM, probability of improvement (docs/design.md §6; the shapes follow rliable).
Verdicts are drawn only on the claims a suite declared before it ran (:mod:`analysis.claims`),
after their gates pass (:mod:`analysis.claims.gates`), with the warm start as the unit of replication
and Holm's adjustment over each declared family (:mod:`analysis.claims.protocol`, docs/statistics.md).
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
from .claims.gates import Gate, claim_datasets, evaluate_gates, untestable
from .claims.protocol import (
    CONDITIONAL,
    ClaimEstimate,
    HolmRow,
    compute_ratio,
    final_difference,
    final_items,
    holm,
    horizon_slope,
    reached_level,
    verdict,
)
from .claims.spec import Claim, Family, Gates, parse_claims
from .claims.table import claims_table, describe_claims, format_claims_table
from .curves import (
    Curve,
    aligned_curves,
    compute_to_target,
    describe_compute_to_target,
    final_scores,
    paired_ratio_of_means,
    score_dict,
)
from .fit import SaturatingFit, fit_curves, fit_saturating, saturating_curve
from .horizon import horizon_points, horizon_table, plot_accuracy_vs_horizon
from .load import ITEM_TABLE_COLUMNS, TIDY_COLUMNS, eval_points, load_items, load_runs, run_params
from .notebook import NotebookData, notebook_data, resolve_tracking_uri, save_figure
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

__all__ = [
    "accuracy_table",
    "algorithm_colors",
    "ALGORITHM_ORDER",
    "aligned_curves",
    "bootstrap_ci",
    "CALIBRATION_ARTIFACT",
    "calibration_bins",
    "calibration_trajectory",
    "Claim",
    "claim_datasets",
    "ClaimEstimate",
    "claims_table",
    "compute_ratio",
    "compute_to_target",
    "CONDITIONAL",
    "Curve",
    "DATASET_LABELS",
    "describe_claims",
    "describe_compute_to_target",
    "eval_points",
    "evaluate_gates",
    "expected_calibration_error",
    "Family",
    "final_difference",
    "final_items",
    "final_scores",
    "fit_curves",
    "fit_saturating",
    "format_accuracy_table",
    "format_claims_table",
    "format_number",
    "Gate",
    "Gates",
    "holm",
    "HolmRow",
    "horizon_points",
    "horizon_slope",
    "horizon_table",
    "improvement_estimates",
    "improvement_table",
    "interval_estimates",
    "iqm",
    "iqm_table",
    "ITEM_TABLE_COLUMNS",
    "load_calibration",
    "load_items",
    "load_runs",
    "log_report_to_mlflow",
    "memory_components_table",
    "memory_table",
    "NotebookData",
    "notebook_data",
    "order_algorithms",
    "order_datasets",
    "paired_ratio_of_means",
    "parse_claims",
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
    "reached_level",
    "resolve_tracking_uri",
    "run_params",
    "saturating_curve",
    "SaturatingFit",
    "save_figure",
    "score_dict",
    "stratified_bootstrap",
    "summary_table",
    "TABLE1_DATASETS",
    "throughput_table",
    "TIDY_COLUMNS",
    "to_latex",
    "to_markdown",
    "untestable",
    "verdict",
    "write_report",
]
