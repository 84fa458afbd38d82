"""sppo-bench analysis: MLflow runs -> tidy pandas -> figures, fits, tables, report.

Reads only MLflow and results sets; never imports torch, so a notebook or CI job can analyse a
store without the training stack. It owns the metric schema (:mod:`analysis.metrics`), the names
the harness logs under: the harness writes in analysis's vocabulary, so ``benchmarks/`` imports
``analysis/`` and never the other way round (docs/design.md, "Folders and layers"). Typical use::

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

from __future__ import annotations

import importlib
from typing import Any

#: Where each public name lives. Loaded on first use (PEP 562), not here: the harness imports
#: :mod:`analysis.metrics` in every training process, and an eager package would pull pandas,
#: scipy and matplotlib (about 2 s and 1,000 modules) into each of them.
_EXPORTS: dict[str, str] = {
    "ALGORITHM_ORDER": "._common",
    "DATASET_LABELS": "._common",
    "TABLE1_DATASETS": "._common",
    "algorithm_colors": "._common",
    "order_algorithms": "._common",
    "order_datasets": "._common",
    "CALIBRATION_ARTIFACT": ".calibration",
    "calibration_bins": ".calibration",
    "calibration_trajectory": ".calibration",
    "expected_calibration_error": ".calibration",
    "load_calibration": ".calibration",
    "plot_calibration": ".calibration",
    "plot_calibration_trajectory": ".calibration",
    "Gate": ".claims.gates",
    "claim_datasets": ".claims.gates",
    "evaluate_gates": ".claims.gates",
    "untestable": ".claims.gates",
    "CONDITIONAL": ".claims.protocol",
    "ClaimEstimate": ".claims.protocol",
    "HolmRow": ".claims.protocol",
    "compute_ratio": ".claims.protocol",
    "final_difference": ".claims.protocol",
    "final_items": ".claims.protocol",
    "holm": ".claims.protocol",
    "horizon_slope": ".claims.protocol",
    "reached_level": ".claims.protocol",
    "verdict": ".claims.protocol",
    "Claim": ".claims.spec",
    "Family": ".claims.spec",
    "Gates": ".claims.spec",
    "parse_claims": ".claims.spec",
    "claims_table": ".claims.table",
    "describe_claims": ".claims.table",
    "format_claims_table": ".claims.table",
    "Curve": ".curves",
    "aligned_curves": ".curves",
    "compute_to_target": ".curves",
    "describe_compute_to_target": ".curves",
    "final_scores": ".curves",
    "paired_ratio_of_means": ".curves",
    "score_dict": ".curves",
    "SaturatingFit": ".fit",
    "fit_curves": ".fit",
    "fit_saturating": ".fit",
    "saturating_curve": ".fit",
    "horizon_points": ".horizon",
    "horizon_table": ".horizon",
    "plot_accuracy_vs_horizon": ".horizon",
    "ITEM_TABLE_COLUMNS": ".load",
    "TIDY_COLUMNS": ".load",
    "eval_points": ".load",
    "load_items": ".load",
    "load_runs": ".load",
    "run_params": ".load",
    "NotebookData": ".notebook",
    "notebook_data": ".notebook",
    "resolve_tracking_uri": ".notebook",
    "save_figure": ".notebook",
    "plot_accuracy_table": ".plots",
    "plot_accuracy_vs_compute": ".plots",
    "plot_memory": ".plots",
    "plot_panels": ".plots",
    "plot_training_curves": ".plots",
    "log_report_to_mlflow": ".report",
    "write_report": ".report",
    "bootstrap_ci": ".stats",
    "improvement_estimates": ".stats",
    "interval_estimates": ".stats",
    "iqm": ".stats",
    "probability_of_improvement": ".stats",
    "probability_of_improvement_ci": ".stats",
    "stratified_bootstrap": ".stats",
    "accuracy_table": ".tables",
    "format_accuracy_table": ".tables",
    "format_number": ".tables",
    "improvement_table": ".tables",
    "iqm_table": ".tables",
    "memory_components_table": ".tables",
    "memory_table": ".tables",
    "summary_table": ".tables",
    "throughput_table": ".tables",
    "to_latex": ".tables",
    "to_markdown": ".tables",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the submodule that defines ``name`` the first time it is asked for."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
