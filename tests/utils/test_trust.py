"""The trust model (rlmod/utils/trust.py): configs and checkpoints from strangers import and
run nothing outside rlmod and the packages the user trusts, and only objects of the kind
each field takes."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlmod.algorithms import Algorithm
from rlmod.algorithms.ppo import PPOConfig
from rlmod.cli import main
from rlmod.core import RLModule
from rlmod.errors import CheckpointError
from rlmod.utils.trust import UntrustedImportError, resolve_import_path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Each import-path field, and a value of the wrong kind from inside rlmod (importable, so
# only the kind check can refuse it).
FIELDS = {
    "env": {"env": "{}"},
    "learner_connector": {"learner_connector": "{}"},
    "env_to_module_connector": {"env_to_module_connector": "{}"},
    "policy_mapping_fn": {"policy_mapping_fn": "{}"},
}
DANGEROUS = ["subprocess:run", "os:system", "builtins:eval"]
WRONG_KIND = "rlmod.utils.seeding:seed_everything"


@pytest.fixture
def evil_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package that creates a marker file when imported: nothing may import it."""
    marker = tmp_path / "imported"
    (tmp_path / "evil_pkg.py").write_text(
        textwrap.dedent(f"""
        open({str(marker)!r}, "w").close()
        def make(env_config):
            open({str(marker)!r} + "-called", "w").close()
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return marker


def _config_with(field: str, path: str) -> dict[str, Any]:
    data: dict[str, Any] = {"env": "CartPole-v1", field: {"__import__": path}}
    if field == "policy_mapping_fn":
        data["policies"] = {"__set__": ["p0"]}
    return data


@pytest.mark.parametrize("path", [*DANGEROUS, "evil_pkg:make"])
@pytest.mark.parametrize("field", list(FIELDS))
def test_config_json_naming_code_outside_rlmod_is_refused_before_import(
    field: str, path: str, evil_package: Path
) -> None:
    with pytest.raises(UntrustedImportError, match=rf"{field}: refusing to import '{path}'"):
        PPOConfig.from_dict(_config_with(field, path))
    assert "evil_pkg" not in sys.modules and not evil_package.exists()


@pytest.mark.parametrize("field", list(FIELDS))
def test_rlmod_functions_of_the_wrong_kind_are_refused(field: str) -> None:
    with pytest.raises(
        UntrustedImportError,
        match=rf"{field}: '{WRONG_KIND}' is a function, "
        r"but this field takes",
    ):
        PPOConfig.from_dict(_config_with(field, WRONG_KIND))


def test_the_module_class_field_is_checked_too(evil_package: Path) -> None:
    for path, match in [
        ("subprocess:Popen", "refusing to import"),
        ("evil_pkg:make", "refusing to import"),
        (WRONG_KIND, "but this field takes an rlmod RLModule subclass"),
    ]:
        spec = {"__rl_module_spec__": {"module_class": path}}
        with pytest.raises(UntrustedImportError, match=match):
            PPOConfig.from_dict({"env": "CartPole-v1", "rl_module_spec": spec})
    assert not evil_package.exists()


def test_rlmod_train_config_refuses_subprocess_run(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    marker = tmp_path / "ran"
    config = {
        "env": {"__import__": "subprocess:run"},
        "env_config": {"args": ["touch", str(marker)]},
    }
    code = main(
        [
            "train",
            "--config",
            json.dumps(config),
            "--stop-iters",
            "1",
            "--run-dir",
            str(tmp_path / "run"),
        ]
    )
    assert code == 2 and not marker.exists()
    assert "env: refusing to import 'subprocess:run'" in capsys.readouterr().err


def test_a_trusted_user_package_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_envs.py").write_text(
        textwrap.dedent("""
        import gymnasium as gym
        class MyCartPole(gym.Wrapper):
            def __init__(self, env_config=None):
                super().__init__(gym.make("CartPole-v1"))
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    data = {"env": {"__import__": "my_envs:MyCartPole"}}
    with pytest.raises(UntrustedImportError, match=r"trusted_modules=\['my_envs'\]"):
        PPOConfig.from_dict(data)
    config = PPOConfig.from_dict(data, trusted_modules=["my_envs"])
    assert config.env.__name__ == "MyCartPole"
    algo = config.training(train_batch_size=64, minibatch_size=32).build_algo()
    path = algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    with pytest.raises(CheckpointError, match="refusing to import 'my_envs:MyCartPole'"):
        Algorithm.from_checkpoint(path)
    Algorithm.from_checkpoint(path, trusted_modules=["my_envs"]).stop()
    Algorithm.from_checkpoint(path, env=config.env).stop()  # or pass the class itself


def test_the_shipped_examples_load() -> None:
    data = json.loads((EXAMPLES / "curiosity" / "frozenlake_icm.json").read_text())
    config = PPOConfig.from_dict(data)
    assert config.rl_module_spec.rl_module_specs["icm"].learner_only


@pytest.fixture
def checkpoint(cartpole_config: PPOConfig, tmp_path: Path) -> Path:
    algo = cartpole_config.build_algo()
    path = Path(algo.save_to_path(tmp_path / "ckpt"))
    algo.stop()
    return path


@pytest.mark.parametrize("path", [*DANGEROUS, "evil_pkg:make", WRONG_KIND])
@pytest.mark.parametrize("field", ["env", "learner_connector", "policy_mapping_fn"])
def test_a_checkpoint_naming_bad_code_is_refused(
    checkpoint: Path, evil_package: Path, field: str, path: str
) -> None:
    file = checkpoint / "algorithm_config.json"
    data = json.loads(file.read_text())
    data["settings"][field] = {"__import__": path}
    file.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=rf"algorithm_config.json: {field}: "):
        Algorithm.from_checkpoint(checkpoint)
    assert "evil_pkg" not in sys.modules and not evil_package.exists()


@pytest.mark.parametrize("path", ["subprocess:Popen", "os:system", "evil_pkg:make", WRONG_KIND])
def test_checkpoint_classes_are_checked(checkpoint: Path, evil_package: Path, path: str) -> None:
    meta_file = checkpoint / "learner_group/learner/rl_module/default_policy/metadata.json"
    meta = json.loads(meta_file.read_text())
    meta["module_spec"]["module_class"] = path
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="module_class"):
        RLModule.from_checkpoint(checkpoint)
    root = checkpoint / "metadata.json"
    data = json.loads(root.read_text())
    data["class"] = path
    root.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="metadata.json: class"):
        Algorithm.from_checkpoint(checkpoint)
    assert "evil_pkg" not in sys.modules and not evil_package.exists()


