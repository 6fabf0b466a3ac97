"""Dict and Tuple observations in offline data: recorded (EnvRunners, `record_episodes`) as
Parquet struct columns with each part in its own dtype (uint8 images stay 1 byte a pixel),
read back unchanged, checked against the module's space, and trained on by BC/MARWIL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from rlmod.algorithms.bc import BCConfig
from rlmod.algorithms.marwil import MARWILConfig
from rlmod.algorithms.ppo import PPOConfig
from rlmod.core.columns import Columns
from rlmod.core.rl_module import RLModule, RLModuleSpec, TensorDict
from rlmod.env import SingleAgentEnvRunner
from rlmod.errors import OfflineDataError
from rlmod.offline import record_episodes, struct_obs
from rlmod.offline.parquet_chunks import read_columns
from rlmod.offline.reader import resolve_files
from rlmod.testing.pixel_envs import BarOrientationEnv
from rlmod.utils.packed_obs import PackedObservationBox

IMAGE = gym.spaces.Box(0, 255, (6, 6, 1), np.uint8)
PARTS = gym.spaces.Tuple((gym.spaces.Discrete(3, start=1), gym.spaces.MultiBinary(2)))
VEC = gym.spaces.Box(-2.0, 2.0, (3,), np.float32)

# the `keep_batches` fixture (conftest.py): trains an Algorithm, keeping its sampled batches
KeepBatches = Callable[[Any, int], list[dict[str, np.ndarray]]]


class PartsEnv(gym.Env):
    """Episodes of 1-6 steps (a 6th step truncates) with observations of every storable
    kind: a uint8 image, a float32 vector, a Discrete and a MultiBinary part in a nested
    Tuple; `{"tuple": True}` makes the whole observation a Tuple. Every observation
    handed out is logged in `self.log` (one list per episode)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.as_tuple = bool((config or {}).get("tuple", False))
        self.observation_space: gym.Space = (
            gym.spaces.Tuple((IMAGE, VEC, PARTS))
            if self.as_tuple
            else gym.spaces.Dict({"image": IMAGE, "vec": VEC, "parts": PARTS})
        )
        self.action_space = gym.spaces.Discrete(2)
        self.log: list[list[Any]] = []
        self._t = 0

    def _observe(self) -> Any:
        obs = self.observation_space.sample()
        self.log[-1].append(obs)
        return obs

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self._t = 0
        self.log.append([])
        return self._observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._t += 1
        terminated = bool(self.np_random.random() < 0.25)
        return self._observe(), float(action), terminated, self._t >= 6 and not terminated, {}


def _leaf_of(obs: Any, space: gym.Space, path: str) -> np.ndarray:
    return np.asarray(struct_obs.get_leaf_of_tree(space, obs, path))


@pytest.mark.parametrize("as_tuple", [False, True], ids=["Dict", "Tuple"])
def test_record_episodes_round_trip_keeps_every_part_bit_for_bit(
    tmp_path: Path, as_tuple: bool
) -> None:
    env = PartsEnv({"tuple": as_tuple})
    space = env.observation_space
    rows = record_episodes(
        env, lambda obs: 1, num_episodes=8, output_dir=tmp_path, seed=0, max_rows_per_file=10
    )
    cols = read_columns(resolve_files(tmp_path), obs_shape=space)
    assert len(cols[Columns.OBS]) == rows
    logged = [obs for episode in env.log for obs in episode[:-1]]  # each step's obs
    logged_next = [obs for episode in env.log for obs in episode[1:]]
    for path, leaf in struct_obs.leaves(space):
        for column, expected in ((Columns.OBS, logged), (Columns.NEXT_OBS, logged_next)):
            got = struct_obs.get_leaf(cols[column], path)
            want = np.stack([_leaf_of(o, space, path) for o in expected])
            assert got.dtype == leaf.dtype and got.shape == want.shape, (path, got.dtype)
            assert got.tobytes() == want.tobytes(), (column, path)


