"""Paired verdicts over seeds (analysis/verdicts.py) on eval-point frames whose truth is known by
construction, then the report's opening Verdicts section, on a synthetic tidy frame and on the
session's micro suite (a real MLflow SQLite store).

Frames: one row per (algorithm, seed, dataset, eval) like :func:`analysis.eval_points`, a shared
per-seed offset on every algorithm of a seed (the warm start they share), budget fractions
0 .. 1 and the rollout counters.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from analysis import (
    difficulty_groups,
    eval_points,
    improvement_table,
    load_runs,
    paired_difference,
    rollouts_to_match,
    verdicts,
    write_report,
)
from analysis.verdicts import (
    DOES_NOT_HOLD,
    HOLDS,
    MDE_FACTOR,
    MIN_VERDICT_SEEDS,
    NOT_RESOLVED,
    SAME_WITHIN_NOISE,
    describe_verdicts,
    difference_verdict,
    format_ratio,
    mde_factor,
    ratio_verdict,
    tail_probability,
)
from benchmarks.telemetry.metrics import (
    COMPUTE_ROLLOUT_SAMPLES,
    COMPUTE_ROLLOUT_TOKENS,
    EVAL_BUDGET_FRACTION,
    eval_metric,
)

FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: Means of a handful of values in [0, 1], summed in another order by the test: float64
#: rounding, a few ulps of the values' magnitude (<= 1); a wrong seed or sign moves them by >= 1e-3.
F64 = 64 * np.finfo(np.float64).eps


def _points(
    finals: dict[str, np.ndarray], dataset: str = "arith", start: float = 0.1
) -> pd.DataFrame:
    """Linear curves from ``start`` to each (algorithm, seed)'s final accuracy over 1,000 rollout
    samples (8 tokens each); seeds 0 .. n-1."""
    rows = []
    for algo, values in finals.items():
        for s, final in enumerate(np.asarray(values, float)):
            for i, f in enumerate(FRACTIONS):
                rows.append(
                    {
                        "run_id": f"{algo}-{s}",
                        "algorithm": algo,
                        "seed": s,
                        "dataset": dataset,
                        "step": 10 * i,
                        "eval_index": i,
                        "budget_fraction": f,
                        "accuracy": start + f * (final - start),
                        COMPUTE_ROLLOUT_SAMPLES: 1000.0 * f,
                        COMPUTE_ROLLOUT_TOKENS: 8000.0 * f,
                    }
                )
    return pd.DataFrame(rows)


# --- paired difference -----------------------------------------------------------------------


def test_a_large_consistent_paired_effect_holds_and_its_reverse_does_not() -> None:
    rng = np.random.default_rng(0)
    offset = rng.normal(0.3, 0.05, 6)  # the shared warm start of each seed
    a = offset + 0.10 + rng.normal(0, 0.01, 6)
    b = offset + rng.normal(0, 0.01, 6)
    pts = _points({"sppo": a, "ppo": b})
    est = paired_difference(pts, "sppo", "ppo", "arith", reps=1000, seed=1)
    assert est.effect == pytest.approx(float(np.mean(a - b)), abs=F64)
    assert est.n_seeds == 6 and est.lo <= est.effect <= est.hi
    assert est.lo > 0 and est.verdict == HOLDS
    rev = paired_difference(pts, "ppo", "sppo", "arith", reps=1000, seed=1)
    assert rev.effect == pytest.approx(-est.effect, abs=F64)
    assert rev.hi < 0 and rev.verdict == DOES_NOT_HOLD
    # final = the eval at the largest budget fraction, whatever order the rows come in
    shuffled = pts.sample(frac=1.0, random_state=3)
    assert paired_difference(shuffled, "sppo", "ppo", "arith").effect == pytest.approx(
        est.effect, abs=F64
    )


def test_noise_centred_at_zero_with_few_seeds_is_not_resolved() -> None:
    rng = np.random.default_rng(1)
    noise = rng.normal(0, 0.05, 3)
    noise -= noise.mean()  # centred at 0 by construction
    offset = rng.normal(0.4, 0.1, 3)
    pts = _points({"sppo": offset + noise, "ppo": offset})
    est = paired_difference(pts, "sppo", "ppo", "arith", reps=2000)
    assert est.effect == pytest.approx(0.0, abs=F64)
    assert est.lo < 0 < est.hi and est.verdict == NOT_RESOLVED
    one = paired_difference(pts[pts["seed"] == 0], "sppo", "ppo", "arith")
    assert one.n_seeds == 1 and one.effect == pytest.approx(noise[0], abs=F64)
    assert math.isnan(one.lo) and math.isnan(one.hi) and math.isnan(one.mde)
    assert one.verdict == NOT_RESOLVED


def test_three_seeds_give_an_interval_but_no_verdict() -> None:
    """The same large, consistent effect as above on 3 seeds: its interval excludes 0, yet no
    verdict is drawn (MIN_VERDICT_SEEDS), and the text says why."""
    rng = np.random.default_rng(0)
    offset = rng.normal(0.3, 0.05, 3)
    pts = _points({"sppo": offset + 0.10 + rng.normal(0, 0.01, 3), "ppo": offset})
    est = paired_difference(pts, "sppo", "ppo", "arith", reps=1000, seed=1)
    assert est.n_seeds == 3 < MIN_VERDICT_SEEDS and est.lo > 0
    assert est.verdict == NOT_RESOLVED
    assert (
        difference_verdict(est.lo, est.hi, MIN_VERDICT_SEEDS) == HOLDS
    )  # the guard, not the interval
    assert ratio_verdict(0.5, 0.8, 4) == NOT_RESOLVED and ratio_verdict(0.5, 0.8, 5) == HOLDS
    pts5 = _horizon_points(0.03, seeds=3)
    (line,) = [ln for ln in describe_verdicts(verdicts(pts5, reps=300)) if "horizon" in ln]
    assert f"**{NOT_RESOLVED}** (a verdict needs {MIN_VERDICT_SEEDS} seeds" in line


def _coverage(n: int, trials: int, rng_seed: int) -> float:
    """Share of simulated experiments (n seeds, true paired difference 0.05) whose 95% paired
    interval contains 0.05."""
    rng = np.random.default_rng(rng_seed)
    hits = 0
    for t in range(trials):
        offset = rng.normal(0.4, 0.1, n)
        pts = _points({"sppo": offset + rng.normal(0.05, 0.05, n), "ppo": offset})
        est = paired_difference(pts, "sppo", "ppo", "arith", seed=t)
        hits += bool(est.lo <= 0.05 <= est.hi)
    return hits / trials


def test_the_expanded_interval_covers_at_five_seeds_and_three_cannot() -> None:
    """Why the tails are expanded and why a verdict needs MIN_VERDICT_SEEDS: at 5 seeds the
    expanded interval covers about as often as it says (a plain percentile interval: ~81%); at 3
    no interval can, since its ends are at most the extreme seeds (~76% simulated)."""
    assert tail_probability(5, 0.95) < 0.0025  # far out of the plain interval's 2.5% tails
    # Binomial s.e. at 300 trials is ~0.017 near 0.9 and ~0.025 near 0.8.
    assert 0.86 <= _coverage(5, 300, 11) <= 0.99
    assert _coverage(3, 300, 11) < 0.85


def test_minimum_detectable_effect_by_hand() -> None:
    diffs = np.array([0.1, 0.3, 0.2, 0.4])
    pts = _points({"sppo": 0.2 + diffs, "ppo": np.full(4, 0.2)})
    est = paired_difference(pts, "sppo", "ppo", "arith", reps=200)
    # (t_0.975 + t_0.8 at 3 df) sd / sqrt(n): mean 0.25, sample sd sqrt(((.15)^2 + (.05)^2) * 2 / 3)
    t3 = 3.182446 + 0.978472  # Student's t table, 3 degrees of freedom
    sd = math.sqrt((0.15**2 + 0.05**2) * 2 / 3)
    assert MDE_FACTOR == pytest.approx(
        NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8), rel=1e-12
    )
    assert est.mde == pytest.approx(t3 * sd / 2, rel=1e-6)  # the table's 7 digits
    assert est.effect == pytest.approx(0.25, abs=F64)


def test_the_mde_has_the_power_it_states() -> None:
    """A t test on n paired seeds against a true effect of mde_factor(n) standard errors has about
    80% power (noncentral t, computed apart); the normal quantiles' factor has far less."""
    from scipy.stats import nct
    from scipy.stats import t as student_t

    for n in (5, 10):
        crit = student_t.ppf(0.975, n - 1)
        assert 0.78 <= nct.sf(crit, n - 1, mde_factor(n)) <= 0.81
    assert nct.sf(student_t.ppf(0.975, 4), 4, MDE_FACTOR) < 0.6  # 5 seeds: ~56%


