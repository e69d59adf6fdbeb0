import math

import pytest
import torch

from cuda_agent.env.verify import compare_outputs, tolerances


def test_equal_and_within_tolerance():
    ref = torch.randn(64, 64)
    assert compare_outputs(ref, ref.clone(), 1e-2, 1e-2).ok
    result = compare_outputs(ref, ref + 5e-3, 1e-2, 1e-2)
    assert result.ok and result.max_abs_error == pytest.approx(5e-3, rel=1e-3)


def test_outside_tolerance_names_first_bad_element():
    ref = torch.zeros(4, 4)
    out = ref.clone()
    out[2, 3] = 1.0
    result = compare_outputs(ref, out, 1e-2, 1e-2)
    assert not result.ok and "1 of 16 elements" in result.message and "[2, 3]" in result.message


def test_shape_dtype_and_type_must_match_exactly():
    ref = torch.ones(2, 3)
    assert "shape" in compare_outputs(ref, torch.ones(3, 2), 1e-2, 1e-2).message
    assert "dtype" in compare_outputs(ref, torch.ones(2, 3, dtype=torch.float64), 1e-2, 1e-2).message
    assert not compare_outputs(ref, [ref], 1e-2, 1e-2).ok


def test_nan_and_inf_fail_unless_reference_has_them():
    ref = torch.ones(8)
    out = ref.clone()
    out[0] = math.nan
    assert "NaN/Inf" in compare_outputs(ref, out, 1e-2, 1e-2).message
    out[0] = math.inf
    assert not compare_outputs(ref, out, 1e-2, 1e-2).ok
    ref_inf = ref.clone()
    ref_inf[0] = math.inf
    assert compare_outputs(ref_inf, out, 1e-2, 1e-2).ok
    assert not compare_outputs(ref_inf, torch.ones(8), 1e-2, 1e-2).ok


def test_containers_element_by_element():
    a, b = torch.randn(3), torch.randn(2, 2)
    assert compare_outputs((a, {"k": b}), (a.clone(), {"k": b.clone()}), 1e-2, 1e-2).ok
    bad = compare_outputs((a, {"k": b}), (a.clone(), {"k": b + 1}), 1e-2, 1e-2)
    assert not bad.ok and "output[1]['k']" in bad.message
    assert "length" in compare_outputs([a, b], [a], 1e-2, 1e-2).message


def test_integer_outputs_need_exact_match():
    ref = torch.arange(10)
    assert compare_outputs(ref, ref.clone(), 1e-2, 1e-2).ok
    off = ref.clone()
    off[3] += 1
    assert not compare_outputs(ref, off, 1e-2, 1e-2).ok


def test_dtype_aware_tolerance_floors():
    assert tolerances(torch.float32, 1e-4, 1e-4) == (1e-4, 1e-4)
    assert tolerances(torch.bfloat16, 1e-4, 1e-4) == (8e-3, 8e-3)
    ref = torch.randn(100).bfloat16()
    nudged = (ref.float() * (1 + 4e-3)).bfloat16()
    assert compare_outputs(ref, nudged, 1e-4, 1e-4).ok


def test_scalars():
    assert compare_outputs(1.0, torch.tensor(1.001), 1e-2, 1e-2).ok
    assert not compare_outputs(1.0, 2.0, 1e-2, 1e-2).ok
