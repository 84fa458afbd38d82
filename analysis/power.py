"""How many independent starts a claim needs: its variance components from a pilot, then a
simulation of the protocol's interval at each number of starts.

A claim's interval (:mod:`analysis.claims.protocol`) has two variance parts: the spread of the
per-start effects, which shrinks as starts are added, and the shared eval items' part, which
every start has in common and which more starts do not shrink:

    se(S)^2 = sigma_start^2 / S + V_items

A pilot (a results set, or a store) gives both: ``sigma_start`` from its per-start effects, and
``V_items = se^2 - sigma_start^2 / S0`` (floored at 0) from its interval. The simulation then
draws, for each number of starts S, many suites of S per-start effects around an assumed true
effect, forms the protocol's t interval at the claim's Holm level (the smallest alpha the claim
can be read at: alpha over the family's size, so the answer does not depend on how the other
members fare), and counts how often the verdict is resolved at the claim's margin:

* ``a >= b`` with margin m: resolved when the interval lies above -m (non-inferior, or superior
  when above 0) or below -m (does not hold);
* ``a ~= b`` with margin m (two one-sided tests): resolved when the interval lies inside
  [-m, m] (equivalent) or outside it (not equivalent);
* a claim with no margin (``a > b``, ``a needs less compute``): resolved when the interval
  excludes 0.

The starts a claim needs are the fewest with power >= 0.8. The assumed true effect is the
pilot's (the effect the campaign would see if the pilot is right) and, for a margin claim, also
0 (the algorithms level: the case "at least as good" must be able to show).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

if TYPE_CHECKING:
    from .claims.spec import Claim

__all__ = [
    "PowerPlan",
    "margin_at",
    "power_at",
    "power_table",
    "starts_needed",
    "variance_components",
]

#: Power a plan asks for.
TARGET_POWER = 0.8


@dataclass(frozen=True)
class PowerPlan:
    """One claim's power at each number of starts, and the starts it needs.

    Attributes:
        effect: the assumed true effect (estimand units).
        sigma_start: the spread of per-start effects.
        v_items: the shared items' variance of the effect (does not shrink with starts).
        alpha: the two-sided level the interval is read at (Holm's most stringent for the claim).
        margin: the claim's margin, or None (the interval must exclude 0).
        direction: ``">="``, ``"~="`` or ``">"``.
        starts: the numbers of starts simulated; power: the share of suites resolved at each.
        needed: the fewest starts with power >= :data:`TARGET_POWER`, None when none simulated
            reaches it (the shared items' variance alone can keep a claim unresolved).
    """

    effect: float
    sigma_start: float
    v_items: float
    alpha: float
    margin: float | None
    direction: str
    starts: tuple[int, ...]
    power: tuple[float, ...]
    needed: int | None


def variance_components(per_start: np.ndarray, se: float) -> tuple[float, float, float]:
    """(mean effect, sigma_start, V_items) from a pilot's per-start effects and its interval's
    standard error (the protocol's ``ClaimEstimate.per_start`` and ``.se``)."""
    e = np.asarray(per_start, float)
    e = e[np.isfinite(e)]
    if e.size < 2:
        raise ValueError(f"a pilot needs at least 2 starts with an effect, has {e.size}")
    sigma = float(e.std(ddof=1))
    v_items = float(se) ** 2 - sigma**2 / e.size
    # An se made of the starts alone leaves rounding here (6.8e-21 on the companion), not a
    # variance: below float64's resolution of se**2 it is 0, as is anything negative.
    v_items = v_items if v_items > 1e-9 * float(se) ** 2 else 0.0
    return float(e.mean()), sigma, v_items


def _resolved(lo: np.ndarray, hi: np.ndarray, direction: str, margin: float | None) -> np.ndarray:
    if margin is None or direction == ">":
        return (lo > 0) | (hi < 0)
    if direction == ">=":
        return (lo > -margin) | (hi < -margin)
    if direction == "~=":
        return ((lo > -margin) & (hi < margin)) | (lo > margin) | (hi < -margin)
    raise ValueError(f"direction must be '>=', '~=' or '>', got {direction!r}")


def power_at(
    starts: int,
    *,
    effect: float,
    sigma_start: float,
    v_items: float,
    alpha: float,
    margin: float | None,
    direction: str,
    suites: int = 4000,
    seed: int = 0,
) -> float:
    """The share of simulated suites of ``starts`` starts whose interval resolves the claim.

    Each suite draws a shared item effect (variance ``v_items``, common to its starts) and
    ``starts`` per-start effects (spread ``sigma_start``), then reads the protocol's interval:
    mean ± t(S - 1) x sqrt(sample variance / S + v_items), with ``v_items`` taken as known
    from the pilot (its own uncertainty is not simulated).
    """
    if starts < 2:
        raise ValueError(f"starts must be >= 2, got {starts}")
    rng = np.random.default_rng(seed)
    shared = rng.normal(0.0, np.sqrt(v_items), size=(suites, 1))
    e = effect + shared + rng.normal(0.0, sigma_start, size=(suites, starts))  # (suites, S)
    mean = e.mean(axis=1)
    se = np.sqrt(e.var(axis=1, ddof=1) / starts + v_items)
    half = student_t.ppf(1 - alpha / 2, starts - 1) * se
    return float(_resolved(mean - half, mean + half, direction, margin).mean())


def starts_needed(
    per_start: np.ndarray,
    se: float,
    *,
    alpha: float,
    margin: float | None,
    direction: str,
    effect: float | None = None,
    max_starts: int = 40,
    suites: int = 4000,
    seed: int = 0,
) -> PowerPlan:
    """The power curve of one claim from its pilot, and the starts it needs.

    Args:
        per_start, se: the pilot's per-start effects and standard error (``ClaimEstimate``).
        alpha: the two-sided level the verdict is read at (the claim's Holm level).
        margin, direction: the claim's margin (None: no margin) and direction.
        effect: the assumed true effect; default the pilot's.
        max_starts: the largest number of starts simulated.
        suites, seed: simulated suites per number of starts, and their seed.
    """
    mean, sigma, v_items = variance_components(per_start, se)
    true = mean if effect is None else float(effect)
    grid = tuple(range(2, max_starts + 1))
    power = tuple(
        power_at(
            s,
            effect=true,
            sigma_start=sigma,
            v_items=v_items,
            alpha=alpha,
            margin=margin,
            direction=direction,
            suites=suites,
            seed=seed + s,
        )
        for s in grid
    )
    needed = next((s for s, p in zip(grid, power, strict=True) if p >= TARGET_POWER), None)
    return PowerPlan(true, sigma, v_items, alpha, margin, direction, grid, power, needed)


#: How each declared direction is simulated: the effect's sign (``a <= b`` and ``a < b`` are
#: ``b >= a`` and ``b > a`` mirrored) and the rule.
_POWER_DIRECTION = {
    "a >= b": (1.0, ">="),
    "a <= b": (-1.0, ">="),
    "a ~= b": (1.0, "~="),
    "a > b": (1.0, ">"),
    "a < b": (-1.0, ">"),
}


def margin_at(starts: int, sigma_start: float, v_items: float, alpha: float) -> float:
    """The smallest margin ``starts`` starts resolve with power 0.8 for level algorithms (normal
    approximation with t quantiles): a one-sided bound at alpha/2 must clear it."""
    df = starts - 1
    q = student_t.ppf(1 - alpha / 2, df) + student_t.ppf(TARGET_POWER, df)
    return float(q * np.sqrt(sigma_start**2 / starts + v_items))


def power_table(
    claims: Sequence[Claim],
    items: pd.DataFrame,
    *,
    alpha: float = 0.05,
    max_starts: int = 40,
    cap: int = 10,
    suites: int = 4000,
    seed: int = 0,
) -> pd.DataFrame:
    """Every declared claim's pilot estimate and the starts it needs, at the pilot's effect and,
    for a margin claim, at no difference (the case "at least as good" must be able to show).

    Each claim is read at alpha over its family's size (Holm's most stringent level for it).
    ``margin_at_cap`` is the smallest margin ``cap`` starts resolve with power 0.8 when the
    algorithms are level, (t(1 - alpha/2) + t(0.8)) x sqrt(sigma^2 / cap + V_items) with
    ``cap - 1`` degrees of freedom: the margin to declare when the starts are capped.
    A compute ratio is censored, so its power is not simulated: the row says so (claim (b)'s
    primary estimand is the area).
    """
    from .claims.table import estimate_claim

    rows = []
    for c in claims:
        row = {
            "claim": c.name,
            "estimand": c.estimand,
            "direction": c.direction,
            "margin": float("nan") if c.margin is None else c.margin,
            "alpha": alpha / c.family.size,
        }
        if c.direction not in _POWER_DIRECTION:
            rows.append({**row, "note": "a censored compute ratio: power not simulated"})
            continue
        try:
            est = estimate_claim(c, items, seed=seed)
            sign, rule = _POWER_DIRECTION[c.direction]
            per_start = sign * np.asarray(est.per_start, float)
            pilot = starts_needed(
                per_start, est.se, alpha=row["alpha"], margin=c.margin, direction=rule,
                max_starts=max_starts, suites=suites, seed=seed,
            )  # fmt: skip
        except ValueError as err:
            rows.append({**row, "note": str(err)})
            continue
        row.update(
            pilot_starts=est.n_starts,
            effect=est.effect,
            sigma_start=pilot.sigma_start,
            v_items=pilot.v_items,
            needed=pilot.needed,
            power_at_10=pilot.power[pilot.starts.index(10)] if 10 in pilot.starts else np.nan,
            margin_at_cap=margin_at(cap, pilot.sigma_start, pilot.v_items, row["alpha"]),
            note="",
        )
        if c.margin is not None:
            level = starts_needed(
                per_start, est.se, alpha=row["alpha"], margin=c.margin, direction=rule,
                effect=0.0, max_starts=max_starts, suites=suites, seed=seed,
            )  # fmt: skip
            row.update(
                needed_if_level=level.needed,
                power_at_10_if_level=level.power[level.starts.index(10)]
                if 10 in level.starts
                else np.nan,
            )
        rows.append(row)
    columns = [
        "claim", "estimand", "direction", "margin", "alpha", "pilot_starts", "effect",
        "sigma_start", "v_items", "needed", "power_at_10", "needed_if_level",
        "power_at_10_if_level", "margin_at_cap", "note",
    ]  # fmt: skip
    return pd.DataFrame(rows).reindex(columns=columns)
