"""Tests of the `rlmod` command (rlmod/cli/) and the run-dir logs it writes."""

from __future__ import annotations

import csv
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rlmod.cli import build_config, main
from rlmod.tuned import TUNED, TUNED_DQN, TUNED_SAC
from rlmod.utils.loggers import RunLogger


def _run(command: str, *args: str | Path) -> int:
    """The exit code of `rlmod COMMAND ARGS...` run in-process (argparse exits itself on
    --help and on malformed arguments)."""
    try:
        return main([*shlex.split(command), *map(str, args)])
    except SystemExit as e:
        return int(e.code or 0)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_help_through_the_entry_point() -> None:
    script = Path(sys.executable).with_name("rlmod")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "rlmod.cli"]
    out = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "train" in out.stdout


def test_train_help_lists_algorithms_and_tuned_envs(capsys: pytest.CaptureFixture) -> None:
    assert _run("train --help") == 0
    out = capsys.readouterr().out
    assert "--stop-reward" in out and "--config" in out
    assert "PPO" in out and "CartPole-v1" in out


def test_train_writes_all_logs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run_dir = tmp_path / "run"
    command = "train --algo PPO --env CartPole-v1 --stop-timesteps 1000 --seed 0"
    assert _run(command, "--run-dir", run_dir) == 0
    rows = _read_csv(run_dir / "progress.csv")
    assert len(rows) == 1  # the tuned batch is 1024 steps: one iteration reaches 1000
    assert int(rows[0]["num_env_steps_sampled_lifetime"]) >= 1000
    assert float(rows[0]["env_runners/episode_return_mean"]) > 0
    assert "learners/default_policy/vf_loss" in rows[0]
    lines = (run_dir / "result.jsonl").read_text().splitlines()
    assert [json.loads(line)["training_iteration"] for line in lines] == [1]
    params = json.loads((run_dir / "params.json").read_text())
    assert params["env"] == "CartPole-v1" and params["seed"] == 0
    assert params["lr"] == TUNED["CartPole-v1"]["lr"]  # the tuned settings were applied
    assert list(run_dir.glob("events.out.tfevents.*")), "no TensorBoard event file"
    out = capsys.readouterr().out
    assert "iterations           1" in out and str(run_dir) in out