def test_pairing_resolves_what_an_unpaired_comparison_cannot() -> None:
    """A shared per-seed offset (sd 0.15) dwarfs a consistent +0.03: resampled together the
    offset cancels, resampled apart it is noise."""
    rng = np.random.default_rng(2)
    n = 8
    offset = rng.normal(0.4, 0.15, n)
    a = offset + 0.03 + rng.normal(0, 0.003, n)
    b = offset + rng.normal(0, 0.003, n)
    pts = _points({"sppo": a, "ppo": b})
    paired = paired_difference(pts, "sppo", "ppo", "arith", reps=2000, seed=0)
    assert paired.verdict == HOLDS and paired.lo > 0.02
    # The unpaired interval of mean(a) - mean(b): seeds resampled independently per algorithm.
    idx_a, idx_b = (np.random.default_rng(k).integers(0, n, (2000, n)) for k in (10, 11))
    unpaired = a[idx_a].mean(axis=1) - b[idx_b].mean(axis=1)
    lo, hi = np.percentile(unpaired, [2.5, 97.5])
    assert lo < 0 < hi
    # rliable's probability of improvement resamples runs apart too: not resolved.
    poi = improvement_table(pts, reference="sppo", reps=500).set_index("algorithm_y")
    assert not bool(poi.loc["ppo", "resolved"]) and poi.loc["ppo", "lo"] < 0.5


