"""Speed, guarded by counts that do not depend on the machine's load (docs/performance.md).

Two kinds: host instructions per call under callgrind, openreg against the CPU, held against the
committed budget (tests/speed_guard.py, tests/speed_budget.json); and the ledger's counters of
work a steady training step must not do on the host: CPU kernels run to check a call, Meta kernel
runs, synchronizations, synchronizing or copying paths.
"""

import shutil

import pytest
import speed_guard
import torch
from torch import nn

OPTIMIZERS = [
    (torch.optim.SGD, {"momentum": 0.9}),
    (torch.optim.Adam, {}),
    (torch.optim.AdamW, {}),
    (torch.optim.Adagrad, {}),
    (torch.optim.RMSprop, {}),
]
FORMS = [(make, options, form) for make, options in OPTIMIZERS for form in ("foreach", "fused")
         if form == "foreach" or make is not torch.optim.RMSprop]  # RMSprop has no fused form


def _training_step(make, options, form):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(64, 10)).to("openreg")
    optimizer = make(model.parameters(), lr=1e-3, **options, **{form: True})
    x = torch.randn(16, 32, device="openreg")
    y = torch.randint(0, 10, (16,), device="openreg")

    def step():
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


@pytest.mark.parametrize("make,options,form", FORMS,
                         ids=[f"{m.__name__}-{f}" for m, _, f in FORMS])
def test_a_steady_training_step_checks_nothing_on_the_host_and_never_waits(make, options, form):
    step = _training_step(make, options, form)
    for _ in range(3):  # the first steps meet each call signature once, and make optimizer state
        step()
    torch.openreg.synchronize()
    with torch.openreg.count_paths() as counts:
        for _ in range(3):
            step()
    assert counts["check_kernels"] == 0
    assert counts["meta_calls"] == 0
    assert counts["synchronizations"] == 0
    assert counts["sync"] == 0
    assert counts["copying"] == 0
    assert counts["async"] > 0  # the step did run on the engine
    torch.openreg.synchronize()


def test_a_call_check_that_runs_a_kernel_runs_once_per_signature():
    # The foreach operators' per-tensor mul_(Scalar) reaches mul.out with self as its out=
    # argument: the out-overlap check asks the CPU kernel on stand-ins the first time only (a shape
    # no other test uses). It once did so on every call, at the tensor's size: optimizer steps
    # were 9 to 24 times slower than the CPU's.
    x = torch.randn(37, 41, device="openreg")
    with torch.openreg.count_paths() as first:
        torch._foreach_mul_([x], 0.5)
    with torch.openreg.count_paths() as later:
        for _ in range(10):
            torch._foreach_mul_([x], 0.5)
    assert first["check_kernels"] == 1
    assert later["check_kernels"] == 0
    expected = torch.randn(37, 41, generator=torch.Generator().manual_seed(0))
    y = expected.to("openreg")
    for _ in range(11):
        expected.mul_(0.5)
        y.mul_(0.5)
    assert torch.equal(y.cpu(), expected)


def test_a_random_operator_checks_each_new_value_at_the_call():
    # uniform_'s bounds are values, keyed for the check: a new value is checked at the call, in the
    # CPU's words, and a value seen before is not checked again.
    x = torch.empty(8, device="openreg")
    x.uniform_(0, 1)
    with torch.openreg.count_paths() as again:
        x.uniform_(0, 1)
    assert again["check_kernels"] == 0
    with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range"):
        x.uniform_(1, 0)
    with pytest.raises(RuntimeError, match=r"normal expects std >= 0\.0"):
        x.normal_(0, -1)


def test_a_call_check_that_warns_warns_on_every_call_as_the_cpu_does():
    for device in ("cpu", "openreg"):
        x = torch.zeros(1, device=device).expand(4)
        with pytest.warns(UserWarning, match="index_put_ on expanded tensors is deprecated"):
            x.index_put_((torch.tensor([0], device=device),), torch.ones(1, device=device))
        with pytest.warns(UserWarning, match="index_put_ on expanded tensors is deprecated"):
            x.index_put_((torch.tensor([0], device=device),), torch.ones(1, device=device))
    torch.openreg.synchronize()


def test_host_instructions_per_call_stay_within_the_budget():
    budget = speed_guard.load_budget()
    if not budget:  # make test runs on torch 2.13, which has one; make test-torch on others
        pytest.skip(f"no instruction budget for torch {speed_guard.release()} in tests/speed_budget.json "
                    "(python tests/speed_guard.py --update writes one)")
    assert shutil.which("valgrind") and shutil.which("callgrind_control"), (
        "valgrind is not installed: scripts/setup.sh installs it (make setup)")
    rows = speed_guard.measure()
    print("\n" + speed_guard.table(rows, budget))
    assert {r["case"] for r in rows} == set(budget), "run tests/speed_guard.py --update"
    failures = speed_guard.compare(rows, budget)
    assert not failures, "\n".join(failures)


def test_batches_taken_as_rows_of_one_tensor_share_a_signature():
    # A training loop's batches are rows of one index tensor, each at a new storage offset: the
    # offset is not part of a call's signature, so the Meta kernel of index runs once.
    data = torch.randn(64, 8, device="openreg")
    batches = torch.randperm(64, generator=torch.Generator().manual_seed(0)).view(8, 8).to("openreg")
    data[batches[0]]
    with torch.openreg.count_paths() as counts:
        rows = [data[batches[i]] for i in range(1, 8)]
    assert counts["meta_calls"] == 0
    expected = data.cpu()[batches.cpu()]
    assert all(torch.equal(row.cpu(), expected[i + 1]) for i, row in enumerate(rows))


def test_a_host_read_after_queued_work_waits_once_and_reads_the_result():
    # Note [Blocking copies run on the caller]: the copy of .item() runs on the calling thread once
    # the work queued before it has completed.
    a = torch.arange(4.0, device="openreg")
    for k in range(3):
        (a * k + 1).sum().item()
    with torch.openreg.count_paths() as counts:
        values = [(a * k + 1).sum().item() for k in range(20)]
    assert values == [(torch.arange(4.0) * k + 1).sum().item() for k in range(20)]
    assert counts["synchronizations"] == 20
    assert counts["check_kernels"] == 0 and counts["meta_calls"] == 0
