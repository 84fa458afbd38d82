"""The registry: decorator, lookups, refused declarations, errors in full and entry-point plugin
discovery (each plugin loaded once, a broken one warning once)."""

from __future__ import annotations

import contextlib
import logging
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import algorithms.base as base
from algorithms import (
    Algorithm,
    ConfigError,
    UnknownAlgorithmError,
    algorithm_class,
    get_algorithm,
    list_algorithms,
    register_algorithm,
)
from algorithms.base import ENTRY_POINT_GROUP, _reset_plugins_loaded, _restore_registry, _unregister
from algorithms.common import outcome_to_tokens
from algorithms.grpo import GRPOConfig

BUILTINS = [
    "cispo",
    "dapo",
    "dr_grpo",
    "gmpo",
    "grpo",
    "grpo2",
    "gspo",
    "ppo",
    "ppo_inert_critic",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "remax",
    "rloo",
    "spo",
    "sppo",
]


class _Constant(Algorithm):
    """A = R on every token: the smallest complete algorithm."""

    def advantages(
        self, rewards, response_mask, group_ids, values=None, baseline_rewards=None, token_kl=None
    ):
        return outcome_to_tokens(rewards, response_mask), None


def test_builtins_are_registered_and_sorted():
    names = list_algorithms()
    assert set(BUILTINS) <= set(names)
    assert names == sorted(names)


def test_register_from_a_test_module_then_unregister():
    try:
        cls = register_algorithm("test_constant")(_Constant)
        assert cls is _Constant and cls.name == "test_constant"
        assert "test_constant" in list_algorithms()
        algo = get_algorithm("test_constant", clip_ratio_high=0.3)
        assert isinstance(algo, _Constant) and algo.config.clip_ratio_high == 0.3
        adv, _ = algo.advantages(torch.tensor([2.0]), torch.ones(1, 2), None)
        assert adv.tolist() == [[2.0, 2.0]]
    finally:
        _unregister("test_constant")
    assert "test_constant" not in list_algorithms()


def test_duplicate_name_raises():
    with pytest.raises(ValueError, match="'grpo' is already registered"):
        register_algorithm("grpo")(type("Other", (_Constant,), {}))


def test_register_rejects_incomplete_classes():
    class Abstract(Algorithm):
        pass

    with _restore_registry():
        with pytest.raises(TypeError, match="advantages"):
            register_algorithm("abstract")(Abstract)
        with pytest.raises(TypeError, match="Algorithm subclass"):
            register_algorithm("notalgo")(dict)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="must match"):
            register_algorithm("bad name")
        assert "abstract" not in list_algorithms()


def test_unknown_algorithm_lists_registered_names():
    with pytest.raises(
        UnknownAlgorithmError, match="unknown algorithm 'sppo2'; registered: cispo, dapo, dr_grpo"
    ):
        get_algorithm("sppo2")
    # both a KeyError and a ConfigError, so either way of catching it works
    with pytest.raises(KeyError):
        algorithm_class("sppo2")
    with pytest.raises(ConfigError):
        algorithm_class("sppo2")


def test_restore_registry_undoes_registrations():
    with _restore_registry():
        register_algorithm("temp_algo")(type("Temp", (_Constant,), {}))
        assert "temp_algo" in list_algorithms()
    assert "temp_algo" not in list_algorithms()


# --- refused declarations, repr and errors -----------------------------------------------------


class _Free(Algorithm):
    """A complete critic-free algorithm to register under broken declarations."""

    def advantages(self, rewards, response_mask, group_ids, **_):
        raise NotImplementedError


def test_registration_refuses_a_config_that_is_not_an_algorithm_config():
    @dataclass(frozen=True)
    class PlainDataclass:  # a dataclass, but not an AlgorithmConfig
        x: int = 0

    class NotADataclass:  # neither
        pass

    for config in (PlainDataclass, NotADataclass):
        bad = type("BadConfig", (_Free,), {"Config": config})
        with (
            _restore_registry(),
            pytest.raises(
                TypeError, match=r"^BadConfig\.Config must be an AlgorithmConfig dataclass$"
            ),
        ):
            register_algorithm("bad-config")(bad)


def test_registration_refuses_an_unknown_critic_kind():
    bad = type("BadCritic", (_Free,), {"critic": "value"})
    with (
        _restore_registry(),
        pytest.raises(
            TypeError,
            match=r"^BadCritic\.critic='value' is not one of \('none', 'token', 'prompt'\)$",
        ),
    ):
        register_algorithm("bad-critic")(bad)


def test_unregistering_an_unknown_name_is_a_no_op():
    with _restore_registry():
        _unregister("never-registered")
        assert "grpo" in base._REGISTRY


def test_repr_names_the_class_the_name_and_the_config():
    assert repr(get_algorithm("grpo")) == f"GRPO(name='grpo', config={GRPOConfig()!r})"


def test_unknown_algorithm_error_prints_its_message_only():
    assert str(UnknownAlgorithmError("unknown algorithm 'x'")) == "unknown algorithm 'x'"
    assert str(UnknownAlgorithmError()) == ""


# --- entry-point plugins --------------------------------------------------------------------

PLUGIN_MODULE = "sppo_bench_test_plugin_mod"
MISSING = "sppo_bench_no_such_module_xyz"


