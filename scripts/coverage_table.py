"""Print the verdict protocol's coverage, null rejection rate and power on simulated claims suites
(analysis/simulate.py) as Markdown tables, for docs/statistics.md.

    python scripts/coverage_table.py [--suites 2000] [--boot-suites 500] [--ratio-suites 1000]

Designs (analysis.simulate.Design, 57 items in each of 6 horizon groups, one RL seed per start,
eight evals): ``normal``, ``gamma`` and ``lognormal`` start effects (start_sd 0.4 logit), and
``items``: small start effects (0.1) and a large algorithm-by-item effect (0.8) shared by every
start, where an interval over starts alone misses the items' variance. For each, at 3, 5 and
10 starts: the protocol's interval (t over starts plus the shared items' jackknife variance),
a t interval over starts alone, and the hierarchical percentile bootstrap (starts, then item
folds), each at a design whose truth is 0 (coverage = 1 - null rejection rate) and at an
effect (coverage and power). The compute ratio: null rejection with a and b the same algorithm,
power with a twice as fast and ending 0.5 logit higher.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import numpy as np

from analysis.simulate import Design, evaluate, null_design

DESIGNS = {
    "normal": Design(start_dist="normal"),
    "gamma": Design(start_dist="gamma"),
    "lognormal": Design(start_dist="lognormal"),
    "items": Design(start_sd=0.1, start_slope_sd=0.02, alg_item_sd=0.8),
}
BUMP = {"final_difference": ("shift", 0.4), "horizon_slope": ("slope", 0.1)}
STARTS = (3, 5, 10)


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _cell(design: Design, estimand: str, n: int, boot: int, seed: int) -> dict:
    null = null_design(design, estimand)
    field, bump = BUMP[estimand]
    eff = replace(null, **{field: getattr(null, field) + bump})
    t_null, _ = evaluate(null, estimand, n, seed=seed)
    t_eff, _ = evaluate(eff, estimand, n, seed=seed + 1)
    s_null, _ = evaluate(null, estimand, n, seed=seed, folds=1)
    b_null, _ = evaluate(null, estimand, boot, seed=seed, method="bootstrap", reps=1000)
    return {
        "cov": t_null.coverage,
        "cov_eff": t_eff.coverage,
        "power": t_eff.rejection,
        "truth": t_eff.truth,
        "width": t_null.width,
        "cov_starts": s_null.coverage,
        "cov_boot": b_null.coverage,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", type=int, default=2000)
    parser.add_argument("--boot-suites", type=int, default=500)
    parser.add_argument("--ratio-suites", type=int, default=1000)
    args = parser.parse_args()
    t0 = time.time()
    se = np.sqrt(0.95 * 0.05 / args.suites)
    for estimand in ("horizon_slope", "final_difference"):
        _out(f"\n### {estimand}\n")
        _out(
            "| design | starts | coverage (null) | null rejection | coverage (effect) | "
            "power at effect | median width | t over starts alone | bootstrap |"
        )
        _out("|---|---|---|---|---|---|---|---|---|")
        for name, design in DESIGNS.items():
            for k, n_starts in enumerate(STARTS):
                c = _cell(
                    replace(design, n_starts=n_starts),
                    estimand,
                    args.suites,
                    args.boot_suites,
                    seed=1000 * k + 7,
                )
                _out(
                    f"| {name} | {n_starts} | {c['cov']:.3f} | {1 - c['cov']:.3f} | "
                    f"{c['cov_eff']:.3f} | {c['power']:.3f} ({c['truth']:+.3f}) | "
                    f"{c['width']:.3f} | {c['cov_starts']:.3f} | {c['cov_boot']:.3f} |"
                )
    _out("\n### compute_ratio\n")
    _out(
        "| starts | null rejection | power (a twice as fast, ends higher) | censored suites (null) |"
    )
    _out("|---|---|---|---|")
    base = Design(start_sd=0.0, start_slope_sd=0.0)
    for n_starts in STARTS:
        d = replace(base, n_starts=n_starts)
        null, est = evaluate(d, "compute_ratio", args.ratio_suites, seed=n_starts, truth=1.0)
        fast = replace(d, speed=0.5, shift=0.5)
        power, _ = evaluate(fast, "compute_ratio", args.ratio_suites, seed=n_starts, truth=0.5)
        censored = float((est.censored > 0).mean())
        _out(f"| {n_starts} | {null.rejection:.3f} | {power.rejection:.3f} | {censored:.3f} |")
    _out(
        f"\n{args.suites} suites a cell (Monte Carlo standard error of a coverage near 0.95: "
        f"{se:.4f}); bootstrap column {args.boot_suites} suites x 1000 replicates; ratio "
        f"{args.ratio_suites} suites; {time.time() - t0:.0f} s."
    )


if __name__ == "__main__":
    main()
