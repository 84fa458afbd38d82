"""What every task shares (``benchmarks/tasks/base.py``): the hash split that decides which
problems are held out, pinned to recorded values because a changed hash would silently move
problems between training and evaluation."""

from __future__ import annotations


def test_the_hash_split_is_stable_and_takes_the_asked_share() -> None:
    """``split_of`` names one of two splits, the held-out one for about ``test_fraction`` of
    keys, and the same split for a key on every machine and in every version: a changed hash
    would silently move problems between training and evaluation (the values below were
    recorded once and must never change)."""
    from collections import Counter

    from benchmarks.tasks.base import split_of

    keys = [f"{a}+{b}=" for a in range(3) for b in range(4)]
    assert [split_of(k, 0.2) for k in keys] == ["train"] * 9 + ["test", "test", "train"]
    counts = Counter(split_of(str(i), 0.2) for i in range(10_000))
    assert set(counts) == {"train", "test"}
    assert counts["test"] == 2052  # 20.5%: the recorded draw, close to the asked 20%
