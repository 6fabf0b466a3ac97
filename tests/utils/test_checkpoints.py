"""Checkpoints (rlmod/utils/checkpoints.py): round trips, exact resume, partial restore,
inference-only loads, corrupt files, atomic saves and keep_last_n."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlmod.algorithms import Algorithm
from rlmod.algorithms.ppo import PPO, PPOConfig
from rlmod.core import MultiRLModule, RLModule
from rlmod.errors import CheckpointError, UnknownModuleIDError
from rlmod.testing import MultiAgentCartPole
from rlmod.utils import checkpoints
from rlmod.utils.state_files import read_state, write_state

MODULES = "learner_group/learner/rl_module"


def _mapping(agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
    return f"p{agent_id % 2}"


def ma_config() -> PPOConfig:
    return (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 4})
        .env_runners(num_envs_per_env_runner=2)
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=_mapping)
        .training(train_batch_size=128, minibatch_size=64, num_epochs=2)
        .debugging(seed=0)
    )


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def trained(cartpole_config: PPOConfig, tmp_path: Path) -> tuple[PPO, str]:
    algo = cartpole_config.training(use_kl_loss=True).build_algo()
    algo.train()
    algo.train()
    return algo, algo.save_to_path(tmp_path / "ckpt")


# ---------------------------------------------------------------------- round trips
def test_layout_is_json_and_safetensors_by_component(trained: tuple[PPO, str]) -> None:
    _, path = trained
    files = sorted(str(p.relative_to(path)) for p in Path(path).rglob("*") if p.is_file())
    assert all(f.endswith((".json", ".safetensors")) for f in files)
    module = f"{MODULES}/default_policy"  # a real directory per module, as RLlib's
    for part in (module, "learner_group/learner/optimizer"):
        assert f"{part}/metadata.json" in files and f"{part}/state.safetensors" in files
    assert f"{MODULES}/metadata.json" in files and f"{MODULES}/state.safetensors" not in files
    assert json.loads((Path(path) / MODULES / "metadata.json").read_text())["module_ids"] == [
        "default_policy"
    ]
    assert "env_runner/metadata.json" in files  # CartPole's connectors hold no arrays
    meta = json.loads((Path(path) / "metadata.json").read_text())
    assert meta["class"] == "rlmod.algorithms.ppo.ppo:PPO" and meta["iteration"] == 2
    assert meta["checkpoint_version"] == checkpoints.CHECKPOINT_VERSION


def test_save_and_restore_give_identical_outputs_and_optimizer_state(
    trained: tuple[PPO, str],
) -> None:
    algo, path = trained
    restored = Algorithm.from_checkpoint(path)
    assert isinstance(restored, PPO) and restored.iteration == 2
    obs = torch.randn(16, 4)
    for a in (algo, restored):
        a.fwd = a.learner_group.learner.module["default_policy"].forward_train({"obs": obs})
    for key in ("action_dist_inputs", "embeddings"):
        assert torch.equal(algo.fwd[key], restored.fwd[key])
    before = algo.learner_group.learner._optimizers["default_policy"].state_dict()
    after = restored.learner_group.learner._optimizers["default_policy"].state_dict()
    assert before["step"] == after["step"] and before["lr"] == after["lr"]
    assert all(
        torch.equal(x, y)
        for x, y in zip(
            before["exp_avg"] + before["exp_avg_sq"],
            after["exp_avg"] + after["exp_avg_sq"],
            strict=True,
        )
    )
    # The EnvRunner acts with the restored weights, and counters continue.
    runner_w = restored.env_runner.module.state_dict()
    assert _equal(
        {
            k: v
            for k, v in _weights(restored.learner_group.learner.module["default_policy"]).items()
            if k in runner_w
        },
        dict(runner_w),
    )
    lifetime = algo.metrics.num_env_steps_lifetime
    assert restored.metrics.num_env_steps_lifetime == lifetime
    assert restored.train()["num_env_steps_sampled_lifetime"] > lifetime
    algo.stop()
    restored.stop()


def test_restored_learner_makes_the_bit_identical_update(
    cartpole_config: PPOConfig, tmp_path: Path
) -> None:
    config = cartpole_config.training(
        use_kl_loss=True, kl_target=1e-4, lr=[[0, 1e-3], [10_000, 1e-4]]
    )
    algo = config.build_algo()
    for _ in range(2):
        algo.train()
    path = algo.save_to_path(tmp_path / "ckpt")
    batch = algo.env_runner_group.sample()
    timesteps = {"num_env_steps_sampled_lifetime": algo.metrics.num_env_steps_lifetime}
    restored = Algorithm.from_checkpoint(path)
    learners = [algo.learner_group.learner, restored.learner_group.learner]
    assert learners[0].curr_kl_coeffs == learners[1].curr_kl_coeffs
    results = [lrn.update(batch, timesteps=timesteps) for lrn in learners]
    a, b = (lrn.get_state() for lrn in learners)
    assert _equal(a["rl_module"]["default_policy"], b["rl_module"]["default_policy"])
    opt_a, opt_b = a["optimizer"]["default_policy"], b["optimizer"]["default_policy"]
    assert opt_a["step"] == opt_b["step"] and opt_a["lr"] == opt_b["lr"] < 1e-3
    assert all(torch.equal(x, y) for x, y in zip(opt_a["exp_avg"], opt_b["exp_avg"], strict=True))
    assert a["curr_kl_coeffs"] == b["curr_kl_coeffs"] != {"default_policy": 0.2}
    assert results[0]["default_policy"] == results[1]["default_policy"]
    algo.stop()
    restored.stop()


def test_restoring_one_module_leaves_the_others_bit_for_bit(tmp_path: Path) -> None:
    algo = ma_config().build_algo()
    algo.train()
    path = algo.save_to_path(tmp_path / "ckpt")
    learner = algo.learner_group.learner
    saved_p0 = _weights(learner.module["p0"])
    algo.train()
    trained_p1 = _weights(learner.module["p1"])
    assert not _equal(saved_p0, _weights(learner.module["p0"]))
    algo.restore_from_path(path, component="learner_group/learner/rl_module/p0")
    assert _equal(saved_p0, _weights(learner.module["p0"]))
    assert _equal(trained_p1, _weights(learner.module["p1"]))
    runner_p0 = algo.env_runner.module["p0"].state_dict()  # synced to the EnvRunner
    assert all(torch.equal(v, saved_p0[k]) for k, v in runner_p0.items())
    # RLlib's way: the path points at the module itself.
    algo.train()
    module_path = Path(path) / "learner_group" / "learner" / "rl_module" / "p0"
    algo.restore_from_path(module_path, component="learner_group/learner/rl_module/p0")
    assert _equal(saved_p0, _weights(learner.module["p0"]))
    with pytest.raises(UnknownModuleIDError, match="no such module"):
        algo.restore_from_path(path, component="learner_group/learner/rl_module/p7")
    with pytest.raises(CheckpointError, match="no checkpoint component 'bogus'"):
        algo.restore_from_path(path, component="bogus")
    algo.stop()


def test_a_lambda_mapping_fn_must_be_passed_at_load(tmp_path: Path) -> None:
    config = ma_config().multi_agent(policy_mapping_fn=lambda aid, ep, **kw: f"p{aid % 2}")
    algo = config.build_algo()
    path = algo.save_to_path(tmp_path / "ckpt")
    algo.stop()
    with pytest.raises(
        CheckpointError,
        match=r"policy_mapping_fn was <function .*lambda.*"
        r"from_checkpoint\(path, policy_mapping_fn=\.\.\.\)",
    ):
        Algorithm.from_checkpoint(path)
    restored = Algorithm.from_checkpoint(path, policy_mapping_fn=_mapping)
    assert restored.train()["training_iteration"] == 1
    restored.stop()


# ---------------------------------------------------------------------- inference-only
def test_inference_only_load_has_fewer_parameters_and_the_same_actions(
    trained: tuple[PPO, str],
) -> None:
    algo, path = trained
    full = algo.learner_group.learner.module["default_policy"]
    small = RLModule.from_checkpoint(path, inference_only=True)
    assert small.inference_only and small.num_parameters() < full.num_parameters()
    assert not any(k.startswith(("vf.", "vf_encoder.")) for k in small.state_dict())
    obs = torch.randn(32, 4)
    assert torch.equal(
        small.forward_inference({"obs": obs})["action_dist_inputs"],
        full.forward_inference({"obs": obs})["action_dist_inputs"],
    )
    same = RLModule.from_checkpoint(Path(path) / "learner_group/learner/rl_module")
    assert same.num_parameters() == full.num_parameters()


def test_one_module_of_many_loads_alone(tmp_path: Path) -> None:
    algo = ma_config().build_algo()
    path = algo.save_to_path(tmp_path / "ckpt")
    p1 = RLModule.from_checkpoint(Path(path) / "learner_group/learner/rl_module/p1")
    assert _equal(_weights(p1), _weights(algo.learner_group.learner.module["p1"]))
    with pytest.raises(CheckpointError, match="say which one with module_id"):
        RLModule.from_checkpoint(path)
    multi = MultiRLModule.from_checkpoint(path, inference_only=True)
    assert sorted(multi.keys()) == ["p0", "p1"] and all(m.inference_only for _, m in multi.items())
    assert _equal(_weights(multi["p0"]), _weights(algo.env_runner.module["p0"]))
    algo.stop()


def test_module_state_files_round_trip_numpy_and_nested_values(tmp_path: Path) -> None:
    state = {
        "a/b": {"x": torch.arange(6.0).reshape(2, 3), "flag": torch.tensor([True])},
        "n": np.arange(4, dtype=np.int32),
        "lst": [torch.zeros(0), 1.5, "s", None],
        "big": 2**100,
        "scalar": np.float64(2.5),
    }
    write_state(tmp_path, state)
    back = read_state(tmp_path)
    assert torch.equal(back["a/b"]["x"], state["a/b"]["x"])
    assert back["a/b"]["flag"].dtype == torch.bool
    assert isinstance(back["n"], np.ndarray) and back["n"].dtype == np.int32
    assert back["lst"][1:] == [1.5, "s", None] and back["lst"][0].numel() == 0
    assert back["big"] == 2**100 and back["scalar"] == 2.5
    assert read_state(tmp_path, select=["n"]).keys() == {"n"}
    with pytest.raises(TypeError, match="at a~1b/obj is a object"):
        write_state(tmp_path, {"a/b": {"obj": object()}})


# ---------------------------------------------------------------------- bad checkpoints
def _break(path: Path, how: str) -> Path:
    weights = path / MODULES / "default_policy/state.safetensors"
    if how == "truncated":
        data = weights.read_bytes()
        weights.write_bytes(data[: len(data) // 2])
        return weights
    if how == "garbage":
        weights.write_bytes(b"\x00" * 64)
        return weights
    if how == "missing":
        weights.unlink()
        return weights
    meta = path / "metadata.json"
    data = json.loads(meta.read_text())
    if how == "version":
        data["checkpoint_version"] = "99.0"
    elif how == "version_type":
        data["checkpoint_version"] = 1
    meta.write_text(json.dumps(data))
    return meta


@pytest.mark.parametrize(
    ("how", "match"),
    [
        ("truncated", "not a valid safetensors file"),
        ("garbage", "not a valid safetensors file"),
        ("missing", "state.safetensors is missing"),
        ("version", "checkpoint_version '99.0' is not supported"),
        ("version_type", "field 'checkpoint_version' must be a string"),
    ],
)
def test_broken_checkpoints_name_the_file_and_field(
    trained: tuple[PPO, str], how: str, match: str
) -> None:
    _, path = trained
    file = _break(Path(path), how)
    with pytest.raises(CheckpointError, match=match) as info:
        Algorithm.from_checkpoint(path)
    assert str(file.relative_to(path)) in str(info.value)


def test_a_missing_metadata_file_and_a_wrong_json_type(trained: tuple[PPO, str]) -> None:
    _, path = trained
    config_file = Path(path) / "algorithm_config.json"
    data = json.loads(config_file.read_text())
    data["settings"]["lr"] = "fast"
    config_file.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"algorithm_config.json: .*lr='fast'"):
        Algorithm.from_checkpoint(path)
    config_file.write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="algorithm_config.json holds a list"):
        Algorithm.from_checkpoint(path)
    (Path(path) / "metadata.json").unlink()
    with pytest.raises(CheckpointError, match="metadata.json is missing"):
        Algorithm.from_checkpoint(path)


def test_a_module_class_that_no_longer_imports(trained: tuple[PPO, str]) -> None:
    _, path = trained
    meta_file = Path(path) / MODULES / "default_policy/metadata.json"
    meta = json.loads(meta_file.read_text())
    meta["module_spec"]["module_class"] = "rlmod.core.models:GoneModule"
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"cannot import 'rlmod.core.models:GoneModule'"):
        RLModule.from_checkpoint(path)


class _Payload:
    """A pickle that creates a file when unpickled (what a malicious checkpoint does)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_in_place_of_the_weights_is_refused_and_never_runs(
    trained: tuple[PPO, str], tmp_path: Path
) -> None:
    _, path = trained
    marker = tmp_path / "pwned"
    weights = Path(path) / MODULES / "default_policy/state.safetensors"
    weights.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        Algorithm.from_checkpoint(path)
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        RLModule.from_checkpoint(path)
    assert not marker.exists()


