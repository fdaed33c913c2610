"""Generators of openreg devices: the same engine and state layout as the CPU generator, so the
same seed gives the same stream; the torch.openreg random API shaped like torch.cuda's."""

import pytest
import torch

from torch_openreg._compat import torch_before

openreg = torch.openreg


def test_default_generator_state_equals_cpu_for_the_same_seed():
    openreg.manual_seed(1234)
    torch.random.default_generator.manual_seed(1234)
    assert torch.equal(openreg.get_rng_state(), torch.get_rng_state())
    assert openreg.initial_seed() == 1234


def test_torch_manual_seed_seeds_every_device():
    torch.manual_seed(77)
    states = openreg.get_rng_state_all()
    assert len(states) == 2
    assert all(torch.equal(s, torch.get_rng_state()) for s in states)


def test_states_move_between_devices_and_the_cpu():
    openreg.manual_seed_all(5)
    torch.randn(10, generator=torch.Generator().manual_seed(1))  # unrelated CPU use
    saved = openreg.get_rng_state(1)
    openreg.set_rng_state(saved, 0)
    assert torch.equal(openreg.get_rng_state(0), saved)
    cpu = torch.Generator()
    cpu.set_state(saved)
    device_gen = torch.Generator(device="openreg")
    device_gen.set_state(saved)
    assert torch.equal(device_gen.get_state(), cpu.get_state())
    openreg.set_rng_state_all([saved, saved])
    assert all(torch.equal(s, saved) for s in openreg.get_rng_state_all())


def test_new_generators_are_per_device():
    g0 = torch.Generator(device="openreg")
    g1 = torch.Generator(device="openreg:1")
    assert g0.device == torch.device("openreg:0") and g1.device == torch.device("openreg:1")
    g0.manual_seed(9)
    assert g0.initial_seed() == 9
    assert g1.initial_seed() == 67280421310721  # the CPU default seed


def test_seed_is_non_deterministic_and_seed_all_aligns_devices():
    openreg.seed()
    first = openreg.initial_seed()
    openreg.seed()
    assert openreg.initial_seed() != first
    openreg.seed_all()
    assert torch.equal(openreg.get_rng_state(0), openreg.get_rng_state(1))


@pytest.mark.skipif(torch_before(2, 14), reason="torch.accelerator.random is new in torch 2.14")
def test_torch_accelerator_random_reads_openreg_s_generators():
    # 2.14's device-generic RNG API goes through the hooks' getDefaultGenerator(index).
    openreg.manual_seed_all(11)
    openreg.manual_seed(99)  # the current device only
    random = torch.accelerator.random
    assert random.initial_seed() == openreg.initial_seed() == 99
    assert random.initial_seed(1) == 11
    assert torch.equal(random.get_rng_state(), openreg.get_rng_state())
    torch.randn(4, device="openreg:1")  # moves device 1's state only
    assert torch.equal(random.get_rng_state(1), openreg.get_rng_state(1))
    assert not torch.equal(random.get_rng_state(1), random.get_rng_state(0))
    states = random.get_rng_state_all()
    assert len(states) == openreg.device_count()
    assert all(torch.equal(a, b) for a, b in zip(states, openreg.get_rng_state_all(), strict=True))


def test_offset_functions_refuse_with_the_reason_and_leave_the_stream_untouched():
    # The reference backend's module has set_offset/get_offset; a Mersenne Twister has no offset,
    # so both refuse, name the device, and point to the state functions. Nothing moves.
    openreg.manual_seed(3)
    before = openreg.get_rng_state(1)
    with pytest.raises(RuntimeError, match=r"does not support set_offset: .*openreg:1.*get_rng_state"):
        openreg.set_offset(128, "openreg:1")
    with pytest.raises(RuntimeError, match=r"does not support get_offset: .*openreg:0"):
        openreg.get_offset()
    assert torch.equal(openreg.get_rng_state(1), before)
    with pytest.raises(RuntimeError, match="invalid device index 7"):
        openreg.get_offset(7)
    assert {"set_offset", "get_offset"} <= set(openreg.__all__)
    # the CPU generator the engine comes from answers the same way
    with pytest.raises(RuntimeError, match="does not use offset"):
        torch.Generator().get_offset()
