"""The declared claims: what the report tests, whether this testbed can test it, and the verdict.

One package for everything a verdict rests on, lowest first:

* :mod:`analysis.claims.spec`: the claims a suite declares before it runs (estimand, pair,
  direction and margin, groups, Holm family, gates), parsed and checked;
* :mod:`analysis.claims.gates`: whether this testbed can separate the algorithms at all (the
  start's headroom, the best gain, saturation, a critic that learns), the one implementation the
  suite's headroom lines and a sweep's admissibility call too;
* :mod:`analysis.claims.protocol`: the estimands over independent starts, their intervals, Holm's
  adjustment and the verdict rules;
* :mod:`analysis.claims.table`: the verdict table the report prints, built from the three.

Import a name from the module that defines it (``from analysis.claims.spec import
parse_claims``): this file imports nothing, so each module's layer is visible at its import.
"""