def test_config_file_goes_on_top_of_tuned_settings(tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    given = {"lr": 3e-4, "train_batch_size": 256, "minibatch_size": 64}
    settings.write_text(json.dumps({**given, "model_config": {"fcnet_hiddens": [32]}}))
    run_dir = tmp_path / "run"
    command = "train --env CartPole-v1 --stop-iters 2 --no-tensorboard"
    assert _run(command, "--config", settings, "--run-dir", run_dir) == 0
    params = json.loads((run_dir / "params.json").read_text())
    assert params["lr"] == 3e-4 and params["train_batch_size"] == 256
    assert params["num_epochs"] == TUNED["CartPole-v1"]["num_epochs"]
    assert params["model_config"] == {"fcnet_hiddens": [32]}
    assert len(_read_csv(run_dir / "progress.csv")) == 2
    assert not list(run_dir.glob("events.out.tfevents.*"))


def test_no_tuned_starts_from_the_defaults(tmp_path: Path) -> None:
    from rlmod.algorithms.ppo import PPOConfig

    run_dir = tmp_path / "run"
    command = "train --env CartPole-v1 --no-tuned --stop-iters 1 --no-tensorboard"
    assert _run(command, "--config", '{"train_batch_size": 256}', "--run-dir", run_dir) == 0
    assert json.loads((run_dir / "params.json").read_text())["lr"] == PPOConfig().lr


@pytest.mark.parametrize(
    ("config", "phrases"),
    [
        ('{"lrr": 0.001}', ["no setting 'lrr'", "Did you mean 'lr'?"]),
        ('{"lr": -1}', ["lr=-1 is invalid"]),
        ('{"minibatch_size": 4096}', ["minibatch_size (4096) is larger than"]),
        ('{"lr": 1e-3', ["not valid JSON"]),
        ("no/such/file.json", ["neither a JSON object", "nor an existing file"]),
    ],
)
def test_bad_config_is_one_error_line_and_exit_2(
    config: str, phrases: list[str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    command = "train --env CartPole-v1 --stop-iters 1"
    code = _run(command, "--config", config, "--run-dir", tmp_path / "run")
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("rlmod train: error: ") and err.count("\n") == 1, err
    for phrase in phrases:
        assert phrase in err
    assert not (tmp_path / "run").exists()  # nothing trained, nothing written


def test_unknown_algo_and_env_exit_2(capsys: pytest.CaptureFixture) -> None:
    assert _run("train --algo NoSuchAlgo --env CartPole-v1") == 2
    assert "unknown algorithm 'NoSuchAlgo'" in capsys.readouterr().err
    assert _run("train --env CartPol-v1 --stop-iters 1") == 2
    assert "Did you mean 'CartPole-v1'?" in capsys.readouterr().err


def test_as_test_exits_1_when_the_stop_reward_is_not_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    command = "train --env CartPole-v1 --stop-reward 1000 --stop-iters 1 --no-tensorboard"
    assert _run(command, "--run-dir", tmp_path / "run") == 0  # only reported
    assert "stop reward 1000" in (out := capsys.readouterr().out) and "NOT reached" in out
    assert _run(command, "--as-test", "--run-dir", tmp_path / "run2") == 1
    assert _run("train --env CartPole-v1 --as-test") == 2  # --as-test needs --stop-reward


def test_run_logger_extends_the_csv_header_and_writes_nan_as_null(tmp_path: Path) -> None:
    first = {"training_iteration": 1, "env_runners": {"episode_return_mean": math.nan}}
    evaluation = {"env_runners": {"episode_return_mean": 5.0}}
    with RunLogger(tmp_path, tensorboard=False) as run:
        run.log({**first, "note": "text is not a number"})
        run.log({**first, "training_iteration": 2, "evaluation": evaluation})
    rows = _read_csv(tmp_path / "progress.csv")
    assert list(rows[0]) == [
        "training_iteration",
        "env_runners/episode_return_mean",
        "evaluation/env_runners/episode_return_mean",
    ]
    assert [r["evaluation/env_runners/episode_return_mean"] for r in rows] == ["", "5.0"]
    line = json.loads((tmp_path / "result.jsonl").read_text().splitlines()[0])
    assert line["env_runners"]["episode_return_mean"] is None


@pytest.mark.slow
def test_ppo_solves_cartpole_from_the_cli(tmp_path: Path) -> None:
    """`make train`'s command, with --as-test: mean return >= 475 over 100 episodes."""
    command = "train --algo PPO --env CartPole-v1 --stop-reward 475 --stop-timesteps 500000"
    assert _run(command, "--seed", "0", "--as-test", "--run-dir", tmp_path / "run") == 0


# ---------------------------------------------------------------------- checkpoints
def test_checkpoint_every_and_a_final_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    assert (
        _run(
            "train --env CartPole-v1 --stop-iters 3 --no-tensorboard --checkpoint-every 2",
            "--run-dir",
            run,
        )
        == 0
    )
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["checkpoint_000002", "checkpoint_000003"]  # every 2, plus the final one
    assert f"checkpoint           {run / 'checkpoints' / 'checkpoint_000003'}" in (
        capsys.readouterr().out
    )


def test_resume_continues_counters_from_the_newest_checkpoint(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    assert (
        _run("train --env CartPole-v1 --stop-iters 2 --no-tensorboard --seed 3", "--run-dir", first)
        == 0
    )
    assert _run("train --stop-iters 4 --no-tensorboard --resume", first, "--run-dir", second) == 0
    rows = _read_csv(second / "progress.csv")
    assert [r["training_iteration"] for r in rows] == ["3", "4"]
    params = json.loads((second / "params.json").read_text())
    assert params["seed"] == 3
    assert _run("train --resume", first, "--env CartPole-v1") == 2  # settings come from it


def test_a_used_run_dir_is_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    assert _run("train --env CartPole-v1 --stop-iters 1 --no-tensorboard", "--run-dir", run) == 0
    before = (run / "progress.csv").read_text()
    assert _run("train --env CartPole-v1 --stop-iters 1 --no-tensorboard", "--run-dir", run) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (run / "progress.csv").read_text() == before


def test_runs_started_in_the_same_second_get_their_own_default_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default run dir is made when it is chosen, so a second run choosing before the
    first one writes its logs (its Algorithm still building) gets another."""
    from rlmod.utils import run_control

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_control.time, "strftime", lambda fmt, *a: "20261204-213000")
    first = run_control.make_default_run_dir("PPO", "CartPole-v1")
    second = run_control.make_default_run_dir("PPO", "CartPole-v1")
    assert first != second and first.is_dir() and second.is_dir()
    assert second.name == first.name + "-2"
    # a build that fails leaves no empty default dir behind
    assert _run("train --env NoSuchEnv-v0 --stop-iters 1 --no-tensorboard") == 2
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(
        [first.name, second.name]
    )


def test_a_nan_reward_stops_training_with_an_error_naming_where(tmp_path: Path) -> None:
    """Issue 11's first symptom: an env returning NaN rewards trained on, the CLI logging
    the loss as null and exiting 0. Now the first NaN stops `rlmod train` with an error
    naming the env, sub-env, step and key, and nothing was logged as trained."""
    import gymnasium as gym

    from rlmod import register_env
    from rlmod.errors import EnvError

    class NaNReward(gym.Wrapper):
        def step(self, action):  # type: ignore[no-untyped-def]
            obs, reward, terminated, truncated, info = self.env.step(action)
            return obs, float("nan"), terminated, truncated, info

    register_env("NaNRewardCartPole-cli-test", lambda cfg: NaNReward(gym.make("CartPole-v1")))
    with pytest.raises(
        EnvError,
        match=r"NaNRewardCartPole-cli-test.*non-finite.*rewards in "
        r"sub-env 0 at step 1",
    ):
        _run(
            "train --env NaNRewardCartPole-cli-test --stop-iters 2 --no-tensorboard",
            "--run-dir",
            tmp_path / "run",
        )
    progress = tmp_path / "run" / "progress.csv"
    assert not progress.exists() or len(_read_csv(progress)) == 0


def test_trust_lets_a_config_name_a_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "my_cartpole.py").write_text(
        "import gymnasium as gym\ndef make(env_config):\n    return gym.make('CartPole-v1')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = json.dumps({"env": {"__import__": "my_cartpole:make"}})
    command = f"train --stop-iters 1 --no-tensorboard --config {shlex.quote(config)}"
    assert _run(command, "--run-dir", tmp_path / "a") == 2
    assert "--trust my_cartpole" in capsys.readouterr().err
    assert _run(command, "--trust", "my_cartpole", "--run-dir", tmp_path / "b") == 0


# ---------------------------------------------------------------------- issue 11's CLI items
def test_a_seed_is_always_chosen_and_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    assert (
        _run(
            "train --env CartPole-v1 --stop-iters 1 --no-tensorboard --run-dir",
            run_dir,
            "--config",
            '{"train_batch_size": 64, "minibatch_size": 32}',
        )
        == 0
    )
    seed = json.loads((run_dir / "params.json").read_text())["seed"]
    assert isinstance(seed, int) and seed >= 0  # was: null, so the run could not be repeated
    assert f"with seed {seed}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        ("--stop-iters 0", "argument --stop-iters: must be >= 1, got 0"),
        ("--stop-timesteps -5", "argument --stop-timesteps: must be >= 1, got -5"),
        ("--stop-seconds 0", "argument --stop-seconds: must be a finite number > 0"),
        ("--stop-reward nan", "argument --stop-reward: must be a finite number"),
        ("--seed -1", "argument --seed: must be >= 0, got -1"),
        ("--seed 18446744073709551616", "argument --seed: must be <= 18446744073709551615"),
        ("--trust ''", "argument --trust: expected a package name such as mypkg"),
        ("--trust ../evil", "argument --trust: expected a package name such as mypkg"),
    ],
)
def test_cli_numbers_are_validated(
    args: str, phrase: str, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    assert _run(f"train --env CartPole-v1 --run-dir {tmp_path / 'run'} {args}") == 2
    assert phrase in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_model_config_of_the_wrong_type_is_a_clear_error(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    code = _run(
        "train --env CartPole-v1 --stop-iters 1 --run-dir",
        tmp_path / "run",
        "--config",
        '{"model_config": [64, 64]}',
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "model_config=[64, 64] is of the wrong kind: expected a dict of model settings" in err
    assert "asdict()" not in err


def test_help_does_not_import_torch() -> None:
    """`rlmod --help` is fast (well under 0.5 s) because nothing imports torch for it."""
    script = (
        "import sys\nfrom rlmod.cli import main\ntry:\n    main(['--help'])\n"
        "except SystemExit:\n    pass\nprint('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize(
    ("algo", "env", "table"), [("DQN", "CartPole-v1", TUNED_DQN), ("sac", "Pendulum-v1", TUNED_SAC)]
)
def test_off_policy_algorithms_get_their_tuned_settings(algo: str, env: str, table: dict) -> None:
    config, applied = build_config(algo=algo, env=env, settings={"n_step": 3})
    assert applied == table[env]
    assert config.replay_buffer_config["type"] == "EpisodeReplayBuffer"
    assert config.n_step == 3
    again = type(config).from_dict(json.loads(json.dumps(config.to_dict())))
    assert again.replay_buffer_config == config.replay_buffer_config


def test_dqn_resumes_with_its_replay_buffer_when_asked(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    settings = json.dumps(
        {
            "store_buffer_in_checkpoints": True,
            "min_sample_timesteps_per_iteration": 0,  # one fragment per iteration
            "train_batch_size": 8,
            "num_steps_sampled_before_learning_starts": 16,
            "rollout_fragment_length": 4,
        }
    )
    assert (
        _run(
            "train --algo DQN --env CartPole-v1 --no-tuned --stop-iters 5 --no-tensorboard "
            "--seed 1 --config",
            settings,
            "--run-dir",
            first,
        )
        == 0
    )
    checkpoint = next((first / "checkpoints").iterdir())
    assert (checkpoint / "replay_buffer" / "state.safetensors").is_file()
    assert _run("train --stop-iters 6 --no-tensorboard --resume", first, "--run-dir", second) == 0
    assert [r["training_iteration"] for r in _read_csv(second / "progress.csv")] == ["6"]
    from rlmod.algorithms import Algorithm

    algo = Algorithm.from_checkpoint(next((second / "checkpoints").iterdir()))
    try:
        assert len(algo.replay_buffer) == 24  # 5 + 1 iterations of 4 env steps
    finally:
        algo.stop()


@pytest.mark.parametrize(
    ("algo", "env", "key"),
    [("DQN", "CartPole-v1", "qf_loss"), ("SAC", "Pendulum-v1", "alpha_value")],
)
def test_off_policy_algorithms_train_from_the_cli(
    algo: str, env: str, key: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    settings = json.dumps(
        {
            "train_batch_size": 8,
            "num_steps_sampled_before_learning_starts": 16,
            "rollout_fragment_length": 4,
            "model_config": {"fcnet_hiddens": [16]},
            "min_sample_timesteps_per_iteration": 0,  # one fragment per iteration
            "min_time_s_per_iteration": None,
        }
    )
    assert (
        _run(
            f"train --algo {algo} --env {env} --stop-iters 8 --no-tensorboard --seed 0 --config",
            settings,
            "--run-dir",
            run_dir,
        )
        == 0
    )
    rows = _read_csv(run_dir / "progress.csv")
    assert [r["training_iteration"] for r in rows][-1] == "8"
    assert int(rows[-1]["num_env_steps_sampled_lifetime"]) == 32
    assert math.isfinite(float(rows[-1][f"learners/default_policy/{key}"]))
    assert list((run_dir / "checkpoints").iterdir()), "no final checkpoint"


# ---------------------------------------------------------------------- issue 30, item 11
SMALL = '{"train_batch_size": 64, "minibatch_size": 32}'


@pytest.fixture
def no_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test if the algorithm is built or restored."""
    from rlmod.algorithms import Algorithm, AlgorithmConfig

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("built the algorithm before checking --run-dir")

    monkeypatch.setattr(AlgorithmConfig, "build_algo", refuse)
    monkeypatch.setattr(Algorithm, "from_checkpoint", refuse)


@pytest.mark.parametrize(
    ("where", "phrase"),
    [
        ("file", "is a file, not a directory"),
        ("file/run", "is a file, not a directory"),
    ],
)
def test_a_run_dir_that_cannot_be_one_is_refused_before_building(
    tmp_path: Path, capsys: pytest.CaptureFixture, no_build: None, where: str, phrase: str
) -> None:
    (tmp_path / "file").write_text("my notes\n")
    code = _run(
        "train --env CartPole-v1 --stop-iters 1 --no-tensorboard --config",
        SMALL,
        "--run-dir",
        tmp_path / where,
    )
    assert code == 2  # was: the algorithm built, then a FileExistsError traceback
    err = capsys.readouterr().err
    assert f"--run-dir {tmp_path / where}: {tmp_path / 'file'} {phrase}" in err
    assert "pass a new directory" in err
    assert (tmp_path / "file").read_text() == "my notes\n"


def test_a_used_run_dir_is_refused_before_resuming(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = tmp_path / "first"
    assert (
        _run(
            "train --env CartPole-v1 --stop-iters 1 --no-tensorboard --config",
            SMALL,
            "--run-dir",
            first,
        )
        == 0
    )
    from rlmod.algorithms import Algorithm

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("restored the checkpoint before checking --run-dir")

    monkeypatch.setattr(Algorithm, "from_checkpoint", refuse)
    other = tmp_path / "other"  # a used run dir that is not the one resumed (that one: in place)
    other.mkdir()
    (other / "progress.csv").write_text("training_iteration\n1\n")
    assert _run("train --stop-iters 2 --resume", first, "--run-dir", other) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_sigterm_stops_training_like_ctrl_c(tmp_path: Path) -> None:
    """`kill -TERM` (what `docker stop`, Kubernetes and Slurm send) ends `rlmod train` with
    a final checkpoint and the summary, exit code 143 (128 + SIGTERM)."""
    import os
    import signal
    import time

    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlmod.cli",
            "train",
            "--env",
            "CartPole-v1",
            "--no-tensorboard",
            "--config",
            SMALL,
            "--run-dir",
            str(run_dir),
        ],  # no stop criterion: until stopped
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        progress = run_dir / "progress.csv"
        while not (progress.exists() and len(progress.read_text().splitlines()) >= 3):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no iteration logged in 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143, err  # was: -15, killed with no checkpoint and no summary
    assert "stopped because terminated (SIGTERM)" in out
    checkpoints = [
        p for p in (run_dir / "checkpoints").iterdir() if (p / "metadata.json").is_file()
    ]
    assert checkpoints, err
    assert "Traceback" not in err


def test_the_previous_sigterm_handler_is_restored(tmp_path: Path) -> None:
    import signal

    def mine(signum: int, frame: object) -> None:
        raise AssertionError("not expected to run")

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        assert (
            _run(
                "train --env CartPole-v1 --stop-iters 1 --no-tensorboard --config",
                SMALL,
                "--run-dir",
                tmp_path / "run",
            )
            == 0
        )
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_empty_run_dir_is_refused(
    capsys: pytest.CaptureFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--run-dir "$UNSET"` meant the current directory: the run's logs went there."""
    monkeypatch.chdir(tmp_path)
    assert _run("train --env CartPole-v1 --stop-iters 1 --run-dir ''") == 2
    assert "argument --run-dir: must not be empty" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
