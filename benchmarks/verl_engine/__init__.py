"""The verl scale-out engine: the suite's registered algorithms on verl (Ray + vLLM + FSDP).

``sppo-bench run engine=verl ...`` exports the task to verl's parquet format (:mod:`.export`),
wires our graders in as verl's custom reward function (:mod:`.reward`), translates the suite
config into verl Hydra overrides per algorithm (:mod:`.translate`), and launches
``python -m verl.trainer.main_ppo`` per (algorithm, seed) as an MLflow child run of the suite's
parent run (:mod:`.launch`); :mod:`.metrics` maps verl's metric names onto the suite's schema.
:mod:`.plugin` (loaded by ``import verl`` through the ``verl.plugins`` entry point) registers the
SPPO trainer and the registry wrappers inside verl's processes.

verl itself is an optional dependency (``pip install 'sppo-bench[verl]'``): only
:mod:`.plugin` and :mod:`.resolve`'s child process import it.
"""