@contextlib.contextmanager
def _installed_plugin(root: Path, monkeypatch, source: str, entry_points: list[str]):
    """``source`` as the module :data:`PLUGIN_MODULE` of an installed distribution whose
    ``entry_points`` (``name = target`` lines) are in the algorithms' group; inside, the
    registry is restored afterwards and the plugins are loaded again on the next lookup."""
    (root / f"{PLUGIN_MODULE}.py").write_text(textwrap.dedent(source))
    dist = root / "sppo_bench_test_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sppo-bench-test-plugin\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        "".join(f"{line}\n" for line in [f"[{ENTRY_POINT_GROUP}]", *entry_points])
    )
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(sys.modules, PLUGIN_MODULE, raising=False)
    try:
        with _restore_registry():
            _reset_plugins_loaded()
            yield
    finally:
        sys.modules.pop(PLUGIN_MODULE, None)


def test_entry_point_plugins_are_discovered(tmp_path, monkeypatch, caplog):
    source = """
        from algorithms import Algorithm, register_algorithm
        from algorithms.common import outcome_to_tokens


        class _Base(Algorithm):
            def advantages(self, rewards, response_mask, group_ids, values=None,
                           baseline_rewards=None, token_kl=None):
                return outcome_to_tokens(rewards, response_mask), None


        @register_algorithm("plugin_decorated")
        class Decorated(_Base):
            pass


        class Undecorated(_Base):
            pass
        """
    entry_points = [
        f"plugin_decorated = {PLUGIN_MODULE}",
        f"plugin_class = {PLUGIN_MODULE}:Undecorated",
        f"plugin_broken = {MISSING}",
    ]
    with (
        _installed_plugin(tmp_path, monkeypatch, source, entry_points),
        caplog.at_level(logging.WARNING, logger="algorithms.base"),
    ):
        names = list_algorithms()
        # a module entry point registers through its decorator; a class entry point is
        # registered under the entry point's name; a broken one only warns
        assert {"plugin_decorated", "plugin_class"} <= set(names)
        assert set(BUILTINS) <= set(names)
        assert "plugin_broken" not in names
        assert "plugin_broken" in caplog.text and "ModuleNotFoundError" in caplog.text
        algo = get_algorithm("plugin_class")
        assert algo.name == "plugin_class"
        adv, _ = algo.advantages(torch.tensor([1.0]), torch.ones(1, 1), None)
        assert adv.item() == 1.0
        # loaded once: a second lookup neither re-imports nor warns again
        caplog.clear()
        assert list_algorithms() == names
        assert caplog.text == ""
    assert "plugin_decorated" not in list_algorithms()


def test_plugins_load_once_each_and_only_broken_ones_warn(tmp_path, monkeypatch, caplog):
    """A broken entry point listed twice warns once and does not stop the scan; a module entry
    point (registering by its decorator) and a class that is no Algorithm are loaded silently."""
    source = """
        from algorithms import Algorithm, register_algorithm


        @register_algorithm("mutants_plugin_decorated")
        class Decorated(Algorithm):
            def advantages(self, rewards, response_mask, group_ids, **_):
                raise NotImplementedError


        class NotAnAlgorithm:
            pass
        """
    entry_points = [
        f"mutants_broken = {MISSING}",
        f"mutants_broken = {MISSING}",
        f"mutants_module = {PLUGIN_MODULE}",
        f"mutants_not_an_algorithm = {PLUGIN_MODULE}:NotAnAlgorithm",
    ]
    with (
        _installed_plugin(tmp_path, monkeypatch, source, entry_points),
        caplog.at_level(logging.WARNING, logger="algorithms.base"),
    ):
        names = base.list_algorithms()
        assert "mutants_plugin_decorated" in names
        assert not {"mutants_broken", "mutants_module", "mutants_not_an_algorithm"} & set(names)
        assert [r.getMessage() for r in caplog.records] == [
            f"could not load algorithm plugin 'mutants_broken' ({MISSING}): "
            f"ModuleNotFoundError: No module named '{MISSING}'"
        ]


@pytest.mark.parametrize(
    "first", ["algorithms", "algorithms.configkit", *(f"algorithms.{m}" for m in base.BUILTINS)]
)
def test_whichever_module_is_imported_first_the_registry_holds_every_builtin(first):
    """The package loads its built-ins on the registry's first use, not on import. A fresh
    interpreter that imports one module first (a built-in that imports another, as CISPO
    imports GRPO; the kit alone) still finds all of them, and a user's registration under a
    built-in's name is refused before any lookup."""
    import subprocess

    code = (
        f"import {first}\n"
        "import algorithms.base as base\n"
        "from algorithms import algorithm_class, list_algorithms\n"
        "print(','.join(n for n in list_algorithms()"
        " if algorithm_class(n).__module__.startswith('algorithms.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    builtins = sorted(
        n for n, c in base._REGISTRY.items() if c.__module__.startswith("algorithms.")
    )
    modules = {base._REGISTRY[n].__module__ for n in builtins}
    assert modules == {f"algorithms.{m}" for m in base.BUILTINS} and out == ",".join(builtins)
    clash = (
        "from algorithms.base import register_algorithm\n"
        "from algorithms.grpo import GRPO\n"
        "try:\n"
        "    register_algorithm('rloo')(type('Mine', (GRPO,), {}))\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    if first == "algorithms.configkit":
        said = subprocess.run(
            [sys.executable, "-c", clash], capture_output=True, text=True, check=True
        ).stdout
        assert "'rloo' is already registered by algorithms.rloo" in said
