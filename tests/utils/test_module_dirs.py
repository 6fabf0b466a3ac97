"""Each module of a checkpoint is a real directory, `learner_group/learner/rl_module/
<module_id>/`, as in RLlib: copied out alone it loads and acts the same (issue 33, item 8);
checkpoints written before, with all modules in one weights file, still load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors import safe_open

from rlmod.algorithms import Algorithm, InferencePolicy
from rlmod.algorithms.ppo import PPOConfig
from rlmod.core import MultiRLModule, RLModule
from rlmod.core.module_checkpoint import module_dir_name
from rlmod.errors import CheckpointError, UnknownModuleIDError
from rlmod.testing import MultiAgentCartPole

MODULES = Path("learner_group/learner/rl_module")
# Written by rlmod at b7e79a7 (main before module directories) with
# tests/fixtures/make_checkpoint_b7e79a7.py: modules p0 and p1 in one state.safetensors.
OLD = Path(__file__).parent.parent / "fixtures" / "checkpoint_b7e79a7_two_modules"


def _mapping(agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
    return f"p{agent_id % 2}"


def _greedy(module: RLModule, obs: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        logits = module.forward_inference({"obs": obs})["action_dist_inputs"]
    return logits.argmax(-1).numpy()


@pytest.fixture(scope="module")
def two_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    algo = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=_mapping)
        .rl_module(model_config={"fcnet_hiddens": [16]})
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
        .debugging(seed=0)
        .build_algo()
    )
    algo.train()
    path = Path(algo.save_to_path(tmp_path_factory.mktemp("two") / "ck"))
    algo.stop()
    return path


def test_a_copied_module_folder_loads_alone_and_acts_the_same(
    two_modules: Path, tmp_path: Path
) -> None:
    module_dir = two_modules / MODULES / "p1"
    assert module_dir.is_dir()
    # Its spec (JSON) and its weights (safetensors, no state.json: the state is only tensors)
    assert {p.name for p in module_dir.iterdir()} == {"metadata.json", "state.safetensors"}
    deployed = Path(shutil.copytree(module_dir, tmp_path / "deployed_p1"))
    copy = RLModule.from_checkpoint(deployed)
    from_root = RLModule.from_checkpoint(two_modules, module_id="p1")
    other = RLModule.from_checkpoint(two_modules, module_id="p0")
    obs = torch.as_tensor(np.random.default_rng(0).normal(size=(256, 4)), dtype=torch.float32)
    assert (_greedy(copy, obs) == _greedy(from_root, obs)).all()
    for name, tensor in from_root.state_dict().items():
        assert torch.equal(copy.state_dict()[name], tensor)
    assert any(not torch.equal(other.state_dict()[n], t) for n, t in copy.state_dict().items())
    # RLlib's way: restore a module from its own folder into a running Algorithm.
    algo = Algorithm.from_checkpoint(two_modules, policy_mapping_fn=_mapping)
    p0_before = {k: v.clone() for k, v in algo.get_module("p0").state_dict().items()}
    with torch.no_grad():
        for p in algo.get_module("p1").parameters():
            p.zero_()
    algo.restore_from_path(deployed, component=str(MODULES / "p1"))
    assert (_greedy(algo.get_module("p1"), obs) == _greedy(copy, obs)).all()
    for k, v in algo.get_module("p0").state_dict().items():
        assert torch.equal(v, p0_before[k])
    algo.stop()


def test_a_copied_default_module_serves_the_same_actions_as_inference_policy(
    tmp_path: Path,
) -> None:
    algo = PPOConfig().environment("CartPole-v1").debugging(seed=1).build_algo()
    algo.train()
    root = Path(algo.save_to_path(tmp_path / "ck"))
    algo.stop()
    deployed = Path(shutil.copytree(root / MODULES / "default_policy", tmp_path / "serve"))
    reference = InferencePolicy.from_checkpoint(root)
    module = RLModule.from_checkpoint(deployed, inference_only=True)
    # InferencePolicy takes an Algorithm checkpoint (it needs the connectors); built around
    # the copied module with those connectors, it acts the same.
    served = InferencePolicy(module, reference.env_to_module, reference.module_to_env)
    obs = np.random.default_rng(1).uniform(-0.2, 0.2, size=(128, 4)).astype(np.float32)
    expected = reference.compute_actions(obs)
    assert (served.compute_actions(obs) == expected).all()
    assert (_greedy(module, torch.as_tensor(obs)) == expected).all()


def test_whole_multi_module_loads_come_from_the_module_directories(two_modules: Path) -> None:
    meta = json.loads((two_modules / MODULES / "metadata.json").read_text())
    assert sorted(meta["module_ids"]) == ["p0", "p1"] and sorted(meta["components"]) == [
        "p0",
        "p1",
    ]
    multi = MultiRLModule.from_checkpoint(two_modules)
    p1 = RLModule.from_checkpoint(two_modules / MODULES / "p1")
    for name, tensor in p1.state_dict().items():
        assert torch.equal(multi["p1"].state_dict()[name], tensor)
    with pytest.raises(UnknownModuleIDError, match="has no module 'p7'"):
        RLModule.from_checkpoint(two_modules / MODULES / "p7")


def test_a_missing_module_directory_is_named(two_modules: Path, tmp_path: Path) -> None:
    ck = Path(shutil.copytree(two_modules, tmp_path / "ck"))
    shutil.rmtree(ck / MODULES / "p0")
    with pytest.raises(CheckpointError, match=r"rl_module/p0 is missing .* lists module 'p0'"):
        Algorithm.from_checkpoint(ck, policy_mapping_fn=_mapping)
    assert RLModule.from_checkpoint(ck, module_id="p1") is not None  # the other still loads


def test_a_module_directory_symlinked_out_of_the_checkpoint_is_refused(
    two_modules: Path, tmp_path: Path
) -> None:
    ck = Path(shutil.copytree(two_modules, tmp_path / "ck"))
    outside = Path(shutil.move(ck / MODULES / "p1", tmp_path / "elsewhere"))
    (ck / MODULES / "p1").symlink_to(outside)
    with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
        Algorithm.from_checkpoint(ck, policy_mapping_fn=_mapping)
    with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
        RLModule.from_checkpoint(ck, module_id="p1")


@pytest.mark.parametrize(
    ("module_id", "name"),
    [
        ("p0", "p0"),
        ("agent_7-b", "agent_7-b"),
        ("..", "%2E%2E"),
        ("a/b", "a%2Fb"),
        ("state.json", "state%2Ejson"),
        (".hidden", "%2Ehidden"),
        ("", "%"),
        ("é", "%C3%A9"),
    ],
)
def test_module_directory_names_are_one_safe_path_segment(module_id: str, name: str) -> None:
    assert module_dir_name(module_id) == name


def test_long_and_unusual_module_ids_get_distinct_directories() -> None:
    ids = ["x" * 300, "x" * 299 + "y", "%41", "A", "a b", "a%20b", "~"]
    names = [module_dir_name(m) for m in ids]
    assert len(set(names)) == len(ids)
    assert all(len(n.encode()) <= 200 and "/" not in n and not n.startswith(".") for n in names)


def test_a_checkpoint_from_before_module_directories_still_loads() -> None:
    """The fixture was written by main at b7e79a7: no `rl_module/<id>/` on disk, every
    module's weights under `<id>/...` keys in one state.safetensors. Each loader must give
    exactly those stored weights."""
    weights_file = OLD / MODULES / "state.safetensors"
    assert not (OLD / MODULES / "p1").exists()
    with safe_open(str(weights_file), framework="pt") as f:
        stored = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118

    def assert_stored(module: torch.nn.Module, mid: str) -> None:
        own = module.state_dict()
        assert own and all(torch.equal(t, stored[f"{mid}/{n}"]) for n, t in own.items())

    algo = Algorithm.from_checkpoint(OLD, policy_mapping_fn=_mapping)
    assert algo.iteration == 1
    for mid in ("p0", "p1"):
        assert_stored(algo.get_module(mid), mid)
    assert_stored(RLModule.from_checkpoint(OLD, module_id="p1"), "p1")
    assert_stored(RLModule.from_checkpoint(OLD / MODULES / "p1"), "p1")  # resolved as before
    multi = MultiRLModule.from_checkpoint(OLD)
    assert_stored(multi["p0"], "p0")
    with torch.no_grad():
        for p in algo.get_module("p0").parameters():
            p.zero_()
    algo.restore_from_path(OLD / MODULES / "p0", component=str(MODULES / "p0"))
    assert_stored(algo.get_module("p0"), "p0")
    algo.train()  # and it trains on
    algo.stop()


def test_a_module_directory_that_already_exists_is_a_clear_error(tmp_path: Path) -> None:
    """What two IDs differing only in case meet on a case-insensitive file system."""
    from rlmod.core.module_checkpoint import make_module_dir

    make_module_dir(tmp_path, "p0")
    with pytest.raises(CheckpointError, match=r"another module ID names the same directory"):
        make_module_dir(tmp_path, "p0")