# ---------------------------------------------------------------------- atomic saves
_KILLED_SAVE = textwrap.dedent("""
    import sys, time
    from rlmod.algorithms.ppo import PPOConfig
    from rlmod.utils import state_files
    algo = (PPOConfig().environment("CartPole-v1")
            .training(train_batch_size=128, minibatch_size=64).debugging(seed=0).build_algo())
    algo.train()
    algo.save_to_path(sys.argv[1])                     # the last good checkpoint
    algo.train()
    write = state_files.write_safetensors
    def slow_write(path, tensors):
        write(path, tensors)
        print("writing", flush=True)
        time.sleep(60)                                 # killed here, mid-save
    state_files.write_safetensors = slow_write
    algo.save_to_path(sys.argv[1])
""")


def test_a_save_killed_midway_leaves_the_last_good_checkpoint(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_SAVE, str(target)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "writing"
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".ckpt.tmp-")]
    assert leftovers and not (leftovers[0] / "metadata.json").exists()
    restored = Algorithm.from_checkpoint(target)
    assert restored.iteration == 1  # the good one, not the half-written second save
    restored.stop()
    with pytest.raises(CheckpointError, match="not a complete rlmod checkpoint"):
        Algorithm.from_checkpoint(leftovers[0])


@pytest.mark.parametrize("syncfs", [True, False], ids=["syncfs", "fsync-each-file"])
def test_both_flush_paths_write_the_same_loadable_checkpoint(
    trained: tuple[PPO, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, syncfs: bool
) -> None:
    algo, reference = trained
    if syncfs and checkpoints._SYNCFS is None:
        pytest.skip("no syncfs() on this platform")
    if not syncfs:
        monkeypatch.setattr(checkpoints, "_SYNCFS", None)
    flushed: list[Path] = []
    real_fsync_tree = checkpoints.fsync_tree
    monkeypatch.setattr(
        checkpoints, "fsync_tree", lambda root: (flushed.append(root), real_fsync_tree(root))
    )
    path = Path(algo.save_to_path(tmp_path / "again"))
    assert len(flushed) == (0 if syncfs else 1)  # the portable path runs only without syncfs

    def files(root: Path) -> dict[str, bytes]:
        return {
            str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
        }

    assert files(path) == files(Path(reference))
    Algorithm.from_checkpoint(path).stop()


def test_keep_last_n_deletes_only_older_complete_checkpoints(
    cartpole_config: PPOConfig, tmp_path: Path
) -> None:
    directory = tmp_path / "checkpoints"
    config = cartpole_config.checkpointing(
        checkpoint_frequency=1, checkpoint_dir=directory, keep_last_n=2
    )
    algo = config.build_algo()
    (directory / "checkpoint_000000").mkdir(parents=True)  # incomplete: no metadata.json
    (directory / "notes.txt").write_text("mine")
    paths = [algo.train()["checkpoint_path"] for _ in range(4)]
    assert paths[-1].endswith("checkpoint_000004")
    kept = sorted(p.name for p in directory.iterdir())
    assert kept == ["checkpoint_000000", "checkpoint_000003", "checkpoint_000004", "notes.txt"]
    algo.stop()


def test_checkpoint_frequency_without_a_dir_is_refused(cartpole_config: PPOConfig) -> None:
    with pytest.raises(ValueError, match=r"checkpoint_frequency=2 needs a checkpoint_dir"):
        cartpole_config.checkpointing(checkpoint_frequency=2).validate()


def test_save_to_path_without_a_path_makes_a_new_directory(trained: tuple[PPO, str]) -> None:
    algo, _ = trained
    first, second = algo.save_to_path(), algo.save_to_path()
    assert first != second and (Path(first) / "metadata.json").is_file()
    restored = Algorithm.from_checkpoint(second)
    assert restored.iteration == 2
    restored.stop()


def test_get_state_selects_components(trained: tuple[PPO, str]) -> None:
    algo, _ = trained
    only = algo.get_state(components="learner_group/learner/rl_module")
    assert list(only) == ["learner_group"] and list(only["learner_group"]) == ["learner"]
    assert list(only["learner_group"]["learner"]) == ["rl_module"]
    without = algo.get_state(not_components=["env_runner", "learner_group/learner/optimizer"])
    assert "env_runner" not in without and "iteration" in without
    assert "optimizer" not in without["learner_group"]["learner"]
    assert "rl_module" in without["learner_group"]["learner"]


def test_a_learner_only_module_round_trips_and_stays_off_env_runners(tmp_path: Path) -> None:
    data = json.loads(
        (
            Path(__file__).resolve().parents[2] / "examples" / "curiosity" / "frozenlake_icm.json"
        ).read_text()
    )
    config = PPOConfig.from_dict(data).training(train_batch_size=128, minibatch_size=64)
    algo = config.build_algo()
    algo.train()
    path = algo.save_to_path(tmp_path / "ckpt")
    icm = _weights(algo.learner_group.learner.module["icm"])
    restored = Algorithm.from_checkpoint(path)
    assert _equal(icm, _weights(restored.learner_group.learner.module["icm"]))
    assert "icm" not in restored.env_runner.module_ids
    acting = MultiRLModule.from_checkpoint(path, inference_only=True)
    assert list(acting.keys()) == ["default_policy"]
    algo.stop()
    restored.stop()
