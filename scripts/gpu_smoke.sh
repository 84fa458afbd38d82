#!/usr/bin/env bash
# GPU smoke test of the verl engine: a few verl steps of SPPO (plugin trainer, prompt critic)
# and GRPO (verl's built-in estimator) on one GPU with a small model, logged into MLflow, then
# checked: both runs FINISHED with the suite's metrics (eval/arith/accuracy, compute/*).
#
#   bash scripts/gpu_smoke.sh                       # MODEL defaults to Qwen/Qwen2.5-0.5B-Instruct
#   MODEL=/path/to/small-chat-model bash scripts/gpu_smoke.sh
#   PYTHON=/path/to/venv/bin/python bash scripts/gpu_smoke.sh   # an env that has verl[vllm]
#
# Needs: one CUDA GPU; a Python with verl[vllm]==0.9.1 (vLLM, TransferQueue) and this project
# importable (`pip install -e . --no-deps` plus math-verify[antlr4_9_3], hydra-core, mlflow,
# rich, pandas); a chat model (HF id reachable or cached, or a local directory). verl[vllm]
# pins torch 2.11, this project's CPU pin is 2.13: use a separate environment for verl on GPU.
# Writes everything under $OUT (default: outputs/gpu_smoke); exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
OUT=$(mkdir -p "${OUT:-outputs/gpu_smoke}" && cd "${OUT:-outputs/gpu_smoke}" && pwd)
STEPS=${STEPS:-3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The entry point exists only once the project is (re)installed; name the plugin explicitly too.
export VERL_USE_EXTERNAL_MODULES=benchmarks.verl_engine.plugin

echo "== environment"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$PYTHON" - <<'PY'
import importlib, sys
missing = [m for m in ("torch", "verl", "vllm", "transfer_queue", "math_verify", "mlflow", "hydra")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"missing in {sys.executable}: {missing}; install verl[vllm]==0.9.1 and this project")
import torch, verl, vllm
assert torch.cuda.is_available(), "no CUDA device visible"
print(f"torch {torch.__version__}, verl {verl.__version__}, vllm {vllm.__version__}, "
      f"GPU {torch.cuda.get_device_name(0)}")
PY

ARGS=(
  engine=verl model=hf "model.name_or_path=$MODEL" task=arith task.horizon=2 task.eval_size=64
  task.max_new_tokens=64 "algorithm=[sppo,grpo]" seeds=1 trainer.samples_per_step=16
  trainer.temperature=1.0 "budget.eval_fractions=[0.0,1.0]" "engine.total_training_steps=$STEPS"
  engine.n_gpus_per_node=1 engine.gpu_memory_utilization=0.4 engine.max_prompt_length=256
  algorithm.sppo.actor_lr=1e-6 algorithm.sppo.critic_lr=5e-6 algorithm.grpo.actor_lr=1e-6
  "tracking.uri=sqlite:///$OUT/mlflow.db" tracking.experiment=gpu-smoke "output_dir=$OUT"
  "engine.python=$PYTHON"
)

echo "== dry run (verl resolves and validates both configurations)"
"$PYTHON" -m benchmarks.cli run "${ARGS[@]}" --dry-run > "$OUT/dry_run.txt"
tail -n 1 "$OUT/dry_run.txt"

echo "== training: $STEPS verl steps each of sppo and grpo"
start=$(date +%s)
status=0
"$PYTHON" -m benchmarks.cli run "${ARGS[@]}" || status=$?
echo "suite exit $status after $(( $(date +%s) - start )) s; verl logs: $OUT/verl/logs/"

echo "== check MLflow"
"$PYTHON" - "$OUT/mlflow.db" <<'PY'
import sys
from mlflow.tracking import MlflowClient
uri = f"sqlite:///{sys.argv[1]}"
client = MlflowClient(uri)
exp = client.get_experiment_by_name("gpu-smoke")
runs = client.search_runs([exp.experiment_id], "tags.`sppo_bench.role` = 'run'",
                          order_by=["attributes.start_time DESC"], max_results=2)
ok = True
for r in runs:
    m = r.data.metrics
    need = ["eval/arith/accuracy", "compute/rollout_samples", "compute/rollout_tokens",
            "compute/wall_s", "train/score_mean"]
    if r.data.tags.get("algorithm") == "sppo":
        need += ["critic/value_mean", "critic/loss"]
    missing = [k for k in need if k not in m]
    print(f"{r.data.tags.get('algorithm')}: {r.info.status}, steps "
          f"{m.get('training/global_step')}, eval acc {m.get('eval/arith/accuracy')}, "
          f"samples {m.get('compute/rollout_samples')}, wall {m.get('compute/wall_s')}"
          + (f", MISSING {missing}" if missing else ""))
    ok &= r.info.status == "FINISHED" and not missing
print("GPU SMOKE", "PASSED" if ok and len(runs) == 2 else "FAILED")
sys.exit(0 if ok and len(runs) == 2 else 1)
PY
exit $status