def test_improvement_is_resolved_only_with_an_interval_that_excludes_a_coin_flip() -> None:
    rng = np.random.default_rng(4)
    offset = rng.normal(0.4, 0.02, 6)
    pts = _points({"sppo": offset + 0.2, "ppo": offset})
    poi = improvement_table(pts, reference="sppo", reps=500).set_index("algorithm_y")
    assert poi.loc["ppo", "lo"] > 0.5 and bool(poi.loc["ppo", "resolved"])
    assert (poi.loc["ppo", "n_runs_x"], poi.loc["ppo", "n_runs_y"]) == (6, 6)
    # one seed each: P = 1 and an interval collapsed onto it, which is no evidence
    one = improvement_table(pts[pts["seed"] == 0], reference="sppo", reps=500)
    assert one["probability"].tolist() == [1.0] and one["lo"].tolist() == [1.0]
    assert not bool(one["resolved"].iloc[0])


def test_paired_interval_covers_the_true_difference() -> None:
    """Coverage of the 95% paired percentile interval on simulated seeds (10 per trial)."""
    rng = np.random.default_rng(7)
    trials, hits = 150, 0
    for t in range(trials):
        offset = rng.normal(0.4, 0.1, 10)
        pts = _points({"sppo": offset + rng.normal(0.05, 0.05, 10), "ppo": offset})
        est = paired_difference(pts, "sppo", "ppo", "arith", reps=500, seed=t)
        hits += bool(est.lo <= 0.05 <= est.hi)
    # The expanded interval at 10 seeds: ~93% simulated against a nominal 95%.
    assert 0.85 <= hits / trials <= 0.99


# --- rollouts to match -----------------------------------------------------------------------