def test_parquet_stores_a_struct_column_with_a_uint8_image_part(tmp_path: Path) -> None:
    env = PartsEnv()
    record_episodes(env, lambda obs: 0, num_episodes=3, output_dir=tmp_path, seed=1)
    [file] = resolve_files(tmp_path)
    schema = pq.read_schema(file)
    for column in (Columns.OBS, Columns.NEXT_OBS):
        kind = schema.field(column).type
        assert pa.types.is_struct(kind)
        image = kind.field("image").type
        assert pa.types.is_fixed_size_list(image) and image.list_size == 36
        assert image.value_type == pa.uint8()  # 1 byte a pixel, not a float
        assert kind.field("vec").type.value_type == pa.float32()
        parts = kind.field("parts").type
        assert parts.field("0").type == pa.int64()  # Discrete
        assert parts.field("1").type.value_type == pa.int8()  # MultiBinary
    table = pq.read_table(file)
    first = table.column(Columns.OBS)[0].as_py()
    assert first["image"] == env.log[0][0]["image"].reshape(-1).tolist()


# ---------------------------------------------------------------------- EnvRunner recording
def _record_with_ppo(
    tmp_path: Path, keep_batches: KeepBatches, env_config: dict[str, Any]
) -> tuple[list[dict], Any]:
    """PPO's EnvRunner with `output` set; every batch it returned (packed module rows)."""
    config = (
        PPOConfig()
        .environment(PartsEnv, env_config=env_config)
        .env_runners(num_envs_per_env_runner=3)
        .training(train_batch_size=120, minibatch_size=60, num_epochs=1)
        .offline_data(output=str(tmp_path), output_max_rows_per_file=50)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    batches = keep_batches(algo, 2)
    module_space = algo.env_runner.get_spaces()["default_policy"][0]
    algo.stop()
    return batches, module_space


@pytest.mark.parametrize("as_tuple", [False, True], ids=["Dict", "Tuple"])
def test_env_runner_records_raw_parts_that_pack_to_what_the_module_saw(
    tmp_path: Path, keep_batches: KeepBatches, as_tuple: bool
) -> None:
    batches, packed = _record_with_ppo(tmp_path, keep_batches, {"tuple": as_tuple})
    assert isinstance(packed, PackedObservationBox)
    space = packed.original
    merged = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    ended = merged[Columns.EPS_ID][merged[Columns.TERMINATEDS] | merged[Columns.TRUNCATEDS]]
    stored = read_columns(resolve_files(tmp_path), obs_shape=space)
    stored_ids = stored[Columns.EPS_ID] & 0xFFFF_FFFF  # the writer's offset removed
    assert set(stored_ids.tolist()) == set(ended.tolist()) and len(ended) > 10
    assert stored[Columns.OBS].dtype.names  # a structured array: one field per part
    assert struct_obs.get_leaf(stored[Columns.OBS], "image" if not as_tuple else "0").dtype == (
        np.uint8
    )
    for eps in ended.tolist():
        mine, theirs = stored_ids == eps, merged[Columns.EPS_ID] == eps
        for column in (Columns.OBS, Columns.NEXT_OBS):
            repacked = packed.pack(struct_obs.to_tree(space, stored[column][mine]))
            assert repacked.tobytes() == merged[column][theirs].tobytes(), (eps, column)
        assert stored[Columns.ACTIONS][mine].tolist() == merged[Columns.ACTIONS][theirs].tolist()
    # ... and a module trained offline reads them as the EnvRunner's module saw them.
    for config_cls in (BCConfig, MARWILConfig):  # MARWIL: truncated episodes bootstrap
        algo = (
            config_cls()
            .offline_data(input_=str(tmp_path))
            .training(train_batch_size_per_learner=32)
            .debugging(seed=0)
            .build_algo()
        )
        assert algo.get_module().observation_space == packed
        result = algo.train()
        algo.stop()
        assert np.isfinite(result["learners"]["default_policy"]["total_loss"]), config_cls


# ---------------------------------------------------------------------- layout checks
def _without_spaces_json(tmp_path: Path) -> Path:
    record_episodes(PartsEnv(), lambda obs: 0, num_episodes=3, output_dir=tmp_path, seed=2)
    (tmp_path / "spaces.json").unlink()  # data from elsewhere: only the config's spaces
    return tmp_path


def _bc(data: Path, observation_space: gym.Space) -> Any:
    return (
        BCConfig()
        .environment(observation_space=observation_space, action_space=gym.spaces.Discrete(2))
        .offline_data(input_=str(data))
        .training(train_batch_size_per_learner=8)
        .build_algo()
    )


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (  # a part missing, one too many
            gym.spaces.Dict({"image": IMAGE, "pos": VEC, "parts": PARTS}),
            r"column 'obs' holds the parts \['image', 'parts', 'vec'\], but the observation "
            r"space .* has the parts \['image', 'parts', 'pos'\] \(missing: \['pos'\], not in "
            r"the space: \['vec'\]\)",
        ),
        (  # an image of another size
            gym.spaces.Dict(
                {"image": gym.spaces.Box(0, 255, (5, 5, 1), np.uint8), "vec": VEC, "parts": PARTS}
            ),
            r"column 'obs.image' holds rows of 36 values, but Box.* has shape \(5, 5, 1\)",
        ),
        (  # a nested part of another kind
            gym.spaces.Dict(
                {"image": IMAGE, "vec": VEC, "parts": gym.spaces.Tuple((gym.spaces.Discrete(3),))}
            ),
            r"column 'obs.parts' holds the parts \['0', '1'\]",
        ),
        (  # a flat Box for struct data
            gym.spaces.Box(-1.0, 1.0, (42,), np.float32),
            r"column 'obs' holds a struct of parts \['image', 'parts', 'vec'\] \(a Dict/Tuple "
            r"observation\), but the observation space is Box",
        ),
    ],
    ids=["parts", "image-size", "nested", "flat-box"],
)
def test_a_layout_that_does_not_fit_the_configured_space_names_the_setting(
    tmp_path: Path, space: gym.Space, message: str
) -> None:
    data = _without_spaces_json(tmp_path)
    with pytest.raises(OfflineDataError, match=message) as info:
        _bc(data, space)
    assert "config.environment(observation_space=" in str(info.value)


