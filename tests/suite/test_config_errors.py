"""Malformed configs and unusable stores, each failing ``sppo-bench run`` with exit status 2
before any compute, with a message that names the field, the value and what is allowed."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from benchmarks.cli import main as cli_main

# (overrides, fragments the error message must contain)
CASES = [
    (["algorithm=[nope]"], ["algorithm=nope", "available in 'algorithm'", "'sppo'"]),
    (["algorithm=[]"], ["algorithm: select at least one", "registered:", "'grpo'"]),
    (["algorithm.grpo.params.nope=1"], ["algorithm.grpo.params", "nope", "valid fields:"]),
    (["algorithm=[grpo]", "algorithm.grpo.params.group_size=1"], ["group_size=1", ">= 2"]),
    (["algorithm=[dapo]", "algorithm.dapo.params.group_size=1"], ["group_size=1", ">= 2"]),
    (
        ["algorithm=[grpo]", "algorithm.grpo.critic_lr=1e-5"],
        ["algorithm.grpo.critic_lr=1e-05", "trains no critic", "null"],
    ),
    (
        ["algorithm=[ppo]", "algorithm.ppo.params.gae_lambda=2"],
        ["gae_lambda", "valid fields:", "lam"],
    ),
    (
        ["algorithm=[grpo]", "algorithm.grpo.actor_lr=-1"],
        ["algorithm.grpo.actor_lr=-1 must be > 0"],
    ),
    (
        ["algorithm=[sppo]", "algorithm.sppo.critic_lr=0"],
        ["algorithm.sppo.critic_lr=0", "> 0 or null"],
    ),
    (
        ["algorithm=[sppo]", "algorithm.sppo.critic.epochs=0"],
        ["algorithm.sppo.critic.epochs=0", ">= 1 or null"],
    ),
    (
        ["algorithm=[ppo]", "algorithm.ppo.critic.head_init=ones"],
        ["algorithm.ppo.critic.head_init='ones'", "'zero'", "'start_success'"],
    ),
    (
        ["algorithm=[sppo]", "+algorithm.sppo.critic.lr=1"],
        ["algorithm.sppo.critic.lr", "unknown key", "'warmup_steps'", "'head_init'"],
    ),
    (
        ["algorithm=[sppo]", "+algorithm.sppo.lr=1"],
        ["algorithm.sppo.lr: unknown key; allowed: ['actor_lr', 'critic_lr', 'critic', 'params']"],
    ),
    (
        ["algorithm=[grpo]", "+algorithm.grpo.critic.epochs=2"],
        ["algorithm.grpo.critic=", "trains no critic"],
    ),
    (["budget.limit=-5"], ["budget.limit=-5 must be > 0"]),
    (["budget.limit=0"], ["budget.limit=0 must be > 0"]),
    (["budget.limit=inf"], ["budget.limit=inf: must be a finite number > 0"]),
    (["min_free_disk_gb=-1"], ["min_free_disk_gb=-1 must be >= 0"]),
    (["budget.kind=gpu_hours"], ["budget.kind='gpu_hours'", "'samples'", "'flops'"]),
    (["budget=gpu_hours"], ["budget=gpu_hours", "available in 'budget'", "'wall_s'"]),
    (
        ["budget.eval_fractions=[0.5,0.2]"],
        ["budget.eval_fractions=[0.5, 0.2]", "increasing", "[0, 1]"],
    ),
    (["budget.eval_fractions=[0.0,1.5]"], ["budget.eval_fractions=[0.0, 1.5]", "[0, 1]"]),
    (["seeds=0"], ["seeds=0", ">= 1"]),
    (["seed=-1"], ["seed=-1", ">= 0"]),
    (
        ["warmstart.target.accuracy=2"],
        [
            "warmstart.target.accuracy=2",
            "'warmstart.target' is null",
            "accuracy: a number in (0, 1], every: an integer >= 1, max_steps: an integer >= 1",
            "warmstart.target={accuracy:0.6,every:50,max_steps:1500}",
        ],
    ),
    (
        ["trainer.critic_model.hidden_size=64"],
        ["'trainer.critic_model' is null", "an HF id or directory", "'intermediate_size'"],
    ),
    (
        ["engine.rollout.nope=1"],
        ["engine.rollout.nope=1", "'engine.rollout' is a value ('torch')", "engine.rollout="],
    ),
    (["model=hf"], ["model.name_or_path: this config needs a value", "model.name_or_path=<"]),
    (["task.horizon=abc"], ["task.horizon=abc", "[1, 16]"]),
    (["task.horizon=[1,x]"], ["task.horizon=[1, 'x']", "[1, 16]"]),
    (["task.max_problems=0"], ["task.max_problems=0", ">= 1"]),
    (["--foo"], ["--foo: unknown option", "--dry-run", "key=value"]),
    (["seed"], ["seed: an override needs a value", "seed=<value>"]),
    (["suite=claims", "warmstart.target.accuracy=2"], ["warmstart.target.accuracy=2", "(0, 1]"]),
    (["warmstart.lr=-1"], ["warmstart.lr=-1 must be > 0"]),
    (["warmstart.batch_size=0"], ["warmstart.batch_size=0 must be >= 1"]),
    (["warmstart.facts_fraction=2"], ["warmstart.facts_fraction=2 must be in [0, 1]"]),
    (["warmstart.stop_accuracy=5"], ["warmstart.stop_accuracy=5 must be in (0, 1] or null"]),
    (["warmstart.eval_every=0"], ["warmstart.eval_every=0 must be >= 1"]),
    (["warmstart.val_size=-1"], ["warmstart.val_size=-1 must be >= 1"]),
    (["warmstart.difficulty_prompts=-1"], ["warmstart.difficulty_prompts=-1 must be >= 0"]),
    (["warmstart.enabled=maybe"], ["warmstart.enabled='maybe': must be true or false"]),
    (["suite.report=maybe"], ["suite.report='maybe': must be true or false"]),
    (["threads=0"], ["threads=0", ">= 1"]),
    (["trainer.samples_per_step=0"], ["trainer.samples_per_step=0", ">= 1"]),
    (
        ["algorithm=[grpo]", "trainer.samples_per_step=30"],
        ["trainer.samples_per_step=30", "multiple", "(8)"],
    ),
    (["trainer.mini_batches=3"], ["trainer.mini_batches=3", "must divide", "samples_per_step=64"]),
    (["trainer.temperature=-1"], ["trainer.temperature=-1", "[0, 10]"]),
    (["trainer.top_p=0"], ["trainer.top_p=0", "(0, 1]"]),
    (["trainer.grad_clip=-1"], ["trainer.grad_clip=-1", "> 0"]),
    (["trainer.max_consecutive_skips=0"], ["trainer.max_consecutive_skips=0", ">= 1"]),
    (["trainer.checkpoint_every=-1"], ["trainer.checkpoint_every=-1", ">= 0"]),
    (["trainer.nope=1"], ["trainer.nope=1", "unknown key 'nope'", "'samples_per_step'"]),
    (["task.horizon=17"], ["task.horizon=17", "[1, 16]"]),
    (["task.horizon=[2,2]"], ["task.horizon=[2, 2]", "twice"]),
    (
        ["task.horizon=[1,4]", "task.horizon_weights=[1]"],
        ["task.horizon_weights=[1.0]", "one positive weight per horizon"],
    ),
    (
        ["task=gsm8k"],
        ["task=gsm8k", "only speaks ['arith', 'reasoning_gym']", "model.name_or_path"],
    ),
    (
        ["task=gsm8k", "model=hf", "model.name_or_path=x", "task.data_dir=/nonexistent/data"],
        ["dataset 'gsm8k_train'", "/nonexistent/data/gsm8k/train.jsonl", "task.data_dir=DIR"],
    ),
    (["engine.name=vllm"], ["engine.name='vllm'", "['torch', 'verl']"]),
    (["resume=sometimes"], ["resume='sometimes'", "['never', 'auto']"]),
    (["plugins=[no_such_module]"], ["plugins", "'no_such_module'"]),
    # Model shapes transformers would reject inside a worker, or that fail mid-run.
    (["model.hidden_size=130"], ["model.hidden_size=130", "multiple of model.num_heads=4"]),
    (["model.num_heads=0"], ["model.num_heads=0", ">= 1"]),
    (["model.hidden_size=12"], ["model.hidden_size / model.num_heads = 3", "even"]),
    (["model.num_key_value_heads=3"], ["model.num_key_value_heads=3", "divide model.num_heads=4"]),
    (
        # Horizon 2: the longest prompt (6 characters) plus 18 response tokens.
        ["task.horizon=2", "model.max_position_embeddings=16"],
        ["model.max_position_embeddings=16", "24 tokens", "max_position_embeddings>=24"],
    ),
    (
        ["task.horizon=12", "trainer.max_new_tokens=120"],
        ["model.max_position_embeddings=128", "146 tokens"],
    ),
]


@pytest.mark.slow  # the CLI in a subprocess per config: ~4-10 s each
@pytest.mark.parametrize(("overrides", "fragments"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_malformed_config_fails_before_compute(overrides, fragments, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a missing data file must not try the hub (as CI)
    store = [
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"output_dir={tmp_path / 'out'}",
        f"cache_dir={tmp_path / 'cache'}",
    ]
    assert cli_main(["run", *store, *overrides]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sppo-bench: configuration error: "), err
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} not in {err!r}"
    # One clear line: Hydra's own text (its config search path, "not in struct", the override
    # grammar's caret) is not appended after a hint that replaced it, nor OmegaConf's full_key.
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Config search path" not in err and "not in struct" not in err
    assert "full_key" not in err and "Traceback" not in err
    assert not (tmp_path / "mlflow.db").exists()  # nothing started: no store, no warm start
    assert not (tmp_path / "cache").exists()


def test_a_bad_engine_is_refused_before_the_algorithms_log_about_it(tmp_path, capsys, caplog):
    """The engine's name is checked before the algorithms' critic settings, whose note about a
    non-native engine would otherwise precede the refusal."""
    out = [f"output_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}"]
    with caplog.at_level("INFO"):
        assert cli_main(["run", *out, "engine.name=nope", "algorithm=[sppo,ppo]"]) == 2
    assert "engine.name='nope': allowed ['torch', 'verl']" in capsys.readouterr().err
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("benchmarks")]


def test_thirty_or_more_cases():
    assert len(CASES) >= 30


def _refused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def not_mlflow():
    """A real HTTP server on loopback that is not MLflow (every path answers 404)."""

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


# (tracking URI, with {tmp} for the test's directory; fragments the message must contain)
STORE_CASES = [
    (
        "http://127.0.0.1:{refused}",
        ["tracking.uri=http://127.0.0.1:", "no tracking server", "refused"],
    ),
    ("{not_mlflow}", ["tracking.uri=http://127.0.0.1:", "answered HTTP 404", "not an MLflow"]),
    ("http://", ["tracking.uri=http://", "no host"]),
    ("{tmp}/mlruns", ["mlruns", "a path", "file store", "sqlite:///<path>"]),
    ("file://{tmp}/mlruns", ["file://", "a path", "allowed:"]),
    ("ftp://127.0.0.1/x", ["scheme 'ftp'", "allowed:"]),
    ("sqlite://", ["tracking.uri=sqlite://", "sqlite:///<path to a .db file>"]),
    ("sqlite:///{tmp}/notadb.db", ["notadb.db is not a SQLite database"]),
    ("sqlite:///{tmp}/adir", ["adir is not a file"]),
    ("sqlite:////proc/sppo.db", ["tracking.uri=sqlite:////proc/sppo.db", "not writable"]),
    # psycopg 3 is PostgreSQL's driver here: the URI is named as used, postgresql+psycopg://
    ("postgresql://u@127.0.0.1:{refused}/db", ["tracking.uri=postgresql", "cannot connect"]),
]


@pytest.mark.slow  # the CLI in a subprocess per config: ~4-10 s each
@pytest.mark.parametrize(("uri", "fragments"), STORE_CASES, ids=[c[0] for c in STORE_CASES])
def test_unusable_store_fails_at_start(uri, fragments, tmp_path, capsys, not_mlflow):
    (tmp_path / "notadb.db").write_text("not sqlite")
    (tmp_path / "adir").mkdir()
    uri = uri.format(tmp=tmp_path, refused=_refused_port(), not_mlflow=not_mlflow)
    out = [f"output_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}"]
    t0 = time.monotonic()
    assert cli_main(["run", *out, f"tracking.uri={uri}"]) == 2
    assert time.monotonic() - t0 < 60  # the probe's own timeout is 5 s; never MLflow's retries
    err = capsys.readouterr().err
    assert "sppo-bench: cannot start: " in err
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} not in {err!r}"
    # One clear message: Hydra's own text (its config search path, "not in struct") is not
    # appended after a hint that replaced it.
    assert "Config search path" not in err and "not in struct" not in err
    assert not (tmp_path / "cache" / "warmstart").exists()  # no warm start began
    assert not (tmp_path / "mlflow.db").exists()


def test_bad_tracking_uri_from_the_environment_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{_refused_port()}")
    out = [f"output_dir={tmp_path / 'out'}", f"cache_dir={tmp_path / 'cache'}"]
    assert cli_main(["run", *out]) == 2
    assert "MLFLOW_TRACKING_URI=http://127.0.0.1:" in capsys.readouterr().err
