"""Warnings on openreg are the CPU's: given on every call the CPU gives them, and never lost when
the kernel that raised one ran in a task on a device worker (Note [Task warnings] in
csrc/core/TaskWarnings.h). Found by PyTorch's device-generic tests (docs/conformance.md)."""

import warnings

import torch

DEV = "openreg"


def caught(fn):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in seen]


def test_resizing_an_out_with_elements_warns_on_every_call_as_on_the_cpu():
    # The first call asks the Meta kernel, which warns; later calls are served by the shape cache.
    def calls(device):
        a = torch.ones(3, device=device)
        for _ in range(3):
            torch.add(a, a, out=torch.empty(2, device=device))
            torch.add(a, a, out=torch.empty(0, device=device))  # no elements: no warning

    for device in ("cpu", DEV):
        messages = caught(lambda device=device: calls(device))
        assert len(messages) == 3, (device, messages)
        assert all("An output with one or more elements was resized" in m for m in messages)


def test_an_empty_input_warns_on_its_first_call_as_often_as_on_the_cpu():
    # The first call of a signature whose tensors are all empty runs the CPU kernel on empty
    # stand-ins for its errors (Note [Errors of empty inputs]); the task gives the warnings, once.
    def calls(device):
        x = torch.empty(0, 3, device=device)
        for _ in range(2):
            x.std(dim=0)
            x.var(dim=1, correction=1)
        if device == DEV:
            torch.openreg.synchronize()

    counts = {device: len(caught(lambda device=device: calls(device))) for device in ("cpu", DEV)}
    assert counts["cpu"] == 4  # each call warns (degrees of freedom <= 0)
    assert counts[DEV] == counts["cpu"]


def non_contiguous_searchsorted(device):
    boundaries = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=device).t()
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=device).t()
    return torch.searchsorted(boundaries, values)


def test_a_warning_raised_in_a_task_arrives_when_the_result_is_read():
    torch.set_warn_always(True)  # searchsorted warns once per process otherwise
    try:
        cpu = caught(lambda: non_contiguous_searchsorted("cpu"))
        result = []
        device = caught(lambda: result.append(non_contiguous_searchsorted(DEV).cpu()))
        assert device == cpu and len(cpu) == 2 and "non-contiguous" in cpu[0]
        assert torch.equal(result[0], non_contiguous_searchsorted("cpu"))
        # Queued and synchronized: given by the synchronization.
        assert caught(lambda: (non_contiguous_searchsorted(DEV), torch.openreg.synchronize())) == cpu
        # Queued and left: given by the next operator call after the task ran, not lost.
        def later():
            non_contiguous_searchsorted(DEV)
            while not torch.openreg.current_stream().query():  # a query gives nothing
                pass
            torch.ones(1, device=DEV).add_(1)

        assert caught(later) == cpu
    finally:
        torch.set_warn_always(False)


def test_a_uint8_mask_warns_at_the_call_and_selects_what_the_cpu_selects():
    # ATen warns while it expands the indices, which on openreg happens in the task; the engine
    # gives the warning at the call and passes the bool mask it stands for.
    results = []
    for device in ("cpu", DEV):
        x = torch.arange(0.0, 16, device=device).view(4, 4)
        mask = torch.tensor([2, 0, 1, 0], dtype=torch.uint8, device=device)

        def assign_and_read(x=x, mask=mask, device=device):
            x[mask] = torch.tensor([3.0, 4.0, 5.0, 6.0], device=device)
            results.append((x.cpu(), x[mask].cpu()))

        messages = caught(assign_and_read)
        assert len(messages) == 2 and all("torch.uint8 is now deprecated" in m for m in messages)
    assert all(torch.equal(c, d) for c, d in zip(results[0], results[1], strict=True))


def test_a_call_in_deterministic_mode_gives_its_kernels_warnings_before_it_returns():
    # warn_only: put_ has no deterministic kernel, and the CPU's kernel warns. A call in
    # deterministic mode completes before it returns, so its warning is the call's (PyTorch's
    # test_nondeterministic_alert_put).
    mode = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        for device in ("cpu", DEV):
            x = torch.zeros(6, device=device)
            index = torch.tensor([1, 4], device=device)
            messages = caught(lambda x=x, index=index: x.put_(index, torch.ones(2, device=x.device)))
            assert any("put_" in m and "deterministic" in m for m in messages), (device, messages)
    finally:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