def test_dict_space_for_flat_data_names_the_setting(tmp_path: Path) -> None:
    record_episodes(
        gym.make("CartPole-v1"), lambda obs: 0, num_episodes=2, output_dir=tmp_path, seed=0
    )
    (tmp_path / "spaces.json").unlink()
    with pytest.raises(
        OfflineDataError,
        match=r"column 'obs' holds fixed_size_list.* not the "
        r"struct of parts \['image', 'parts', 'vec'\].*config.environment",
    ):
        _bc(tmp_path, gym.spaces.Dict({"image": IMAGE, "vec": VEC, "parts": PARTS}))


def test_a_configured_dict_space_must_fit_the_recorded_one_part_by_part(tmp_path: Path) -> None:
    record_episodes(PartsEnv(), lambda obs: 0, num_episodes=2, output_dir=tmp_path, seed=3)
    other = gym.spaces.Dict(
        {"image": gym.spaces.Box(0, 255, (6, 6, 3), np.uint8), "vec": VEC, "parts": PARTS}
    )
    with pytest.raises(
        OfflineDataError,
        match=r"config.environment\(observation_space=Dict.*does not fit the recorded "
        r"observation_space .* in its part 'image', its shape is \(6, 6, 3\), the recorded "
        r"one's \(6, 6, 1\)",
    ):
        _bc(tmp_path, other)
    wider = gym.spaces.Dict(  # other bounds of an observation Box part: accepted
        {"image": IMAGE, "vec": gym.spaces.Box(-9.0, 9.0, (3,), np.float32), "parts": PARTS}
    )
    _bc(tmp_path, wider).stop()


