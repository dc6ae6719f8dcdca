"""The fast finiteness check (one sum) against the exact one, on the cases where a sum could mislead."""

import pytest
import torch

from paw.validate import all_finite, nonfinite


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_all_finite_agrees_with_isfinite(dtype):
    big = torch.finfo(dtype).max
    cases = {
        "plain": torch.randn(1000),
        "nan": torch.tensor([1.0, float("nan"), 2.0]),
        "inf": torch.tensor([1.0, float("inf")]),
        "both infinities": torch.tensor([float("inf"), float("-inf")]),   # sums to NaN
        "overflowing finite sum": torch.tensor([big, big, big]),            # sums to inf, every entry finite
        "cancelling huge values": torch.tensor([big, -big, 1.0]),
    }
    for name, values in cases.items():
        t = values.to(dtype)
        want = bool(torch.isfinite(t).all())
        assert all_finite(t) is want, name
        assert nonfinite(t) == int((~torch.isfinite(t)).sum()), name
    assert all_finite(torch.tensor([1, 2, 3])) and nonfinite(torch.tensor([1, 2])) == 0
