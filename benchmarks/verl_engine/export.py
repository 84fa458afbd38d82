"""A task's problems -> verl's RL parquet format.

One row per problem, the layout verl's ``RLHFDataset`` and reward loop read (``data.prompt_key``
= ``prompt``, ``data.reward_fn_key`` = ``data_source``):

``data_source``    dataset name (``math``, ``math500``, ``arith``): also the ``<dataset>`` of
                   verl's ``val-core/<dataset>/acc/mean@k`` metrics
``prompt``         chat messages ``[{"role": ..., "content": ...}]`` (verl applies the model's
                   chat template)
``ability``        ``"math"``
``reward_model``   ``{"style": "rule", "ground_truth": <gold answer>}``
``extra_info``     ``{"split", "index", "id", "grader"}``: ``grader`` tells
                   :func:`benchmarks.verl_engine.reward.compute_score` how to grade

Prompts are built from the task's template (``benchmarks.tasks.datasets.prompt_messages``), the same
text the native engine renders, so both engines see the same prompts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["COLUMNS", "export_problems", "export_task", "read_rows", "task_rows"]

logger = logging.getLogger(__name__)

#: Columns of an exported file, in order.
COLUMNS: tuple[str, ...] = ("data_source", "prompt", "ability", "reward_model", "extra_info")


def _row(
    source: str, messages: list[dict[str, str]], answer: str, split: str, index: int, **info: Any
) -> dict[str, Any]:
    return {
        "data_source": source,
        "prompt": messages,
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(answer)},
        "extra_info": {"split": split, "index": index, **{k: str(v) for k, v in info.items()}},
    }


def eval_splits(task_cfg: Any) -> list[str]:
    """The eval files' names, one per eval dataset: what :func:`task_rows` writes besides
    ``train``, known without loading a dataset (the launcher names the files before export)."""
    cfg = dict(task_cfg)
    if cfg["name"] == "arith":
        return [cfg.get("eval_name") or "arith"]  # ArithTask.eval_name
    return list(cfg.get("eval_datasets") or [cfg["name"]])


def task_rows(task_cfg: Any) -> dict[str, list[dict[str, Any]]]:
    """Rows per file for the suite's task config: ``{"train": [...], "<eval dataset>": [...]}``.

    Real datasets (``task=math|gsm8k``) are loaded with :func:`benchmarks.tasks.datasets.load_dataset`
    (train set and every eval dataset, each its own file so verl reports them apart);
    ``task=arith`` takes the generated train and held-out problems, graded by ``arith``.
    """
    from benchmarks.tasks.arith import ArithTask
    from benchmarks.tasks.datasets import DATASETS, load_dataset, prompt_messages

    cfg = dict(task_cfg)
    name = cfg["name"]
    out: dict[str, list[dict[str, Any]]] = {}
    if name == "arith":
        kwargs = {k: v for k, v in cfg.items() if k not in ("name", "max_new_tokens")}
        task = ArithTask(**kwargs)
        for split, problems in (
            ("train", task.train_problems()),
            (task.eval_name, task.eval_problems()),
        ):
            out[split] = [
                _row(
                    task.eval_name if split != "train" else "arith",
                    [{"role": "user", "content": p.prompt}],
                    p.answer,
                    "train" if split == "train" else "test",
                    i,
                    id=p.id,
                    grader="arith",
                )
                for i, p in enumerate(problems)
            ]
        return out
    template = cfg.get("template", "plain")
    train_name = cfg.get("train_dataset") or name
    evals = eval_splits(cfg)
    data_dir = cfg.get("data_dir")
    for split, ds, limit in [
        ("train", train_name, cfg.get("train_size")),
        *((e, e, cfg.get("eval_size")) for e in evals),
    ]:
        problems = load_dataset(ds, data_dir=data_dir, limit=limit)
        out[split] = [
            _row(
                ds,
                prompt_messages(p, template),
                p.answer,
                "train" if split == "train" else "test",
                i,
                id=p.id,
                grader=DATASETS[ds].grader,
            )
            for i, p in enumerate(problems)
        ]
    return out


def export_problems(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write rows (see the module docstring) to one parquet file; returns its path."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not rows:
        raise ValueError(f"no problems to export to {path}")
    pd.DataFrame(list(rows), columns=list(COLUMNS)).to_parquet(path, index=False)
    return path


def export_task(task_cfg: Any, out_dir: str | Path) -> tuple[Path, list[Path]]:
    """Export the task: ``(train.parquet, [<eval dataset>.parquet, ...])`` under ``out_dir``."""
    out_dir = Path(out_dir)
    files = {
        split: export_problems(rows, out_dir / f"{split}.parquet")
        for split, rows in task_rows(task_cfg).items()
    }
    train = files.pop("train")
    logger.info("exported %s and %d eval file(s) to %s", train.name, len(files), out_dir)
    return train, list(files.values())


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of an exported file as plain python objects (lists and dicts, as written)."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