def _replace_part(file: Path, part: str, row: int, value: Any) -> None:
    """Rewrites `file` with `obs.<part>` of `row` set to `value` (data from elsewhere)."""
    table = pq.read_table(file)
    obs = table.column(Columns.OBS).combine_chunks()
    names = [obs.type.field(i).name for i in range(obs.type.num_fields)]
    children = obs.flatten()
    i = names.index(part)
    values = children[i].to_pylist()
    values[row] = value
    children[i] = pa.array(values, type=children[i].type)
    column = pa.StructArray.from_arrays(children, names=names)
    table = table.set_column(table.schema.get_field_index(Columns.OBS), Columns.OBS, column)
    pq.write_table(table, file)


@pytest.mark.parametrize(
    ("part", "value", "message"),
    [
        ("vec", [0.0, float("nan"), 0.0], r"column 'obs.vec' holds \[0.0, nan, 0.0\] in row 2"),
        ("image", None, r"column 'obs.image' has a missing \(null\) value in row 2"),
    ],
)
def test_values_of_a_part_are_checked_and_named(
    tmp_path: Path, part: str, value: Any, message: str
) -> None:
    record_episodes(PartsEnv(), lambda obs: 0, num_episodes=3, output_dir=tmp_path, seed=4)
    [file] = resolve_files(tmp_path)
    _replace_part(file, part, 2, value)
    algo = (
        BCConfig()
        .offline_data(input_=str(tmp_path))
        .training(train_batch_size_per_learner=4)
        .build_algo()
    )
    with pytest.raises(OfflineDataError, match=message):
        algo.train()
    algo.stop()


# ---------------------------------------------------------------------- learning
class BarExpertModule(RLModule):
    """The right answer of BarOrientationEnv's Dict task, from packed rows: vertical when
    a column holds the whole bar, swapped when `flip` is 1 (logits +-20)."""

    def setup(self) -> None:
        self.unused = torch.nn.Linear(1, 1)  # an RLModule has parameters

    def _forward(self, batch: TensorDict, **kwargs: Any) -> TensorDict:
        space = self.observation_space
        assert isinstance(space, PackedObservationBox)
        [image], flip = space.unpack(batch[Columns.OBS])
        assert flip is not None
        vertical = image.float().sum(dim=1).amax(dim=(1, 2)) > 255.0  # [B, H, W, C]: per column
        answer = vertical.long() ^ flip[:, 1].long()
        logits = 20.0 * torch.nn.functional.one_hot(answer, 2).float() - 10.0
        return {Columns.ACTION_DIST_INPUTS: logits}


@pytest.mark.slow
def test_bc_learns_the_dict_task_from_an_env_runner_recording(tmp_path: Path) -> None:
    """An expert's 1,500 steps recorded by PPO's EnvRunner on {"image", "flip"}; BC with
    the default CNN + MLP encoders reaches the expert's answers (0.5 is a guess, and either
    part alone scores 0.5)."""
    env_config = {"size": 10, "dict_obs": True}
    recording = (
        PPOConfig()
        .environment(BarOrientationEnv, env_config=env_config)
        .env_runners(num_envs_per_env_runner=4)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=BarExpertModule))
        .offline_data(output=str(tmp_path))
        .debugging(seed=0)
    )
    runner = SingleAgentEnvRunner(config=recording)
    runner.sample(num_timesteps=1500)
    returns = runner.get_metrics()["episode_returns"]
    assert len(returns) >= 1400 and set(returns) == {1.0}  # the expert is always right
    runner.stop()
    config = (
        BCConfig()
        .environment(BarOrientationEnv, env_config=env_config)  # evaluation only
        .offline_data(input_=str(tmp_path))
        .training(train_batch_size_per_learner=128, lr=1e-3)
        .rl_module(model_config={"fcnet_hiddens": [16], "head_fcnet_hiddens": [32]})
        .evaluation(evaluation_interval=250, evaluation_duration=200)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        for _ in range(250):  # 32,000 rows: ~20 passes over the data (1.0 on seeds 0-2)
            result = algo.train()
        accuracy = result["evaluation"]["env_runners"]["episode_return_mean"]
    finally:
        algo.stop()
    assert accuracy >= 0.9, accuracy
