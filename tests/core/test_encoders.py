"""The default encoders (rlmod/core/encoders.py): which layers each observation kind gets,
the conv_filters checks, and images staying uint8 until the module."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlmod.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
from rlmod.core.conv import default_conv_filters
from rlmod.core.encoders import CNNEncoder, MLPEncoder, PackedEncoder
from rlmod.core.models import DefaultModelConfig
from rlmod.utils.packed_obs import PackedObservationBox

TWO = gym.spaces.Discrete(2)


def ppo(obs_space: gym.Space, **model_config: object) -> DefaultPPORLModule:
    return DefaultPPORLModule(
        observation_space=obs_space, action_space=TWO, model_config=model_config
    )


def convs(module: nn.Module) -> list[nn.Conv2d]:
    return [m for m in module.modules() if isinstance(m, nn.Conv2d)]


def test_vector_obs_get_an_mlp_as_before():
    m = ppo(gym.spaces.Box(-1, 1, (4,), np.float32), fcnet_hiddens=[32, 16])
    assert isinstance(m.encoder, MLPEncoder) and isinstance(m.vf_encoder, MLPEncoder)
    assert [x.out_features for x in m.encoder if isinstance(x, nn.Linear)] == [32, 16]
    assert m.pi[0].in_features == 16 and not convs(m)
    assert "encoder.0.weight" in m.state_dict()  # the MLP's parameter names are kept


def test_nature_cnn_for_84x84_and_separate_value_cnn():
    m = ppo(gym.spaces.Box(0, 255, (84, 84, 4), np.uint8))
    assert isinstance(m.encoder, CNNEncoder) and isinstance(m.vf_encoder, CNNEncoder)
    got = [(c.in_channels, c.out_channels, c.kernel_size, c.stride) for c in convs(m.encoder)]
    assert got == [(4, 32, (8, 8), (4, 4)), (32, 64, (4, 4), (2, 2)), (64, 64, (3, 3), (1, 1))]
    assert m.encoder.out_dim == 7 * 7 * 64 == m.pi[0].in_features
    assert m.vf_encoder is not m.encoder
    out = m.forward_train({"obs": torch.randint(0, 256, (3, 84, 84, 4), dtype=torch.uint8)})
    assert out["action_dist_inputs"].shape == (3, 2)


def test_vf_share_layers_shares_the_cnn_and_head_fcnet_hiddens_sizes_the_heads():
    m = ppo(
        gym.spaces.Box(0, 255, (10, 10, 3), np.uint8), vf_share_layers=True, head_fcnet_hiddens=[64]
    )
    assert not hasattr(m, "vf_encoder") and len(convs(m)) == 2
    assert [x.out_features for x in m.pi if isinstance(x, nn.Linear)] == [64, 2]
    assert [x.out_features for x in m.vf if isinstance(x, nn.Linear)] == [64, 1]


def test_dict_of_image_and_vector_gets_a_cnn_and_an_mlp():
    space = gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (10, 10, 1), np.uint8),
            "pos": gym.spaces.Box(-1, 1, (3,), np.float32),
            "cell": gym.spaces.Discrete(4),
        }
    )
    packed = PackedObservationBox(space)
    assert packed.shape == (100 + 4 * 7,) and packed.dtype == np.uint8
    m = ppo(packed, fcnet_hiddens=[8])
    assert isinstance(m.encoder, PackedEncoder) and len(m.encoder.cnns) == 1
    assert m.encoder.mlp[0].in_features == 7  # pos (3) + one-hot cell (4)
    assert m.encoder.out_dim == 3 * 3 * 32 + 8 == m.pi[0].in_features


def test_discrete_obs_reach_the_module_one_hot():
    from rlmod.connectors.env_to_module import default_env_to_module

    [one_hot] = default_env_to_module(gym.spaces.Discrete(5))
    space = one_hot.recompute_output_observation_space(gym.spaces.Discrete(5), TWO)
    m = ppo(space, fcnet_hiddens=[8])
    assert isinstance(m.encoder, MLPEncoder) and m.encoder[0].in_features == 5


@pytest.mark.parametrize(
    "filters, match",
    [
        ([[16, 4]], r"conv_filters'\]\[0\]"),
        ([[16, 4, 2, "full"]], r"padding"),
        ([[0, 4, 2]], r"conv_filters'\]\[0\]"),
        ([], r"non-empty list"),
        ([[16, 32, 1, "valid"]], r"does not fit the 10x10"),
    ],
)
def test_bad_conv_filters_are_refused_with_the_format(filters, match):
    with pytest.raises(ValueError, match=match):
        ppo(gym.spaces.Box(0, 255, (10, 10, 1), np.uint8), conv_filters=filters)


def test_conv_filters_on_vector_obs_is_an_error():
    with pytest.raises(ValueError, match="conv_filters.*not\\s+images"):
        ppo(gym.spaces.Box(-1, 1, (4,), np.float32), conv_filters=[[16, 4, 2]])


def test_conv_initializers_must_be_torch_init_names():
    with pytest.raises(ValueError, match="in-place torch.nn.init"):
        DefaultModelConfig(conv_kernel_initializer="xavier_uniform")
    with pytest.raises(ValueError, match="as a string"):
        DefaultModelConfig(conv_kernel_initializer=nn.init.xavier_uniform_)
    m = ppo(
        gym.spaces.Box(0, 255, (10, 10, 1), np.uint8),
        conv_bias_initializer="constant_",
        conv_bias_initializer_kwargs={"val": 0.5},
    )
    assert all(torch.all(c.bias == 0.5) for c in convs(m))


def test_rllib_padding_and_pair_kernels():
    m = ppo(
        gym.spaces.Box(0, 255, (9, 12, 2), np.uint8),
        conv_filters=[[8, [3, 5], [1, 2]], [4, 3, 3, "valid"]],
    )
    # "same": ceil(9/1) x ceil(12/2) = 9x6; "valid": (9-3)//3+1 x (6-3)//3+1 = 3x2
    assert m.encoder.out_dim == 3 * 2 * 4
    assert m.encoder(torch.zeros(2, 9, 12, 2, dtype=torch.uint8)).shape == (2, 24)


def test_default_filters_per_size_and_the_rule_for_others():
    assert default_conv_filters((10, 10, 4)) == [[16, 5, 2], [32, 5, 2]]
    assert default_conv_filters((64, 64, 3))[0] == [32, 4, 2]
    assert default_conv_filters((28, 28, 1)) == [[16, 4, 2], [32, 4, 2]]
    assert default_conv_filters((5, 7, 1)) == [[16, 3, 1]]
    assert len(default_conv_filters((100, 100, 3))) == 4
    assert len(default_conv_filters((10, 10, 10))) == 2  # MinAtar Seaquest: 10 channels
    with pytest.raises(ValueError, match="channels-first"):
        default_conv_filters((4, 84, 84))  # gymnasium's FrameStackObservation


def test_uint8_images_are_divided_by_255_inside_the_module():
    m = ppo(gym.spaces.Box(0, 255, (10, 10, 1), np.uint8))
    x = torch.randint(0, 256, (4, 10, 10, 1), dtype=torch.uint8)
    as_float = ppo(gym.spaces.Box(0.0, 1.0, (10, 10, 1), np.float32))
    as_float.load_state_dict(m.state_dict())
    torch.testing.assert_close(
        m.forward_inference({"obs": x})["action_dist_inputs"],
        as_float.forward_inference({"obs": x.float() / 255})["action_dist_inputs"],
    )


@pytest.mark.parametrize("shape", [(10, 10, 4), (84, 84, 4)])
def test_cnn_stays_channels_last_and_flattens_in_hwc_order(shape):
    """The features are the last conv output flattened in (H, W, C) order, a view of it,
    and its gradient comes back channels-last (no layout conversion in the backward pass,
    the reason for the order: benchmarks/investigations/pixel_ppo_floor.py)."""
    enc = ppo(gym.spaces.Box(0, 255, shape, np.uint8)).encoder
    obs = torch.randint(0, 256, (3, *shape), dtype=torch.uint8)
    conv_out: list[torch.Tensor] = []
    grads: list[torch.Tensor] = []

    def keep(module: nn.Module, inputs: object, output: torch.Tensor) -> None:
        conv_out.append(output)
        output.register_hook(grads.append)

    enc.convs[-1].register_forward_hook(keep)  # the last activation: the CNN's output
    features = enc(obs)
    (last,) = conv_out
    assert last.is_contiguous(memory_format=torch.channels_last)
    assert features.data_ptr() == last.data_ptr()  # a view, not a copy
    torch.testing.assert_close(features, last.permute(0, 2, 3, 1).reshape(3, -1))
    (features * torch.randn_like(features)).sum().backward()  # a dense gradient
    assert grads[0].is_contiguous(memory_format=torch.channels_last)


def test_cnn_modules_stack_and_act_as_they_do_alone():
    from rlmod.core import MultiRLModule
    from rlmod.core.stacked import find_stack_groups

    img = gym.spaces.Box(0, 255, (10, 10, 1), np.uint8)
    multi = MultiRLModule({f"p{i}": ppo(img) for i in range(3)})
    [group] = find_stack_groups(multi)
    obs = torch.randint(0, 256, (5, 10, 10, 1), dtype=torch.uint8)
    index = torch.tensor([0, 2, 2, 1, 0])
    stacked = group.forward_exploration(obs, index)["action_dist_inputs"]
    alone = torch.cat(
        [
            multi[f"p{int(i)}"].forward_exploration({"obs": obs[j : j + 1]})["action_dist_inputs"]
            for j, i in enumerate(index)
        ]
    )
    torch.testing.assert_close(stacked, alone)


@pytest.mark.fast_path
def test_cnn_modules_build_deferred_with_the_weights_of_a_normal_build():
    from rlmod.core.deferred_init import PendingInit, build_deferred
    from rlmod.core.multi_rl_module import MultiRLModuleSpec
    from rlmod.core.rl_module import RLModuleSpec

    img = gym.spaces.Box(0, 255, (10, 10, 1), np.uint8)
    spec = MultiRLModuleSpec(
        rl_module_specs={
            f"p{i}": RLModuleSpec(
                module_class=DefaultPPORLModule,
                observation_space=img,
                action_space=TWO,
                inference_only=True,
            )
            for i in range(2)
        }
    )
    rng = torch.get_rng_state()
    module, deferred = build_deferred(spec)
    assert deferred == ["p0", "p1"]
    PendingInit(spec, deferred, rng).initialise(module)
    torch.set_rng_state(rng)
    normal = spec.build()
    for (name, a), b in zip(module.state_dict().items(), normal.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_packed_space_round_trips_through_json_and_pickle():
    import pickle

    from rlmod.utils.spaces import space_from_dict, space_to_dict

    space = PackedObservationBox(
        gym.spaces.Tuple([gym.spaces.Box(0, 1, (4, 4, 2), bool), gym.spaces.Discrete(3)])
    )
    for copy in (space_from_dict(space_to_dict(space)), pickle.loads(pickle.dumps(space))):
        assert isinstance(copy, PackedObservationBox) and copy == space
        assert [p.kind for p in copy.images] == ["bool"] and copy.vector_dim == 3
    assert space != PackedObservationBox(
        gym.spaces.Tuple([gym.spaces.Box(0, 255, (8, 8, 1), np.uint8)])
    )


@pytest.mark.parametrize("name", ["IntrinsicCuriosityModel", "RandomNetworkDistillation"])
def test_curiosity_modules_refuse_packed_observations_with_the_fix(name):
    import rlmod.curiosity

    space = PackedObservationBox(
        gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (4, 4, 1), np.uint8)})
    )
    with pytest.raises(TypeError, match="FlattenObservation"):
        getattr(rlmod.curiosity, name)(observation_space=space, action_space=TWO)


def test_conv_filters_take_numpy_ints_and_packed_samples_decode():
    m = ppo(
        gym.spaces.Box(0, 255, (10, 10, 1), np.uint8),
        conv_filters=[[np.int64(8), np.int64(3), [2, np.int64(2)]]],
    )
    assert convs(m.encoder)[0].stride == (2, 2)
    space = PackedObservationBox(
        gym.spaces.Dict(
            {"image": gym.spaces.Box(0, 255, (4, 4, 1), np.uint8), "pos": gym.spaces.Box(-1, 1)}
        )
    )
    space.seed(0)
    row = space.sample()
    assert space.contains(row)
    _, vector = space.unpack(torch.from_numpy(row[None]))
    assert vector is not None and -1 <= float(vector[0, 0]) <= 1


def test_cnn_weights_of_the_old_chw_flatten_are_refused_with_the_reason():
    """Weights saved when the CNN's features were flattened in (C, H, W) order (layers named
    `cnn`) would load into the same shapes and act on permuted features."""
    module = ppo(gym.spaces.Box(0, 255, (10, 10, 4), np.uint8))
    old = {k.replace(".convs.", ".cnn."): v for k, v in module.get_state().items()}
    with pytest.raises(ValueError, match=r"\(C, H, W\) order.*Retrain"):
        module.set_state(old)
    module.set_state(module.get_state())  # today's names load