def _match_points(
    speed: dict[int, float], b_final: float = 0.6, a_budget: float = 1000.0
) -> pd.DataFrame:
    """grpo climbs linearly 0.2 -> b_final (+ seed offset) over 1,000 samples; sppo climbs the
    same 0.4 in ``speed[s]`` x 1,000 samples (linear, so the crossing is exact), evaluated up to
    ``a_budget`` samples; speed inf: sppo never improves."""
    rows = []
    for s, k in speed.items():
        off = 0.01 * s
        for algo, total in (("grpo", 1000.0), ("sppo", a_budget)):
            for i, f in enumerate(FRACTIONS):
                x = total * f
                if algo == "grpo":
                    acc = 0.2 + off + (b_final - 0.2) * f
                else:
                    acc = 0.2 + off + (b_final - 0.2) * (x / (1000.0 * k) if np.isfinite(k) else 0)
                rows.append(
                    {
                        "run_id": f"{algo}-{s}",
                        "algorithm": algo,
                        "seed": s,
                        "dataset": "arith",
                        "step": 10 * i,
                        "budget_fraction": f,
                        "accuracy": acc,
                        COMPUTE_ROLLOUT_SAMPLES: x,
                        COMPUTE_ROLLOUT_TOKENS: 8 * x,
                    }
                )
    return pd.DataFrame(rows)


def test_rollouts_to_match_ratio_of_means_and_verdicts() -> None:
    speed = {0: 0.3, 1: 0.4, 2: 0.35, 3: 0.45, 4: 0.5}
    est = rollouts_to_match(_match_points(speed), "sppo", "grpo", "arith", reps=1000)
    # sum of crossings / sum of grpo's totals = mean(speed): the crossings are 1,000 * speed
    assert est.effect == pytest.approx(np.mean(list(speed.values())), rel=1e-12)
    assert est.per_seed == pytest.approx(speed, rel=1e-12)
    assert est.n_seeds == 5 and est.n_failed == 0
    assert est.lo <= est.effect <= est.hi < 1 and est.verdict == HOLDS
    # a mean over resampled seeds stays inside the per-seed range except when every draw is the
    # same seed ((1/5)^5 of replicates, far below 2.5%)
    assert min(speed.values()) < est.lo and est.hi < max(speed.values())
    # delta-method MDE with den constant (1,000): sd of the per-seed ratios / sqrt(n)
    assert est.mde == pytest.approx(mde_factor(5) * np.std(list(speed.values()), ddof=1) / 5**0.5)

    slow = rollouts_to_match(
        _match_points({s: 1.5 + 0.1 * s for s in range(5)}, a_budget=2500.0), reps=1000
    )
    assert slow.lo > 1 and slow.verdict == DOES_NOT_HOLD

    even = rollouts_to_match(
        _match_points({0: 0.8, 1: 1.2, 2: 0.9, 3: 1.1, 4: 1.0}, a_budget=1500.0), reps=1000
    )
    assert even.lo < 1 < even.hi and even.verdict == SAME_WITHIN_NOISE


def test_a_seed_that_never_reaches_counts_against_the_claim() -> None:
    speed = {0: 0.3, 1: 0.35, 2: 0.3, 3: 0.32, 4: 0.33, 5: float("inf")}
    est = rollouts_to_match(_match_points(speed), reps=1000)
    assert est.n_failed == 1 and est.per_seed[5] == float("inf")
    # the failure enters the point estimate at the 1,000 samples spent
    assert est.effect == pytest.approx((300 + 350 + 300 + 320 + 330 + 1000) / 6000, rel=1e-12)
    assert est.hi == float("inf") and est.verdict == NOT_RESOLVED  # unbounded: not "the same"
    without = rollouts_to_match(_match_points({k: v for k, v in speed.items() if k != 5}))
    assert without.verdict == HOLDS  # the same seeds minus the failure resolve


