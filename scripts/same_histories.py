"""Whether two results sets hold the same training: every deterministic metric history of every
run, compared bit for bit, runs matched by (algorithm, start, seed).

Shards from different commits are merged only where the training path is bit-identical between
the commits: run the default suite at each (its results set is written beside its report) and
compare. Wall times and memory vary from run to run and are left out, as in dump_histories.py.

    python scripts/same_histories.py results/default/s0 outputs/default/results
"""

from __future__ import annotations

import sys

import numpy as np

from analysis.results import read_results


def _histories(path: str) -> dict[tuple, dict[str, list[tuple[int, float]]]]:
    rs = read_results([path])
    runs = rs.runs[rs.runs["role"] == "run"].set_index("run_id")
    m = rs.metrics[
        ~rs.metrics["metric"].str.contains("wall_s")
        & ~rs.metrics["metric"].str.startswith("memory/")
    ]
    out: dict[tuple, dict[str, list[tuple[int, float]]]] = {}
    for (run_id, metric), g in m.groupby(["run_id", "metric"], sort=True):
        if run_id not in runs.index:
            continue  # the suite parent: its metrics are summaries (wall time, headroom)
        r = runs.loc[run_id]
        key = (r["algorithm"], r["start"], str(r["seed"]))
        out.setdefault(key, {})[metric] = sorted(
            zip(g["step"].tolist(), g["value"].tolist(), strict=True)
        )
    return out


def main(a: str, b: str) -> int:
    ha, hb = _histories(a), _histories(b)
    if ha.keys() != hb.keys():
        sys.stdout.write(f"different runs: {sorted(ha.keys() ^ hb.keys())}\n")
        return 1
    points = 0
    for key in sorted(ha):
        if ha[key].keys() != hb[key].keys():
            sys.stdout.write(
                f"{key}: different metrics {sorted(ha[key].keys() ^ hb[key].keys())}\n"
            )
            return 1
        for metric, xs in ha[key].items():
            ys = hb[key][metric]
            same = len(xs) == len(ys) and all(
                s1 == s2 and (v1 == v2 or (np.isnan(v1) and np.isnan(v2)))
                for (s1, v1), (s2, v2) in zip(xs, ys, strict=True)
            )
            if not same:
                first = next(
                    ((p, q) for p, q in zip(xs, ys, strict=False) if p != q), (len(xs), len(ys))
                )
                sys.stdout.write(f"{key} {metric}: first difference {first}\n")
                return 1
            points += len(xs)
    sys.stdout.write(f"bit-identical: {len(ha)} runs, {points} history points\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
