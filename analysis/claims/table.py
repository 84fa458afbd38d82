"""The declared claims' verdict table: each claim's gates, estimate, Holm-adjusted interval and
verdict, and the text the report prints from them.

This is where the pieces of the package meet: a claim (:mod:`.spec`) is estimated on the
datasets it uses (:mod:`.protocol`), after its gates (:mod:`.gates`); Holm's adjustment runs over
each declared family, and a member that is untestable, not estimated or not in this store counts
as p = 1. An area claim carries the compute ratio of the same pair as a descriptive line, and a
claim whose starts saturate carries a sensitivity line without them; neither is a verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .gates import CEILING, claim_datasets, evaluate_gates, saturation, untestable
from .protocol import (
    ClaimEstimate,
    area_difference,
    claim_p_value,
    compute_ratio,
    final_difference,
    holm,
    horizon_slope,
    resolved,
    verdict,
)
from .spec import Claim

__all__ = [
    "CLAIM_COLUMNS",
    "NOT_REJECTABLE",
    "NOT_TESTED",
    "INTERIM",
    "NO_VERDICT",
    "claims_table",
    "describe_claims",
    "estimate_claim",
    "format_claims_table",
]

logger = logging.getLogger(__name__)


#: Columns of :func:`claims_table`.
CLAIM_COLUMNS = (
    "claim",
    "statement",
    "estimand",
    "a",
    "b",
    "direction",
    "margin",
    "datasets",
    "family",
    "family_size",
    "n_starts",
    "n_seeds",
    "effect",
    "lo",
    "hi",
    "level",
    "p_value",
    "alpha_adj",
    "lo_adj",
    "hi_adj",
    "p_adj",
    "mde",
    "mde_alpha",
    "conditional",
    "censored",
    "verdict",
    "gates",
    "note",
    "ratio",
    "ratio_censored",
    "ratio_starts",
    "sensitivity",
)
#: The protocol's direction for each declared one (:data:`analysis.claims.spec.DIRECTIONS`).
_DIRECTION = {
    "a >= b": "greater",
    "a > b": "greater",
    "a <= b": "less",
    "a < b": "less",
    "a ~= b": "equivalent",
    "a needs less compute": "less",
    "a needs more compute": "greater",
}
_ESTIMATORS = {
    "horizon_slope": horizon_slope,
    "area_difference": area_difference,
    "compute_ratio": compute_ratio,
    "final_difference": final_difference,
}
NOT_TESTED = "not tested"
NO_VERDICT = "no verdict: conditional on one start"
#: A claim read before every start its suite declares is in (a campaign shard by shard).
INTERIM = "interim: no verdict before every declared start is in"
#: How an untested member of a family (gates fail, no estimate) is shown in Holm's column.
NOT_REJECTABLE = "p = 1, not rejectable"


def estimate_claim(claim: Claim, items: pd.DataFrame, *, seed: int = 0) -> ClaimEstimate:
    """One claim's estimate over starts on the datasets it uses (no gates, no Holm): what the
    verdict table and `sppo-bench power` both start from.

    Raises:
        ValueError: the claim's groups select too few datasets, or the item table cannot pair
            its algorithms.
    """
    used = claim_datasets(claim, items)
    need = 2 if claim.estimand == "horizon_slope" else 1
    if len(used) < need:
        raise ValueError(
            f"groups={claim.groups!r} selects {used or 'no datasets'}; {claim.estimand} "
            f"needs {'two or more groups with distinct horizons' if need == 2 else 'one'}"
        )
    return _ESTIMATORS[claim.estimand](items, claim.a, claim.b, used, seed=seed)


def claims_table(
    claims: Sequence[Claim],
    items: pd.DataFrame,
    df: pd.DataFrame | None = None,
    *,
    alpha: float = 0.05,
    seed: int = 0,
    declared_starts: int | None = None,
) -> pd.DataFrame:
    """One row per declared claim: its gates, estimate, nominal and Holm-adjusted intervals and
    verdict (:mod:`analysis.claims.protocol`), columns :data:`CLAIM_COLUMNS`.

    A claim is estimated when both its algorithms have items on the datasets it uses; it gets a
    verdict when every gate passes (:func:`analysis.claims.gates.evaluate_gates`), else ``verdict``
    reads ``untestable on this testbed: ...``. ``p_value`` is the claim's own test
    (:func:`analysis.claims.protocol.claim_p_value`: of no effect, or of the margin for a
    non-inferiority or equivalence claim). Holm's adjustment runs per family over its declared
    size: claims that are untestable, not estimated, or not in this store count as p = 1 and
    rank after every tested member; a claim Holm does not reject is not resolved whatever its
    own interval says. ``mde`` is the smallest detectable effect at the level the verdict is
    read at, ``mde_alpha`` (``alpha_adj``; for an untested member, alpha over the family's
    size: the most stringent level it could be read at). With one
    start (``conditional``) the intervals hold for that start and the verdict is
    :data:`NO_VERDICT`. An area claim carries the compute ratio of the same pair as a
    description (``ratio``: the geometric mean over starts, a lower bound when
    ``ratio_censored`` starts never reached the target; not tested).

    ``declared_starts``: the starts the suite declared before its first shard. A claim estimated
    over fewer is :data:`INTERIM`, whatever its interval and gates say: reading a verdict at every
    shard and keeping the first that resolves would spend more than its error rate, and a gate on
    a lower bound over starts fails on few starts by construction. Its intervals are shown at
    alpha over its family's size (the strictest level it could be read at), and it counts as
    p = 1 in its family, so an interim member lends no level to the others.
    """
    rows: list[dict] = []
    estimates: list[ClaimEstimate | None] = []
    present = set(items["algorithm"].dropna()) if len(items) else set()
    for c in claims:
        row = dict.fromkeys(CLAIM_COLUMNS, float("nan"))
        row.update(
            claim=c.name,
            statement=c.sentence,
            estimand=c.estimand,
            a=c.a,
            b=c.b,
            direction=c.direction,
            margin=float("nan") if c.margin is None else c.margin,
            family=c.family.name,
            family_size=c.family.size,
            conditional=False,
            censored=0,
            gates="",
            note="",
            sensitivity="",
        )
        est = None
        absent = [x for x in (c.a, c.b) if x not in present]
        if items.empty:
            row["verdict"] = NOT_TESTED
            row["note"] = "the runs logged no per-item scores (eval_items/)"
        elif absent:
            row["verdict"] = NOT_TESTED
            row["note"] = f"{' and '.join(absent)}: no runs with item scores"
        else:
            used = claim_datasets(c, items)
            row["datasets"] = ", ".join(used)
            gates = evaluate_gates(c, items, df)
            row["gates"] = "; ".join(f"{g.text} {'ok' if g.passes else 'FAIL'}" for g in gates)
            try:
                est = estimate_claim(c, items, seed=seed)
            except ValueError as err:
                row["verdict"], row["note"] = NOT_TESTED, str(err)
            else:
                row.update(
                    n_starts=est.n_starts,
                    n_seeds=est.n_seeds,
                    effect=est.effect,
                    lo=est.lo,
                    hi=est.hi,
                    level=est.level,
                    p_value=claim_p_value(est, _DIRECTION[c.direction], c.margin),
                    conditional=est.conditional,
                    censored=est.censored,
                )
                if c.estimand == "area_difference":
                    row.update(_ratio_beside(items, c, used, seed))
                row["sensitivity"] = _without_saturated(c, items, seed)
                row["verdict"] = untestable(gates)
                if declared_starts is not None and 1 < est.n_starts < declared_starts:
                    level = alpha / c.family.size
                    row["lo_adj"], row["hi_adj"] = est.interval(level)
                    row["mde"], row["mde_alpha"] = est.mde_at(level), level
                    row["alpha_adj"] = level  # not Holm's: the member takes no part in it
                    row["verdict"] = INTERIM
                    row["note"] = f"{est.n_starts} of {declared_starts} declared starts"
                    est = None  # p = 1 in its family
                elif row["verdict"] is not None:
                    row["mde_alpha"] = alpha / c.family.size
                    row["mde"] = est.mde_at(row["mde_alpha"])
                    est = None  # untestable: no verdict, p = 1 in its family
        rows.append(row)
        estimates.append(est)
    for family in dict.fromkeys(c.family.name for c in claims):
        members = [i for i, c in enumerate(claims) if c.family.name == family]
        p = [rows[i]["p_value"] if estimates[i] is not None else float("nan") for i in members]
        for i, h in zip(members, holm(p, alpha, claims[members[0]].family.size), strict=True):
            rows[i]["p_adj"] = h.p_adj
            if rows[i]["verdict"] != INTERIM:
                rows[i]["alpha_adj"] = h.alpha_adj
            est = estimates[i]
            if est is None:
                continue
            c = claims[i]
            rows[i]["lo_adj"], rows[i]["hi_adj"] = est.interval(h.alpha_adj)
            rows[i]["mde"], rows[i]["mde_alpha"] = est.mde_at(h.alpha_adj), h.alpha_adj
            rows[i]["verdict"] = (
                NO_VERDICT
                if est.conditional
                else verdict(
                    est,
                    h.alpha_adj,
                    _DIRECTION[c.direction],
                    margin=c.margin,
                    rejected=h.rejected,
                )  # fmt: skip
            )
    return pd.DataFrame(rows, columns=list(CLAIM_COLUMNS))


def _without_saturated(claim: Claim, items: pd.DataFrame, seed: int) -> str:
    """The sensitivity line: the claim re-estimated without the starts that fail the saturation
    check (a and b end at or above the ceiling on every group it uses), labelled as not the
    verdict; empty when no start fails. Why: a saturated start contributes an effect near 0 by
    construction, which pulls an estimate toward "no difference" (toward non-inferiority); the
    line shows how much the verdict leans on such starts, without choosing starts after the
    fact for the verdict itself."""
    sat = saturation(claim, items)
    if sat.empty:
        return ""
    every = sat.groupby("start")["saturated"].all()
    dropped = sorted(every[every].index, key=str)
    if not dropped:
        return ""
    keep = sorted(every[~every].index, key=str)
    head = (
        f"sensitivity, not the verdict: without the {len(dropped)} start"
        f"{'s' if len(dropped) > 1 else ''} where {claim.a} and {claim.b} end >= {CEILING:g} on "
        f"every group used ({', '.join(map(str, dropped))})"
    )
    if len(keep) < 2:
        return f"{head}: {len(keep)} start left, no estimate over starts"
    try:
        e = estimate_claim(claim, items[items["start"].isin(keep)], seed=seed)
    except ValueError as err:
        return f"{head}: not estimated ({err})"
    ratio = claim.estimand == "compute_ratio"
    point = _ratio_point(e.effect, e.censored) if ratio else _signed(e.effect, False)
    return (
        f"{head}: {point}, {e.level:.0%} interval {_span(e.lo, e.hi, ratio)} over "
        f"{e.n_starts} starts"
    )


def _ratio_beside(items: pd.DataFrame, claim: Claim, used: list[str], seed: int) -> dict:
    """The compute ratio of an area claim's pair, as a description: the rollouts a needs to
    reach b's end-of-budget accuracy over b's (geometric mean over starts; a lower bound when
    a start is censored). Empty when it cannot be estimated."""
    try:
        r = compute_ratio(items, claim.a, claim.b, used, seed=seed)
    except ValueError as err:
        logger.info("no compute ratio beside %s: %s", claim.name, err)
        return {}
    return {"ratio": r.effect, "ratio_censored": r.censored, "ratio_starts": r.n_starts}


def _signed(v: float, ratio: bool) -> str:
    if not np.isfinite(v):
        return "∞" if v > 0 else "–"
    return f"{v:.3g}" if ratio else f"{v:+.3f}"


def _span(lo: float, hi: float, ratio: bool) -> str:
    if not (np.isfinite(lo) or np.isfinite(hi)):
        return "–"
    return f"[{_signed(lo, ratio)}, {_signed(hi, ratio)}]"


def _ratio_point(value: float, censored: float) -> str:
    """A compute ratio's point: "≥ 0.93×" when a start is censored (its value is then a lower
    bound), else "0.93×"."""
    text = f"{value:.3g}×"
    return f"≥ {text}" if np.isfinite(censored) and censored > 0 else text


def _effect_text(r: pd.Series) -> str:
    if r["estimand"] == "compute_ratio" and np.isfinite(r["effect"]):
        return _ratio_point(r["effect"], r["censored"])
    return _signed(r["effect"], r["estimand"] == "compute_ratio")


def _untested(r: pd.Series) -> bool:
    """A member Holm counts as p = 1: no estimate, or gates that fail."""
    return not (np.isfinite(r["lo_adj"]) or np.isfinite(r["hi_adj"])) and not r["conditional"]


def format_claims_table(table: pd.DataFrame) -> pd.DataFrame:
    """The verdict table as text: claim (with its margin), starts x seeds, effect (a censored
    ratio as "≥ x×"), interval (nominal, with the level it reaches) and Holm-adjusted (an
    untested member: "p = 1, not rejectable"), verdict, smallest detectable effect at the
    Holm level, gates."""
    out = []
    for _, r in table.iterrows():
        ratio = r["estimand"] == "compute_ratio"
        cond = bool(r["conditional"])
        nominal = _span(r["lo"], r["hi"], ratio)
        if nominal != "–":
            nominal += f" ({r['level']:.0%}" + (", conditional on one start)" if cond else ")")
        adjusted = _span(r["lo_adj"], r["hi_adj"], ratio)
        if adjusted != "–" and r["verdict"] == INTERIM:
            adjusted += f" (α = {r['alpha_adj']:.4g}, the family's strictest; interim)"
        elif adjusted != "–":
            adjusted += f" (α = {r['alpha_adj']:.4g}" + (", conditional)" if cond else ")")
        elif _untested(r):
            adjusted = NOT_REJECTABLE
        units = f"{int(r['n_starts'])} × {int(r['n_seeds'])}" if np.isfinite(r["n_starts"]) else "–"
        mde = "–"
        if np.isfinite(r["mde"]):
            mde = f"{r['mde']:.3g}" + (" (log)" if ratio else "") + f" at α = {r['mde_alpha']:.4g}"
        effect = _effect_text(r)
        if np.isfinite(r["ratio"]):
            effect += f"; ratio {_ratio_point(r['ratio'], r['ratio_censored'])} (descriptive)"
        out.append(
            {
                "claim": f"{r['claim']}: {r['statement']}",
                "starts × seeds": units,
                "effect": effect,
                "interval": nominal,
                "Holm-adjusted": adjusted,
                "verdict": r["verdict"] + (f" ({r['note']})" if r["note"] else ""),
                "smallest detectable": mde,
                "gates": r["gates"] or "–",
            }
        )
    return pd.DataFrame(out)


def describe_claims(table: pd.DataFrame) -> list[str]:
    """One sentence per row of :func:`claims_table`. A ratio is told as fewer or more compute
    only when the verdict rests on an interval that excludes 1 (never with one start), and as
    "≥ x×" when a start is censored; a difference is told as higher or lower only likewise.
    Every margin claim's sentence names its margin (in the claim, and in the verdict); the
    smallest detectable effect is the one at the claim's Holm level."""
    lines = []
    for _, r in table.iterrows():
        ratio = r["estimand"] == "compute_ratio"
        head = f"**{r['claim']}** (claim: {r['statement']}"
        head += f"; on {r['datasets']})" if isinstance(r["datasets"], str) else ")"
        if not np.isfinite(r["effect"]):
            holm_note = "; in Holm's family: " + NOT_REJECTABLE if np.isfinite(r["p_adj"]) else ""
            lines.append(
                f"- {head}: {r['verdict']}" + (f": {r['note']}" if r["note"] else "") + holm_note
                + "."
            )  # fmt: skip
            continue
        if ratio:
            effect = (
                f"{r['a']} needs {_ratio_point(r['effect'], r['censored'])} {r['b']}'s rollouts"
            )
            if r["censored"] > 0:
                effect += (
                    f" ({int(r['censored'])} censored start{'s' if r['censored'] > 1 else ''})"
                )
        elif r["estimand"] == "horizon_slope":
            effect = f"slope of {r['a']} − {r['b']} per horizon step {_signed(r['effect'], False)}"
        elif r["estimand"] == "area_difference":
            effect = (
                f"{r['a']} − {r['b']} in mean accuracy over the rollout budget (normalised area) "
                f"{_signed(r['effect'], False)}"
            )
        else:
            effect = f"final {r['a']} − {r['b']} {_signed(r['effect'], False)}"
        is_resolved = resolved(r["verdict"])
        if ratio and is_resolved:
            effect += f" ({'fewer' if r['hi_adj'] < 1 else 'more'})"
        cond = " conditional on one start" if r["conditional"] else ""
        interval = (
            f"{r['level']:.0%} interval {_span(r['lo'], r['hi'], ratio)}{cond} over "
            f"{int(r['n_starts'])} start{'s' if r['n_starts'] != 1 else ''} × "
            f"{int(r['n_seeds'])} seed{'s' if r['n_seeds'] != 1 else ''}"
        )
        tested = np.isfinite(r["alpha_adj"]) and np.isfinite(r["lo_adj"])
        interim = r["verdict"] == INTERIM
        adjusted = (
            f"at the strictest level of family {r['family']} of {int(r['family_size'])} "
            f"(α = {r['alpha_adj']:.4g}; not in Holm's step-down before every declared start "
            f"is in): {_span(r['lo_adj'], r['hi_adj'], ratio)}"
            if interim
            else f"Holm-adjusted (α = {r['alpha_adj']:.4g} in family {r['family']} of "
            f"{int(r['family_size'])}): {_span(r['lo_adj'], r['hi_adj'], ratio)}"
            if tested
            else f"in family {r['family']}'s tests: {NOT_REJECTABLE}"
        )
        if not is_resolved and tested:
            adjusted += (
                f"; it includes {1 if ratio else 0} (no difference)" if _covers(r, ratio) else ""
            )
        mde = _mde_text(r)
        described = ""
        if np.isfinite(r["ratio"]):
            described = (
                f" Descriptive, not tested: {r['a']} needs "
                f"{_ratio_point(r['ratio'], r['ratio_censored'])} {r['b']}'s rollouts to reach "
                f"{r['b']}'s end-of-budget accuracy (geometric mean over "
                f"{int(r['ratio_starts'])} start{'s' if r['ratio_starts'] != 1 else ''}"
                + (
                    f"; {int(r['ratio_censored'])} censored: a lower bound)"
                    if r["ratio_censored"] > 0
                    else ")"
                )
                + "."
            )
        sens = r.get("sensitivity")
        sensitivity = f" *{sens[0].upper()}{sens[1:]}.*" if isinstance(sens, str) and sens else ""
        verdict = f"**{r['verdict']}**" + (f" ({r['note']})" if interim else "")
        lines.append(
            f"- {head}: {effect}; {interval}; {adjusted}: {verdict}; {mde}. "
            f"Gates: {r['gates'] or 'none declared'}.{described}{sensitivity}"
        )
    return lines


def _mde_text(r: pd.Series) -> str:
    """The smallest detectable effect at the level the verdict is read at; for a margin claim
    also the effect at which its decision is reached with 80% power."""
    if not np.isfinite(r["mde"]):
        return "smallest detectable effect –"
    ratio = r["estimand"] == "compute_ratio"
    text = (
        f"smallest detectable effect {r['mde']:.3g}" + (" (log ratio)" if ratio else "")
        + f" at α = {r['mde_alpha']:.4g}"
    )  # fmt: skip
    m, mde = r["margin"], r["mde"]
    if not np.isfinite(m):
        return text
    if r["direction"] == "a >= b":
        return text + f" (non-inferior with 80% power at an effect of {mde - m:+.3f} or more)"
    if r["direction"] == "a <= b":
        return text + f" (non-inferior with 80% power at an effect of {m - mde:+.3f} or less)"
    return text + f" (equivalence needs the interval inside ±{m:g})"


def _covers(row: pd.Series, ratio: bool) -> bool:
    null = 1.0 if ratio else 0.0
    lo, hi = row["lo_adj"], row["hi_adj"]
    return bool(np.isfinite(lo) and lo <= null <= hi)
