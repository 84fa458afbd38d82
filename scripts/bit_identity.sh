#!/usr/bin/env bash
# Whether two commits train bit-identically: three suites run at each commit, from a git worktree
# of it, and their metric histories compared bit for bit (scripts/same_histories.py).
#   default  the default suite (12 runs), in 2 worker processes (the executor's pool);
#   all      the micro suite with every registered algorithm, in one process;
#   paths    the micro suite on the off-policy and critic-schedule paths: 4 policy mini-batches
#            and 2 epochs per rollout batch, PPO's and SPPO's critics on 2 mini-batches and
#            2 epochs after 2 warm-up steps, and PPO's actor held during a 2-step critic warm-up.
# Campaign shards from two commits are merged only where all three match.
#
#   bash scripts/bit_identity.sh <commit-a> <commit-b> [work-dir]
# About 8 minutes per commit on 2 loaded cores (the default suite 5 of them). Each commit's
# histories go to <work-dir>/<commit>/<suite>/results and are reused by a second call.
set -euo pipefail
set -f  # the overrides hold [ and { : words, never globs
A=$1
B=$2
WORK=${3:-${TMPDIR:-/tmp}/sppo-bench-bit-identity}
ROOT=$(git rev-parse --show-toplevel)
PY=${PYTHON:-$ROOT/.venv/bin/python}
export MPLBACKEND=Agg MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false

MICRO=(
  "warmstart.phases=[{steps:40,direct_fraction:0.0},{steps:10,direct_fraction:0.6}]"
  warmstart.eval_every=50 warmstart.val_size=64 seeds=1 task.horizon=2 task.eval_size=200
  "budget.eval_fractions=[0.0,0.5,1.0]"
  algorithm.dapo.params.group_size=4 algorithm.dapo.params.max_gen_batches=3
)

suite_args() {
  case $1 in
    default) echo "jobs=2" ;;
    # 40 samples a step: a multiple of every algorithm's group (RLOO's 5, GRPO's 8, DAPO's 4).
    all) echo "${MICRO[*]} trainer.samples_per_step=40 budget.limit=320 jobs=1 algorithm=[$(cd "$ROOT/benchmarks/conf/algorithm" &&
      find . -name '*.yaml' | sed 's|^\./||; s|\.yaml$||' | sort | paste -sd,)]" ;;
    paths) echo "${MICRO[*]} trainer.samples_per_step=32 budget.limit=256 jobs=1 algorithm=[ppo,sppo,grpo] trainer.mini_batches=4 \
      algorithm.grpo.params.ppo_epochs=2 algorithm.ppo.params.ppo_epochs=2 \
      algorithm.sppo.params.ppo_epochs=2 algorithm.ppo.critic.warmup_steps=2 \
      algorithm.ppo.critic.mini_batches=2 algorithm.ppo.critic.epochs=2 \
      algorithm.sppo.critic.warmup_steps=2 algorithm.sppo.critic.mini_batches=2 \
      algorithm.sppo.critic.epochs=2 algorithm.ppo.params.critic_warmup_steps=2" ;;
  esac
}

run_at() {
  local commit=$1 suite=$2 wt out
  out=$WORK/$commit/$suite
  [ -f "$out/results/manifest.json" ] && return 0
  wt=$WORK/$commit/tree
  [ -d "$wt" ] || git -C "$ROOT" worktree add --detach -q "$wt" "$commit"
  mkdir -p "$out"
  # shellcheck disable=SC2046  # the suite's overrides are words
  (cd "$out" && PYTHONPATH=$wt SPPO_BENCH_CACHE=$WORK/$commit/cache "$PY" -m benchmarks.cli run \
    $(suite_args "$suite") suite.report=true output_dir="$out" \
    tracking.uri="sqlite:///$out/mlflow.db" > "$out/run.log" 2>&1) || {
    echo "$suite at $commit failed: see $out/run.log" >&2
    return 1
  }
}

status=0
for suite in default all paths; do
  run_at "$A" "$suite"
  run_at "$B" "$suite"
  echo "== $suite: $A against $B"
  "$PY" "$ROOT/scripts/same_histories.py" "$WORK/$A/$suite/results" "$WORK/$B/$suite/results" ||
    status=1
done
exit $status
