"""The declared claims' verdict table (analysis/tables.py) prints what the protocol decided and
nothing more: the smallest detectable effect at the claim's Holm level, untested members as
"p = 1, not rejectable" ranked after the tested ones, a censored compute ratio as a lower bound
("≥ x×"), and every margin claim's margin."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.claims.protocol import area_difference, horizon_slope
from analysis.claims.spec import parse_claims
from analysis.claims.table import (
    CLAIM_COLUMNS,
    INTERIM,
    NOT_REJECTABLE,
    claims_table,
    describe_claims,
    format_claims_table,
)
from analysis.simulate import Design, simulate_items

FAMILY = {"name": "headline", "size": 4}


def _items() -> pd.DataFrame:
    design = Design(n_starts=5, horizons=(1, 2, 4, 8), items=30, evals=4, shift=0.3)
    one = simulate_items(design, seed=2, a="sppo", b="ppo")
    two = simulate_items(design, seed=3, a="sppo", b="grpo")
    return pd.concat([one, two[two["algorithm"] == "grpo"]], ignore_index=True)


def _claims(horizon_gates=None):
    return parse_claims(
        [
            {"name": "horizon", "estimand": "horizon_slope", "a": "sppo", "b": "ppo",
             "direction": "a >= b", "margin": 0.01, "groups": "all", "family": FAMILY,
             "gates": horizon_gates},
            {"name": "rollouts", "estimand": "area_difference", "a": "sppo", "b": "grpo",
             "direction": "a >= b", "margin": 0.02, "groups": "all", "family": FAMILY},
        ]
    )  # fmt: skip


def test_smallest_detectable_effect_is_read_at_the_holm_level():
    items = _items()
    table = claims_table(_claims(), items)
    datasets = sorted(items["dataset"].unique(), key=lambda d: float(d.split("_h")[1]))
    ests = [horizon_slope(items, "sppo", "ppo", datasets), area_difference(items, "sppo", "grpo")]
    for i, est in enumerate(ests):
        alpha = table.loc[i, "alpha_adj"]
        assert alpha in (0.05 / 4, 0.05 / 3)
        assert table.loc[i, "mde_alpha"] == alpha
        assert table.loc[i, "mde"] == pytest.approx(est.mde_at(alpha))
        assert table.loc[i, "mde"] > est.mde  # the nominal level's is smaller
    shown = format_claims_table(table)
    for i in range(2):
        assert shown.loc[i, "smallest detectable"].endswith(
            f"at α = {table.loc[i, 'alpha_adj']:.4g}"
        )
    lines = describe_claims(table)
    assert "(non-inferior with 80% power at an effect of " in lines[0]
    assert "(margin 0.01 accuracy per horizon step)" in lines[0]
    assert "(margin 0.02 mean accuracy over the budget)" in lines[1]


def test_an_untestable_claim_declared_first_ranks_after_the_tested_one():
    """Its gates fail: p = 1, not rejectable, ranked last; the tested claim is shown at the
    family's first level, alpha / 4, whatever its p-value; the untested one's smallest
    detectable effect is at alpha / 4 too (the most stringent level it could be read at)."""
    table = claims_table(_claims(horizon_gates={"start_max": 0.0}), _items())
    assert table.loc[0, "verdict"].startswith("untestable on this testbed")
    assert np.isnan(table.loc[0, "lo_adj"]) and table.loc[0, "p_adj"] == 1.0
    assert table.loc[1, "alpha_adj"] == pytest.approx(0.05 / 4)
    assert table.loc[0, "mde_alpha"] == pytest.approx(0.05 / 4)
    shown = format_claims_table(table)
    assert shown.loc[0, "Holm-adjusted"] == NOT_REJECTABLE == "p = 1, not rejectable"
    assert shown.loc[1, "Holm-adjusted"].endswith("(α = 0.0125)")
    assert f"in family headline's tests: {NOT_REJECTABLE}" in describe_claims(table)[0]


def test_a_claim_read_before_every_declared_start_is_in_is_interim():
    """Over 5 starts of 8 declared: no verdict, even where a gate fails; the interval is shown at
    the family's strictest level and the claim counts as p = 1. At 5 of 5 the verdicts are the
    ones drawn without the count."""
    items = _items()
    claims = _claims(horizon_gates={"start_max": 0.0})
    table = claims_table(claims, items, declared_starts=8)
    assert list(table["verdict"]) == [INTERIM, INTERIM]
    assert list(table["note"]) == ["5 of 8 declared starts"] * 2
    assert (table["p_adj"] == 1.0).all()
    est = area_difference(items, "sppo", "grpo")
    assert table.loc[1, "alpha_adj"] == table.loc[1, "mde_alpha"] == pytest.approx(0.05 / 4)
    lo, hi = est.interval(0.05 / 4)
    assert (table.loc[1, "lo_adj"], table.loc[1, "hi_adj"]) == (
        pytest.approx(lo),
        pytest.approx(hi),
    )
    assert "FAIL" in table.loc[0, "gates"]
    line = describe_claims(table)[1]
    assert f"**{INTERIM}** (5 of 8 declared starts)" in line
    assert "not in Holm's step-down before every declared start is in" in line
    assert (
        format_claims_table(table)
        .loc[1, "Holm-adjusted"]
        .endswith("(α = 0.0125, the family's strictest; interim)")
    )
    complete = claims_table(claims, items, declared_starts=5)
    assert list(complete["verdict"]) == list(claims_table(claims, items)["verdict"])
    assert not complete["verdict"].eq(INTERIM).any()


def _row(**values) -> dict:
    row = dict.fromkeys(CLAIM_COLUMNS, float("nan"))
    row.update(
        claim="c", statement="s", a="sppo", b="grpo", family="headline", family_size=4,
        n_starts=5, n_seeds=1, level=0.95, conditional=False, censored=0, gates="", note="",
        datasets="arith", alpha_adj=0.0125, p_value=0.3, p_adj=1.0, mde=0.2, mde_alpha=0.0125,
    )  # fmt: skip
    row.update(values)
    return row


def test_a_censored_ratio_prints_as_a_lower_bound():
    """A compute ratio with a censored start is a lower bound: "≥ 0.93×", in the table and in
    the sentence; uncensored it is a point. The ratio beside an area claim likewise."""
    table = pd.DataFrame(
        [
            _row(estimand="compute_ratio", direction="a needs less compute", effect=0.93,
                 lo=0.6, hi=np.inf, lo_adj=0.5, hi_adj=np.inf, censored=2,
                 verdict="not resolved at this power"),
            _row(estimand="compute_ratio", direction="a needs less compute", effect=0.93,
                 lo=0.6, hi=1.3, lo_adj=0.5, hi_adj=1.5, verdict="not resolved at this power"),
            _row(estimand="area_difference", direction="a >= b", margin=0.02, effect=0.01,
                 lo=-0.01, hi=0.03, lo_adj=-0.02, hi_adj=0.04, ratio=0.93, ratio_censored=1,
                 ratio_starts=5, verdict="not resolved at this power (margin 0.02)"),
        ],
        columns=list(CLAIM_COLUMNS),
    )  # fmt: skip
    shown = format_claims_table(table)
    assert list(shown["effect"][:2]) == ["≥ 0.93×", "0.93×"]
    assert shown.loc[2, "effect"] == "+0.010; ratio ≥ 0.93× (descriptive)"
    censored, point, area = describe_claims(table)
    assert "sppo needs ≥ 0.93× grpo's rollouts (2 censored starts)" in censored
    assert "sppo needs 0.93× grpo's rollouts;" in point and "≥" not in point
    assert (
        "Descriptive, not tested: sppo needs ≥ 0.93× grpo's rollouts to reach grpo's "
        "end-of-budget accuracy (geometric mean over 5 starts; 1 censored: a lower bound)."
    ) in area
    assert "**not resolved at this power (margin 0.02)**" in area