def test_malformed_import_paths() -> None:
    for bad in ["os.system", "a:b:c", 5]:
        with pytest.raises(UntrustedImportError, match="is not an import path"):
            resolve_import_path(bad, setting="env", kind="env")


# ---------------------------------------------------------------------- issue 30, item 5
@pytest.fixture
def trusted_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package `mypkg` the tests trust: its own env classes and functions (some defined in
    a submodule and re-exported), and names it merely imports from elsewhere."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_impl.py").write_text(
        textwrap.dedent("""
        import gymnasium as gym

        class MyCartPole(gym.Wrapper):
            def __init__(self, env_config=None):
                super().__init__(gym.make("CartPole-v1"))

            @classmethod
            def create(cls, env_config):
                return cls(env_config)

            class Inner(gym.Wrapper):
                def __init__(self, env_config=None):
                    super().__init__(gym.make("CartPole-v1"))

        def make(env_config):
            return MyCartPole(env_config)
    """)
    )
    (pkg / "envs.py").write_text(
        textwrap.dedent("""
        import functools
        import os
        import subprocess
        from os import environ
        from subprocess import run

        import gymnasium as gym
        from gymnasium.envs.classic_control.cartpole import CartPoleEnv

        from mypkg._impl import MyCartPole, make

        FACTORY = MyCartPole.Inner
        partial_make = functools.partial(make)
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("RLMOD_TEST_SECRET", "hunter2-do-not-print")
    yield "mypkg"
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]  # the next test's mypkg lives in another tmp_path


WALKS_OUT = [
    "mypkg.envs:os.environ.update",  # calls os.environ.update(env_config)
    "mypkg.envs:os.system",
    "mypkg.envs:subprocess.run",
    "mypkg.envs:run",  # `from subprocess import run`: defined in subprocess
    "mypkg.envs:environ.update",
    "mypkg.envs:gym.Env",
    "mypkg.envs:CartPoleEnv",  # gymnasium's class, imported into a trusted module
    "mypkg.envs:MyCartPole.reset",  # inherited from gymnasium.Wrapper: gymnasium's code
    "mypkg.envs:MyCartPole.spec",  # a property object (builtins)
    "mypkg.envs:partial_make",  # a partial's own type is functools'
]


@pytest.mark.parametrize("path", WALKS_OUT)
@pytest.mark.parametrize("field", ["env", "policy_mapping_fn", "learner_connector"])
def test_the_name_after_the_colon_may_not_walk_out_of_trusted_code(
    trusted_package: str, field: str, path: str
) -> None:
    before = dict(os.environ)
    with pytest.raises(
        UntrustedImportError, match=rf"{field}: refusing to use '{re.escape(path)}'"
    ) as e:
        PPOConfig.from_dict(_config_with(field, path), trusted_modules=[trusted_package])
    assert dict(os.environ) == before
    assert "hunter2" not in str(e.value)  # the error never prints the process environment


def test_a_path_through_rlmod_may_not_walk_into_gymnasium() -> None:
    import gymnasium.envs.classic_control.cartpole  # noqa: F401 - so that the walk resolves

    path = "rlmod.env.registry:gym.envs.classic_control.cartpole.CartPoleEnv"
    with pytest.raises(
        UntrustedImportError, match=r"'rlmod.env.registry:gym' is the module 'gymnasium'"
    ):
        resolve_import_path(path, setting="env", kind="env")


def test_a_checkpoint_may_not_walk_out_of_a_trusted_package(
    trusted_package: str, tmp_path: Path
) -> None:
    config = PPOConfig.from_dict(
        {"env": {"__import__": "mypkg.envs:MyCartPole"}}, trusted_modules=[trusted_package]
    )
    algo = config.training(train_batch_size=64, minibatch_size=32).build_algo()
    path = Path(algo.save_to_path(tmp_path / "ckpt"))
    algo.stop()
    file = path / "algorithm_config.json"
    data = json.loads(file.read_text())
    data["settings"]["env"] = {"__import__": "mypkg.envs:os.environ.update"}
    file.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="refusing to use 'mypkg.envs:os.environ.update'"):
        Algorithm.from_checkpoint(path, trusted_modules=[trusted_package])
    assert "RLMOD_TEST_SECRET" in os.environ and "mypkg" not in os.environ


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("mypkg.envs:MyCartPole", "env"),  # re-exported from mypkg._impl: still mypkg's
        ("mypkg._impl:MyCartPole", "env"),
        ("mypkg.envs:MyCartPole.Inner", "env"),  # a nested class
        ("mypkg.envs:FACTORY", "env"),
        ("mypkg.envs:make", "env"),  # a function
        ("mypkg.envs:MyCartPole.create", "env"),  # a classmethod, bound to a trusted class
        ("mypkg.envs:make", "callable"),
    ],
)
def test_what_a_trusted_package_defines_still_resolves(
    trusted_package: str, path: str, kind: str
) -> None:
    obj = resolve_import_path(path, setting="env", kind=kind, trusted_modules=[trusted_package])
    assert obj.__module__ == "mypkg._impl"


def test_rlmod_functions_reexported_by_a_trusted_package_keep_rlmods_rules(
    trusted_package: str, tmp_path: Path
) -> None:
    """Trusting mypkg trusts mypkg's functions for any callable field, not every rlmod
    function that mypkg happens to import."""
    (tmp_path / "mypkg" / "reexport.py").write_text(
        "from rlmod.utils.seeding import seed_everything\n"
    )
    with pytest.raises(UntrustedImportError, match="is a function, but this field takes"):
        resolve_import_path(
            "mypkg.reexport:seed_everything",
            setting="env",
            kind="env",
            trusted_modules=[trusted_package],
        )


@pytest.mark.parametrize("trusted", ["mypkg", ["my pkg"], [""], [".mypkg"], [3]])
def test_trusted_modules_must_be_a_list_of_package_names(trusted: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="trusted_modules must be"):
        resolve_import_path("mypkg:make", setting="env", kind="env", trusted_modules=trusted)


@pytest.mark.parametrize(
    "path",
    [
        "rlmod.env.registry:",
        "rlmod:env..registry",
        "rlmod env:x",
        ":x",
        "rlmod.:x",
        # dunder names lead out of any module (globals, bases, subclasses, builtins)
        "rlmod.env.registry:make_env.__globals__",
        "rlmod.env.registry:EnvCreator.__base__",
        "rlmod.core:RLModule.__subclasses__",
        "rlmod.env.registry:__builtins__",
    ],
)
def test_import_paths_must_be_dotted_names(path: str) -> None:
    with pytest.raises(UntrustedImportError, match="is not an import path"):
        resolve_import_path(path, setting="env", kind="env")


def test_a_refused_function_is_told_which_functions_a_callable_field_takes() -> None:
    """It read "is a function, but this field takes a function": say which ones."""
    with pytest.raises(
        UntrustedImportError,
        match=re.escape(
            "is a function, but this field takes a function defined in a package you trust "
            "(of rlmod's own functions, only those a field lists)"
        ),
    ):
        resolve_import_path("rlmod.utils.seeding:seed_everything", setting="x", kind="callable")