def test_ratio_text_never_prints_a_bare_one() -> None:
    assert [format_ratio(v) for v in (2.016, 1.004, 0.99996, 1.0, float("inf"))] == [
        "2.02",
        "1.004",
        "0.99996",
        "1.00",
        "∞",
    ]
    table = verdicts(
        _match_points({0: 0.8, 1: 1.2, 2: 0.9, 3: 1.1, 4: 1.0}, a_budget=1500.0), reps=500
    )
    assert set(table["verdict"]) == {SAME_WITHIN_NOISE}
    text = "\n".join(describe_verdicts(table))
    assert "the same within noise" in text and "1.00x" not in text
    assert "smallest distance of the ratio from 1 detectable at 5 seeds" in text


# --- claims over difficulty groups -----------------------------------------------------------


def _horizon_points(gain: float, seeds: int = 6, overall: bool = True) -> pd.DataFrame:
    """arith_h1..h8 (and, with ``overall``, arith): sppo - ppo = 0.05 + gain * log2(h) + small
    noise, a shared per-seed offset, and grpo on the overall dataset only. The trend (h8 minus
    h1) is 3 * gain; sppo is ahead at every horizon whatever the gain."""
    rng = np.random.default_rng(5)
    frames = []
    offset = rng.normal(0.4, 0.1, seeds)
    for h in (1, 2, 4, 8):
        d = 0.05 + gain * math.log2(h) + rng.normal(0, 0.005, seeds)
        frames.append(
            _points({"sppo": offset / h + d, "ppo": offset / h}, dataset=f"arith_h{h}", start=0)
        )
    if overall:
        frames.append(_points({"sppo": offset + 0.1, "ppo": offset, "grpo": offset}))
    return pd.concat(frames, ignore_index=True)


def test_horizon_trend_verdicts() -> None:
    table = verdicts(_horizon_points(0.03), reps=1000).set_index(["kind", "task"])
    trend = table.loc[("trend", "arith")]
    assert trend["claim"] == "sppo >= ppo as the horizon grows"
    assert trend["dataset"] == "arith_h1 -> arith_h8" and trend["n_seeds"] == 6
    assert trend["effect"] == pytest.approx(0.09, abs=0.01)  # 0.03 * log2(8), noise 0.005
    assert trend["verdict"] == HOLDS
    assert re.findall(r"h(\d+) ", trend["detail"]) == ["1", "2", "4", "8"]
    falling = verdicts(_horizon_points(-0.03), reps=1000).set_index(["kind", "task"])
    assert falling.loc[("trend", "arith"), "verdict"] == DOES_NOT_HOLD
    flat = verdicts(_horizon_points(0.0), reps=1000).set_index(["kind", "task"])
    assert flat.loc[("trend", "arith"), "verdict"] == NOT_RESOLVED
    # claim (b) on the overall dataset only, on both rollout axes
    ratio = table.loc["ratio"]
    assert list(ratio.index) == ["arith", "arith"]
    assert set(ratio["x"]) == {COMPUTE_ROLLOUT_SAMPLES, COMPUTE_ROLLOUT_TOKENS}


def test_claims_are_skipped_when_their_algorithms_are_absent() -> None:
    pts = _horizon_points(0.03)
    assert set(verdicts(pts[pts["algorithm"] != "grpo"], reps=100)["kind"]) == {"trend"}
    assert set(verdicts(pts[pts["algorithm"] != "ppo"], reps=100)["kind"]) == {"ratio"}
    assert verdicts(pts[pts["algorithm"] == "ppo"], reps=100).empty


def test_difficulty_groups_by_horizon_and_by_metadata_field() -> None:
    groups = difficulty_groups(
        ["arith", "arith_h8", "arith_h2", "chain_sum", "chain_sum_num_terms3",
         "chain_sum_num_terms2", "math500", "aime24"]
    )  # fmt: skip
    assert groups == {
        "arith": [(2, "arith_h2"), (8, "arith_h8")],
        "chain_sum": [(2, "chain_sum_num_terms2"), (3, "chain_sum_num_terms3")],
    }
    # suite=horizon logs only the per-horizon datasets; a field group needs its parent logged
    assert difficulty_groups(["arith_h1", "arith_h4"]) == {
        "arith": [(1, "arith_h1"), (4, "arith_h4")]
    }
    assert difficulty_groups(["products_num_terms2"]) == {}


