"""The unboxed entries on borrowed arguments (Note [Borrowed arguments] in
csrc/aten/engine/BorrowedCalls.cpp): the same results as the CPU, in-place forms return their own
argument, and a call that raises gives its borrowed tensors back untouched."""

import sys

import pytest
import torch


def _pair(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
    return (a, b), (a.to("openreg"), b.to("openreg"))


@pytest.mark.parametrize(
    "call",
    [
        lambda a, b: a + b,
        lambda a, b: a - b * 2,
        lambda a, b: a / b,
        lambda a, b: torch.mm(a, b),
        lambda a, b: torch.addmm(a, a, b),
        lambda a, b: a.sum(dim=1),
        lambda a, b: a.mean(dim=0),
        lambda a, b: torch.where(a > 0, a, b),
        lambda a, b: torch.maximum(a, b).relu().exp().tanh().sigmoid(),
        lambda a, b: torch.nn.functional.gelu(a) + torch.nn.functional.silu(b),
        lambda a, b: torch.softmax(a, dim=1) + torch.log_softmax(b, dim=0),
        lambda a, b: a.abs().sqrt() + a.abs().add(1).rsqrt() - a.neg().pow(2),
    ],
)
def test_an_entry_gives_the_cpus_values(call):
    (a, b), (da, db) = _pair(4, 4)
    expected = call(a, b)
    got = call(da, db)
    assert got.device.type == "openreg" and got.dtype == expected.dtype
    assert torch.equal(got.cpu(), expected)


def test_in_place_entries_return_their_own_argument_with_the_cpus_values():
    (a, b), (da, _) = _pair(3, 5)
    for name, args in [("add_", (b,)), ("sub_", (b,)), ("mul_", (b,)), ("div_", (b,)),
                       ("clamp_min_", (0.1,)), ("addcmul_", (b, b)), ("addcdiv_", (b, b)),
                       ("lerp_", (b, 0.3))]:
        dargs = tuple(x.to("openreg") if isinstance(x, torch.Tensor) else x for x in args)
        out = getattr(da, name)(*dargs)
        getattr(a, name)(*args)
        assert out is da, name
        assert torch.equal(da.cpu(), a), name


def test_gradients_through_the_entries_equal_the_cpus():
    (a, b), (da, db) = _pair(6, 6, seed=1)
    for x, y in ((a, b), (da, db)):
        x.requires_grad_()
        y.requires_grad_()
        (torch.tanh(x @ y).sigmoid() * torch.nn.functional.gelu(y)).softmax(dim=1).sum().backward()
    assert torch.equal(da.grad.cpu(), a.grad) and torch.equal(db.grad.cpu(), b.grad)


def test_a_call_that_raises_leaves_its_borrowed_arguments_untouched():
    da, db = torch.ones(2, 3, device="openreg"), torch.ones(4, 5, device="openreg")
    counts = sys.getrefcount(da), sys.getrefcount(db)
    for _ in range(3):
        with pytest.raises(RuntimeError, match=r"must match the size|size of tensor a"):
            da + db
        with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
            torch.mm(da, db)
    assert (sys.getrefcount(da), sys.getrefcount(db)) == counts
    assert torch.equal((da + 1).cpu(), torch.full((2, 3), 2.0))
    assert torch.equal((db * 3).cpu(), torch.full((4, 5), 3.0))
