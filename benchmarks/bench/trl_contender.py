"""The TRL contender of section 3 (the step) and section 5 (memory): one ``GRPOTrainer`` step on
the same model, task, batch, group size, KL coefficient and reward as the suite's GRPO step.
Its own module because two sections run it: the step (3) and memory (5).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch

from benchmarks.bench.common import BenchContext, BenchSettings

__all__ = ["TrlStepper"]


class TrlStepper:
    """TRL ``GRPOTrainer.train()`` in a thread, released one optimizer step at a time, so its own
    loop (generation, rewards, reference forward, loss, backward, clipping, AdamW, logging) runs
    as shipped while the caller interleaves it with other contenders."""

    def __init__(self, ctx: BenchContext, s: BenchSettings, *, checkpointing: bool) -> None:
        from accelerate import PartialState
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        from benchmarks.telemetry.meter import FlopModel

        self.name = "trl" + ("" if checkpointing else " (no ckpt)")
        PartialState(cpu=True)
        model_dir = ctx.tmp / "model"
        if not model_dir.exists():
            ctx.model.save_pretrained(model_dir)
        problems = ctx.problems
        task = ctx.task

        def arith_reward(completions, pid, **_):
            return task.grade(list(completions), [problems[i] for i in pid]).scores

        n_prompts = max(64, s.samples_per_step // s.group_size * 8)
        ds = Dataset.from_dict(
            {"prompt": [p.prompt for p in problems[:n_prompts]], "pid": list(range(n_prompts))}
        )
        args = GRPOConfig(
            output_dir=str(ctx.tmp / f"trl-{checkpointing}"),
            per_device_train_batch_size=s.samples_per_step,
            num_generations=s.group_size,
            max_completion_length=ctx.max_new,
            gradient_accumulation_steps=1,
            num_iterations=1,
            beta=0.001,
            learning_rate=1e-4,
            lr_scheduler_type="constant",
            max_grad_norm=1.0,
            temperature=1.0,
            top_p=1.0,
            loss_type="grpo",
            bf16=False,
            use_cpu=True,
            gradient_checkpointing=checkpointing,
            report_to="none",
            logging_steps=10**9,
            save_strategy="no",
            max_steps=10**6,
            seed=s.seed,
            disable_tqdm=True,
            dataloader_num_workers=0,
            # Two trainers live in one process: share one accelerator state instead of letting
            # the second one's arguments reset the first's.
            accelerator_config={"use_configured_state": True},
        )
        self.trainer = GRPOTrainer(
            model=str(model_dir),
            reward_funcs=[arith_reward],
            args=args,
            train_dataset=ds,
            processing_class=ctx.tok,
        )
        self.fm = FlopModel.from_config(ctx.model.config)
        self.phases: dict[str, float] = {}
        self.flops = 0.0
        self._wrap()
        gate = self

        class _Gate(TrainerCallback):
            def on_train_begin(self, args, state, control, **kw):
                gate._wait()

            def on_step_end(self, args, state, control, **kw):
                gate._done.release()
                if gate._wait():
                    control.should_training_stop = True
                return control

        from transformers.trainer_callback import PrinterCallback

        self.trainer.remove_callback(PrinterCallback)  # its end-of-training dict on stdout
        self.trainer.add_callback(_Gate())
        self._go = threading.Semaphore(0)
        self._done = threading.Semaphore(0)
        self._stop = False
        self._error: BaseException | None = None
        self._threads = torch.get_num_threads()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _wait(self) -> bool:
        self._go.acquire()
        return self._stop

    def _run(self) -> None:
        torch.set_num_threads(self._threads)
        try:
            self.trainer.train()
        except BaseException as e:  # surfaced in step()
            self._error = e
            self._done.release()

    def _timed(self, phase: str, fn: Callable) -> Callable:
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                key = phase(a) if callable(phase) else phase
                self.phases[key] = self.phases.get(key, 0.0) + time.perf_counter() - t0

        return wrapper

    def _wrap(self) -> None:
        tr = self.trainer
        gen = tr._generate_single_turn

        def generate(prompt_ids, *a, **k):
            completion_ids, lps = gen(prompt_ids, *a, **k)
            self.flops += sum(
                self.fm.generate(len(p), len(c))
                + 3 * self.fm.forward(len(p) + len(c), logits=len(c))  # policy fwd + bwd
                + self.fm.forward(len(p) + len(c), logits=len(c))  # reference forward
                for p, c in zip(prompt_ids, completion_ids, strict=True)
            )
            return completion_ids, lps

        tr._generate_single_turn = self._timed("phase rollout", generate)
        tr._calculate_rewards = self._timed("phase reward", tr._calculate_rewards)
        tr._get_per_token_logps_and_entropies = self._timed(
            lambda a: "phase forward" if torch.is_grad_enabled() else "phase reference",
            tr._get_per_token_logps_and_entropies,
        )

    def step(self) -> dict[str, float]:
        self.phases, self.flops = {}, 0.0
        t0 = time.perf_counter()
        self._go.release()
        while not self._done.acquire(timeout=1.0):
            if not self._thread.is_alive():
                break
        dt = time.perf_counter() - t0
        if self._error is not None:
            raise RuntimeError(f"{self.name}: training failed") from self._error
        out = dict(self.phases)
        out["phase backward+optimizer+rest"] = dt - sum(self.phases.values())
        out["time"] = dt
        out["flops"] = self.flops
        out["samples"] = float(self.trainer.args.per_device_train_batch_size)
        return out

    def close(self) -> None:
        self._stop = True
        self._go.release()
        self._thread.join(timeout=60)
