"""The critics' values as the trainer uses them, against forward passes of each prompt alone.

SPPO's defining mechanism is one scalar per prompt: ``sigmoid(v)`` with ``v`` the critic's logit at
the prompt's last token, and prompts are left-padded, so the last token is the last column and the
first columns are padding for every prompt but the longest. A zero head (how critics start) makes
every position's value 0 and hides which position was read, so every test here gives the head
random weights first. Comparisons are in float64 (models, and HF's RMSNorm through
:func:`hf_rmsnorm_in_model_dtype`): a padded batch and an unpadded single prompt are the same
maths in another summation order (:data:`F64_SAME_MATH`); reading the wrong position moves a
value by O(1).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import torch

import benchmarks.training.critic as critic_mod
from algorithms import Algorithm
from algorithms.ppo import PPO
from algorithms.sppo import SPPO
from benchmarks.engines.rollout import Rollout
from benchmarks.tasks.arith import ArithTask
from benchmarks.telemetry.meter import Budget
from benchmarks.telemetry.tracking import NullTracker
from benchmarks.training.modeling import build_tiny_llama
from benchmarks.training.trainer import RLTrainer
from testkit.tolerances import F64_SAME_MATH, assert_close_to_scale, hf_rmsnorm_in_model_dtype
from testkit.trainers import SPEC, SPS, FirstDigitTask, make_trainer

pytestmark = pytest.mark.usefixtures("one_thread")


class MixedLengthTask(FirstDigitTask):
    """FirstDigitTask's dense reward over train and held-out prompts of one to three operations
    (4, 6 or 8 characters), so every batch is left-padded."""

    def __init__(self) -> None:
        super().__init__(horizon=1, eval_size=16)
        tasks = [ArithTask(horizon=h, max_problems=60, eval_size=4) for h in (1, 2, 3)]
        self._train = [p for t in tasks for p in t.train_problems()[:40]]
        self._test = [
            p for group in zip(*(t.eval_problems() for t in tasks), strict=True) for p in group
        ]


class RecordingEngine:
    """The trainer's engine, unchanged, keeping every call's prompts and rollout."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[list[str], Rollout]] = []

    def generate(self, prompts: Sequence[str], **kw: Any) -> Rollout:
        ro = self.inner.generate(prompts, **kw)
        self.calls.append((list(prompts), ro))
        return ro

    def sync_weights(self) -> None:
        self.inner.sync_weights()


class _RecordsAdvantages:
    """Keeps what the trainer passes to ``advantages`` and what it gets back."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.seen: list[dict[str, torch.Tensor]] = []

    def advantages(
        self,
        rewards: torch.Tensor,
        response_mask: torch.Tensor,
        group_ids: torch.Tensor | None,
        values: torch.Tensor | None = None,
        **kw: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        adv, returns = super().advantages(rewards, response_mask, group_ids, values=values, **kw)
        self.seen.append({"rewards": rewards, "values": values.detach().clone(), "adv": adv})
        return adv, returns


class RecordingSPPO(_RecordsAdvantages, SPPO):
    pass


class RecordingPPO(_RecordsAdvantages, PPO):
    pass


class TableTracker(NullTracker):
    """Keeps the tables a run logs (NullTracker drops them)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, Mapping[str, list]] = {}

    def log_table(self, data: Mapping[str, list], artifact_file: str) -> None:
        self.tables[artifact_file] = data


@pytest.fixture(scope="module")
def start64(tok):
    return build_tiny_llama(SPEC, len(tok), seed=0).double()


@pytest.fixture(scope="module")
def mixed():
    return MixedLengthTask()


@pytest.fixture(autouse=True)
def _float64_rmsnorm(monkeypatch):
    hf_rmsnorm_in_model_dtype(monkeypatch)  # else HF's norm rounds to fp32 in each path apart


def _trainer(alg: Algorithm, start64: Any, tok: Any, task: Any, **cfg: Any) -> RLTrainer:
    trainer = make_trainer(alg, start64, tok, task, Budget(kind="samples", limit=SPS), **cfg)
    critic = trainer.critic.model
    critic.double()
    with torch.no_grad():  # a head that makes each position's value depend on its hidden state
        critic.head.weight.normal_(generator=torch.Generator().manual_seed(0))
        critic.head.bias.fill_(0.1)
    trainer.engine = RecordingEngine(trainer.engine)
    return trainer


