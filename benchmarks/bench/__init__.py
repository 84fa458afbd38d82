"""``sppo-bench bench``: engine and trainer speed against the CPU's ceiling, HF and TRL, by section.

One module per section: :mod:`~benchmarks.bench.ceiling` (1, the GEMM ceiling),
:mod:`~benchmarks.bench.generation` (2, rollout), :mod:`~benchmarks.bench.step` (3, the GRPO
step; 4, tracking overhead), with TRL's contender in :mod:`~benchmarks.bench.trl_contender`, and
:mod:`~benchmarks.bench.memory` (5, peak memory). :mod:`~benchmarks.bench.common` holds what they
share; :mod:`~benchmarks.bench.run` runs them in order, prints and writes the results.
"""
