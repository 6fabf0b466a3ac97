"""RLlib's old names answered with the new ones (rlmod/algorithms/renamed.py), wherever a
config meets a name: attribute, setter keyword, update_from_dict, overrides, old setters."""

from __future__ import annotations

import re

import pytest

from rlmod.algorithms.dqn import DQNConfig
from rlmod.algorithms.ppo import PPOConfig
from rlmod.algorithms.renamed import RENAMED_SETTINGS


def test_num_rollout_workers_names_num_env_runners_everywhere() -> None:
    with pytest.raises(AttributeError, match=r"num_env_runners.*\.env_runners\("):
        PPOConfig().num_rollout_workers = 2
    with pytest.raises(TypeError, match=r"RLlib renamed num_rollout_workers to num_env_runners"):
        PPOConfig().env_runners(num_rollout_workers=2)
    with pytest.raises(ValueError, match=r"renamed num_rollout_workers to num_env_runners"):
        PPOConfig().update_from_dict({"num_rollout_workers": 2})
    with pytest.raises(KeyError, match=r"num_env_runners"):
        PPOConfig.overrides(num_rollout_workers=2)


def test_old_setters_name_their_new_home() -> None:
    with pytest.raises(AttributeError, match=r"\.rollouts\(\) to \.env_runners\(\)"):
        PPOConfig().rollouts(num_rollout_workers=2)
    with pytest.raises(AttributeError, match=r"\.learners\(num_gpus_per_learner=1\)"):
        PPOConfig().resources(num_gpus=1)
    with pytest.raises(AttributeError, match=r"\.env_runners\(explore="):
        DQNConfig().exploration(explore=False)
    assert not hasattr(PPOConfig(), "rollouts")  # still an AttributeError for hasattr
    with pytest.raises(TypeError) as plain:
        PPOConfig().training(no_such_thing=1)
    assert "RLlib" not in str(plain.value)  # only known old names get a hint


def test_model_keys_point_to_model_config() -> None:
    with pytest.raises(TypeError, match=r"\.rl_module\(model_config=\{'fcnet_hiddens'"):
        PPOConfig().training(fcnet_hiddens=[64])
    with pytest.raises(TypeError, match=r"\.rl_module\(model_config=\{'conv_filters'"):
        PPOConfig().training(conv_filters=[[16, 4, 2]])
    with pytest.raises(TypeError, match=r"model_config=\{'fcnet_hiddens': \[64, 64\]\}"):
        PPOConfig().training(model={"fcnet_hiddens": [64]})
    with pytest.raises(ValueError, match=r"model_config"):
        PPOConfig().update_from_dict({"fcnet_activation": "relu"})


def test_every_new_name_is_a_setting_of_its_setter() -> None:
    """The table cannot point at a name or setter rlmod does not have."""
    for old, (new, setter) in RENAMED_SETTINGS.items():
        keywords = getattr(PPOConfig, setter).__signature__.parameters
        assert new in keywords, (old, new, setter)
        assert old not in PPOConfig.settings(), old


def test_stable_baselines3_names_point_to_rlmods() -> None:
    with pytest.raises(TypeError, match=r"learning_rate is Stable-Baselines3's name.*lr="):
        PPOConfig().training(learning_rate=3e-4)
    with pytest.raises(ValueError, match=r"n_epochs is Stable-Baselines3's name.*num_epochs"):
        PPOConfig().update_from_dict({"n_epochs": 10})
    with pytest.raises(ValueError, match=r"buffer_size.*replay_buffer_config=\{'capacity'"):
        DQNConfig().update_from_dict({"buffer_size": 100_000})


def test_every_setter_keyword_a_hint_names_exists() -> None:
    from rlmod.algorithms.renamed import SB3_NAMES
    from rlmod.algorithms.sac import SACConfig

    named = [
        (setter, keyword)
        for text in SB3_NAMES.values()
        for setter, keyword in re.findall(r"\.(\w+)\((\w+)=", text)
    ]
    assert len(named) >= len(SB3_NAMES) - 1  # all but total_timesteps name one
    for setter, keyword in named:
        assert any(
            keyword in getattr(cls, setter).__signature__.parameters
            for cls in (PPOConfig, DQNConfig, SACConfig)
        ), (setter, keyword)