def _alone(critic: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The critic's value at every position of one unpadded sequence."""
    return critic.head(critic.backbone(input_ids=ids[None]).last_hidden_state[0]).squeeze(-1)


def _prompt(ro: Rollout, i: int) -> torch.Tensor:
    return ro.prompt_ids[i][ro.prompt_mask[i] > 0]


def _assert_left_padded(ro: Rollout) -> None:
    plens = ro.prompt_mask.sum(-1)
    assert plens.min() < plens.max(), "every prompt has the same length: nothing is padded"
    assert (ro.prompt_mask[:, -1] == 1).all()  # left padding: the last column is real


def test_prompt_critic_value_is_sigmoid_of_the_last_prompt_token(start64, tok, mixed):
    """The logit SPPO's advantage receives for each row is the critic's value at the last token
    of that row's prompt run alone, and the baseline it subtracts is its sigmoid."""
    trainer = _trainer(RecordingSPPO(), start64, tok, mixed)
    critic0 = copy.deepcopy(
        trainer.critic.model
    )  # the critic as the trainer reads it, before its update
    trainer.train_step()
    ((_, ro),), (seen,) = trainer.engine.calls, trainer.alg.seen
    _assert_left_padded(ro)
    with torch.no_grad():
        want = torch.stack([_alone(critic0, _prompt(ro, i))[-1] for i in range(len(ro.texts))])
    assert want.max() - want.min() > 0.1  # the values differ by prompt: a wrong row would show
    assert_close_to_scale(seen["values"], want, F64_SAME_MATH)
    # The advantage is R - sigmoid(v) on every response token: its baseline, per row.
    mask = ro.response_mask > 0
    baseline = seen["rewards"][:, None] - seen["adv"]
    for i in range(len(ro.texts)):
        assert_close_to_scale(
            baseline[i][mask[i]], torch.sigmoid(want[i]).expand(int(mask[i].sum())), F64_SAME_MATH
        )


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "hf-path"])
def test_token_critic_value_before_each_response_token(fast, start64, tok, mixed, monkeypatch):
    """PPO's token critic: the value the advantage receives at response position t is the
    critic's value at the token before it (the last prompt token for t = 0) in an unpadded
    forward of that row's prompt and response, through the shared-prompt path Llama critics
    take and through HF's forward."""
    # The shared-prompt path is gated to fp32; lifted for this float64 critic (and kept shut
    # for the HF arm), as tests/training/test_trainer.py does.
    monkeypatch.setattr(critic_mod, "supports_backbone", lambda backbone: fast)
    trainer = _trainer(RecordingPPO(PPO.Config(critic_warmup_steps=1)), start64, tok, mixed)
    critic0 = copy.deepcopy(trainer.critic.model)
    trainer.train_step()
    ((_, ro),), (seen,) = trainer.engine.calls, trainer.alg.seen
    _assert_left_padded(ro)
    assert ro.lengths.min() < ro.lengths.max()  # responses are right-padded too
    T = ro.response_ids.shape[1]
    want = torch.zeros(len(ro.texts), T, dtype=torch.float64)
    with torch.no_grad():
        for i in range(len(ro.texts)):
            p, n = _prompt(ro, i), int(ro.lengths[i])
            seq = torch.cat([p, ro.response_ids[i, :n]])
            want[i, :n] = _alone(critic0, seq)[p.shape[0] - 1 : p.shape[0] - 1 + n]
    valid = ro.response_mask > 0
    assert_close_to_scale(seen["values"][valid], want[valid], F64_SAME_MATH)


def test_calibration_table_is_the_critic_against_the_empirical_success(start64, tok, mixed):
    """The table logged at the end of an SPPO run (the paper's Fig. 7 data): per held-out
    prompt, the final critic's sigmoid(v) of that prompt alone, and the mean reward of the k
    responses sampled for that prompt."""
    prompts, k = 6, 4
    tracker = TableTracker()
    trainer = _trainer(
        RecordingSPPO(),
        start64,
        tok,
        mixed,
        calibration_prompts=prompts,
        calibration_samples=k,
        tracker=tracker,
    )
    trainer.train()
    table = tracker.tables["critic_calibration.json"]
    probs = list(mixed.eval_problems()[:prompts])
    assert table["prompt"] == [p.prompt for p in probs]
    assert table["k"] == [k] * prompts
    # The calibration rollout: k responses for each of those prompts. It runs at every eval
    # point (trainer.calibration_every_eval); the table is the final one's.
    asked = [p.prompt for p in probs for _ in range(k)]
    calls = [(s, r) for s, r in trainer.engine.calls if sorted(s) == sorted(asked)]
    assert len(calls) == len(trainer.evals)
    sent, ro = calls[-1]
    scores = [1.0 if t[:1].isdigit() else 0.0 for t in ro.texts]  # the dense reward
    empirical = [
        sum(s for s, q in zip(scores, sent, strict=True) if q == p.prompt) / k for p in probs
    ]
    assert table["empirical"] == empirical  # multiples of 1/k: exact
    assert len(set(empirical)) > 1  # varies by prompt: a misaligned row would show
    with torch.no_grad():
        want = [
            torch.sigmoid(
                _alone(
                    trainer.critic.model,
                    tok(p.prompt, return_tensors="pt", add_special_tokens=False)["input_ids"][0],
                )[-1]
            ).item()
            for p in probs
        ]
    assert max(want) - min(want) > 0.02  # the prompts' predictions differ
    assert_close_to_scale(
        torch.tensor(table["predicted"], dtype=torch.float64),
        torch.tensor(want, dtype=torch.float64),
        F64_SAME_MATH,
    )