# --- the report ------------------------------------------------------------------------------


def _tidy(points: pd.DataFrame) -> pd.DataFrame:
    """The long frame :func:`analysis.load_runs` returns, from eval points."""
    rows = []
    for _, p in points.iterrows():
        base = {
            "run_id": p["run_id"],
            "algorithm": p["algorithm"],
            "seed": p["seed"],
            "task": "arith",
            "model": "tiny",
            "step": int(p["step"]),
        }
        rows.append(
            {**base, "metric": eval_metric(p["dataset"], "accuracy"), "value": p["accuracy"]}
        )
        rows.append({**base, "metric": EVAL_BUDGET_FRACTION, "value": p["budget_fraction"]})
        for c in (COMPUTE_ROLLOUT_SAMPLES, COMPUTE_ROLLOUT_TOKENS):
            rows.append({**base, "metric": c, "value": p[c]})
    return pd.DataFrame(rows).drop_duplicates(["run_id", "metric", "step"])


def _sections(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, flags=re.M)


def test_report_opens_with_the_claims_and_prints_no_bare_ratio(tmp_path: Path) -> None:
    pts = pd.concat(
        [
            # separate runs (their own compute counters) from the arith runs below
            _horizon_points(0.03, seeds=5, overall=False).assign(
                run_id=lambda d: "h-" + d["run_id"]
            ),
            # sppo ~ grpo on arith's rollouts
            _match_points({0: 0.8, 1: 1.2, 2: 0.9, 3: 1.1, 4: 1.0}, a_budget=1500.0),
        ],
        ignore_index=True,
    )
    df = _tidy(pts)
    assert eval_points(df)["accuracy"].notna().all()
    text = write_report(df, tmp_path / "r", reps=300, fit_reps=5).read_text()
    # no store: no declared claims and no item scores, so no verdict (tests/analysis/test_report.py
    # tests the claims section)
    assert _sections(text)[0] == "Claims"
    assert "declared no claims" in text.split("## Claims", 1)[1].split("\n## ", 1)[0]
    assert "1.00x" not in text
    # compute to target: grpo's per-seed ratio straddles 1, so no "fewer"/"more" claim for it
    ctt = text.split("## Compute to target", 1)[1].split("\n## ", 1)[0]
    told = [ln for ln in ctt.splitlines() if ln.startswith("- ")]
    grpo = [ln for ln in told if "grpo" in ln]
    assert grpo and all("within noise" in ln and "fewer" not in ln for ln in grpo), grpo
    # ppo's gap grows with the horizon and is consistent over seeds: told as a win, with interval
    (h8,) = [ln for ln in told if "arith_h8" in ln]
    assert "fewer rollout tokens than ppo (paired interval over 5 seeds, per-seed bootstrap" in h8


def test_verdicts_on_the_micro_suite_store(micro_suite, tmp_path: Path) -> None:
    """One seed through a real MLflow store: claims are stated, none is resolved."""
    result, _ = micro_suite
    df = load_runs(parent_run_id=result.parent_run_id, tracking_uri=result.tracking_uri)
    table = verdicts(eval_points(df), reps=200)
    ratio = table[table["kind"] == "ratio"]
    assert set(ratio["task"]) == {"arith"} and set(ratio["n_seeds"]) == {1}
    assert set(table["verdict"]) == {NOT_RESOLVED}
    assert table["lo"].isna().all() and table["mde"].isna().all()
    text = write_report(df, tmp_path / "r", reps=200, fit_reps=5).read_text()
    assert _sections(text)[0] == "Claims" and "1.00x" not in text
    # the default suite's seeds share one warm start: conditional intervals, no verdict
    assert "conditional on one start" in text
    ctt = text.split("## Compute to target", 1)[1].split("\n## ", 1)[0]
    told = [
        ln for ln in ctt.splitlines() if ln.startswith("- ") and ("fewer" in ln or "more" in ln)
    ]
    assert all(
        ln.startswith("- not resolved (no interval: one curve per algorithm)") for ln in told
    )
