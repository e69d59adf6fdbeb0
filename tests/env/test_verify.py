import math

import pytest
import torch

from cuda_agent.env.rules.dependence import Dependence
from cuda_agent.env.rules.samples import (ForgedSamples, compare_sampled, compare_samples, decode_samples,
                                          pack_samples, sample_reference, start_sample_reference,
                                          take_samples)
from cuda_agent.env.rules.verify import Tolerance, compare_outputs, is_dense

PUBLISHED = Tolerance(1e-2, 1e-2)
STRICT = Tolerance(1e-2, 1e-2, relative_to_scale=True)


def test_equal_and_within_tolerance():
    ref = torch.randn(64, 64)
    assert compare_outputs(ref, ref.clone(), PUBLISHED).ok
    result = compare_outputs(ref, ref + 5e-3, PUBLISHED)
    assert result.ok and result.max_abs_error == pytest.approx(5e-3, rel=1e-3)


def test_outside_tolerance_names_first_bad_element():
    ref = torch.zeros(4, 4)
    out = ref.clone()
    out[2, 3] = 1.0
    result = compare_outputs(ref, out, PUBLISHED)
    assert not result.ok and "1 of 16 elements" in result.message and "[2, 3]" in result.message


def test_shape_dtype_and_type_must_match_exactly():
    ref = torch.ones(2, 3)
    assert "shape" in compare_outputs(ref, torch.ones(3, 2), PUBLISHED).message
    assert "dtype" in compare_outputs(ref, torch.ones(2, 3, dtype=torch.float64), PUBLISHED).message
    assert not compare_outputs(ref, [ref], PUBLISHED).ok


def test_nan_and_inf_fail_unless_reference_has_them():
    ref = torch.ones(8)
    out = ref.clone()
    out[0] = math.nan
    assert "NaN/Inf" in compare_outputs(ref, out, PUBLISHED).message
    out[0] = math.inf
    assert not compare_outputs(ref, out, PUBLISHED).ok
    ref_inf = ref.clone()
    ref_inf[0] = math.inf
    assert compare_outputs(ref_inf, out, PUBLISHED).ok
    assert not compare_outputs(ref_inf, torch.ones(8), PUBLISHED).ok


def test_containers_element_by_element():
    a, b = torch.randn(3), torch.randn(2, 2)
    assert compare_outputs((a, {"k": b}), (a.clone(), {"k": b.clone()}), PUBLISHED).ok
    bad = compare_outputs((a, {"k": b}), (a.clone(), {"k": b + 1}), PUBLISHED)
    assert not bad.ok and "output[1]['k']" in bad.message
    assert "length" in compare_outputs([a, b], [a], PUBLISHED).message


def test_integer_outputs_need_exact_match():
    ref = torch.arange(10)
    assert compare_outputs(ref, ref.clone(), PUBLISHED).ok
    off = ref.clone()
    off[3] += 1
    assert not compare_outputs(ref, off, PUBLISHED).ok


def test_dtype_aware_tolerance_floors():
    assert Tolerance(1e-4, 1e-4).for_tensor(torch.ones(2)) == (1e-4, 1e-4)
    assert Tolerance(1e-4, 1e-4).for_tensor(torch.ones(2, dtype=torch.bfloat16)) == (8e-3, 8e-3)
    ref = torch.randn(100).bfloat16()
    nudged = (ref.float() * (1 + 4e-3)).bfloat16()
    assert compare_outputs(ref, nudged, Tolerance(1e-4, 1e-4)).ok


def test_scalars():
    assert compare_outputs(1.0, torch.tensor(1.001), PUBLISHED).ok
    assert not compare_outputs(1.0, 2.0, PUBLISHED).ok


def test_strict_tolerance_scales_with_the_output():
    """Softmax over 65536 columns: values near 1.5e-5, so `1 / dim` everywhere is within an absolute
    1e-2. The strict tolerance is relative to the output's magnitude; honest float32 error passes."""
    ref = torch.softmax(torch.randn(4, 65536), dim=1)
    constant = torch.full_like(ref, 1 / 65536)
    assert compare_outputs(ref, constant, PUBLISHED).ok
    strict = compare_outputs(ref, constant, STRICT)
    assert not strict.ok and "atol=" in strict.message
    honest = torch.softmax(torch.randn(4, 65536, dtype=torch.float64), dim=1)
    ref64 = honest.float()
    assert compare_outputs(ref64, (honest * (1 + 1e-6)).float(), STRICT).ok
    # outputs of magnitude 1 or more keep the published absolute tolerance
    assert Tolerance(1e-2, 1e-2, True).for_tensor(torch.full((8,), 3.0)) == (1e-2, 1e-2)


def test_samples_catch_partial_and_wrong_outputs_at_positions_drawn_after_the_call():
    ref = torch.randn(256, 512)
    assert compare_samples(ref, take_samples(ref.clone()), PUBLISHED).ok
    partial = ref.clone()
    partial[128:] = float("nan")              # half the output never written
    verdict = compare_samples(ref, take_samples(partial), PUBLISHED)
    assert not verdict.ok and verdict.nonfinite
    assert not compare_samples(ref, take_samples(ref + 1), PUBLISHED).ok
    assert "shape" in compare_samples(ref, take_samples(ref[:10]), PUBLISHED).message
    assert "structure" in compare_samples((ref,), take_samples(ref), PUBLISHED).message


def test_samples_the_harness_sampler_cannot_have_taken_are_refused_not_compared():
    """A sampler rewritten in the candidate's process: no samples, fewer, outside the output, garbage."""
    import copy

    ref = torch.randn(64, 64)
    honest = take_samples(ref.clone())
    assert compare_samples(ref, honest, PUBLISHED).ok
    small = torch.randn(7)
    assert compare_samples(small, take_samples(small.clone()), PUBLISHED).ok   # every element when fewer
    complex_ref = torch.randn(300, dtype=torch.complex64)
    assert compare_samples(complex_ref, take_samples(complex_ref.clone()), PUBLISHED).ok

    def forged(change):
        samples = copy.deepcopy(honest)
        change(samples)
        return samples

    def ints(values):
        return pack_samples(torch.tensor(values, dtype=torch.int64))

    honest_values = honest["tensors"][0]["values"]
    for change in (lambda s: s.update(tensors=[]),                                     # nothing to compare
                   lambda s: s["tensors"][0].update(positions=ints([0]),
                                                    values=pack_samples(ref.view(-1)[:1].double())),
                   lambda s: s["tensors"][0].update(positions=ints([1 << 40] * 2048)),   # outside the output
                   lambda s: s["tensors"][0].update(positions=ints([-1] * 2048)),
                   lambda s: s["tensors"][0].update(values="x" * 2048),                  # not packed samples
                   lambda s: s["tensors"][0].update(values=[0.0] * 2048),                # a JSON list, not packed
                   lambda s: s["tensors"][0].update(values=pack_samples(torch.zeros(2047).double())),  # fewer
                   lambda s: s["tensors"][0].update(values=honest_values[:-4]),           # a partial value
                   lambda s: s["tensors"][0].pop("positions"),
                   lambda s: s.update(tensors=[None])):
        with pytest.raises(ForgedSamples):
            compare_samples(ref, forged(change), PUBLISHED)
        with pytest.raises(ForgedSamples):   # decoded ahead by the judge (before it holds the device): the same
            record = forged(change)
            start_sample_reference(ref, record, PUBLISHED, decoded=decode_samples(record))
    with pytest.raises(ForgedSamples):
        compare_samples(ref, ["not", "a", "record"], PUBLISHED)
    assert decode_samples(["not", "a", "record"]) is None
    for value in (ref, complex_ref, torch.arange(10)):   # decoded ahead or not, the same reading
        record = take_samples(value.clone())
        ahead = start_sample_reference(value, record, PUBLISHED, decoded=decode_samples(record)).finish()
        assert compare_sampled(ahead, record) == compare_samples(value, record, PUBLISHED)
        assert torch.equal(ahead.tensors[0].expected, sample_reference(value, record, PUBLISHED).tensors[0].expected)
    # a wrong shape or dtype stays the output's own fault, a dtype torch does not have too (read ahead by
    # the judge, it raised there: a failure of the harness's own)
    assert "dtype" in compare_samples(ref, take_samples(ref.double()), PUBLISHED).message
    record = forged(lambda s: s["tensors"][0].update(dtype="no_such_dtype"))
    verdict = compare_sampled(start_sample_reference(ref, record, PUBLISHED, decoded=decode_samples(record)).finish(),
                              record)
    assert not verdict.ok and "dtype" in verdict.message, verdict


def test_broadcast_outputs_are_refused_unless_the_reference_is_one_too():
    row = torch.randn(1, 512)
    expanded = row.expand(256, 512)
    assert not is_dense(expanded) and is_dense(row.repeat(256, 1)) and is_dense(row.repeat(256, 1).t())
    verdict = compare_samples(row.repeat(256, 1), take_samples(expanded), PUBLISHED)
    assert not verdict.ok and verdict.rule == "output-layout"
    assert compare_samples(expanded, take_samples(expanded), PUBLISHED).ok


def test_a_view_with_other_strides_is_refused_where_the_reference_is_contiguous():
    """A transposed view of a plain copy holds the transpose's values when read through its strides:
    the reader, not the solution, would do the work. The judge decides from the strides alone."""
    x = torch.randn(64, 48)
    transposed = x.clone().t()                      # dense, not contiguous
    verdict = compare_samples(x.t().contiguous(), take_samples(transposed), PUBLISHED)
    assert not verdict.ok and verdict.rule == "output-layout" and "whoever reads it" in verdict.message
    assert compare_samples(x.t().contiguous(), take_samples(x.t().contiguous()), PUBLISHED).ok
    # a reference that is itself only dense admits any dense layout, not a broadcast one
    assert compare_samples(x.t(), take_samples(transposed), PUBLISHED).ok
    assert compare_samples(x.t(), take_samples(x.t().contiguous()), PUBLISHED).ok
    assert compare_samples(x.t(), take_samples(x[:1].expand(64, 48).t()), PUBLISHED).rule == "output-layout"
    # the strides of dimensions of size 1 do not matter (torch's is_contiguous)
    column = torch.randn(64, 1)
    odd = column.clone().as_strided((64, 1), (1, 7))
    assert compare_samples(column, take_samples(odd), PUBLISHED).ok
    # a record's own say-so counts for nothing: only its strides do, and strides it cannot have are refused
    record = take_samples(transposed)
    record["tensors"][0]["dense"] = record["tensors"][0]["contiguous"] = True
    assert compare_samples(x.t().contiguous(), record, PUBLISHED).rule == "output-layout"
    record["tensors"][0]["strides"] = [1]
    assert compare_samples(x.t().contiguous(), record, PUBLISHED).rule == "output-layout"


def test_a_whole_output_is_held_to_the_same_layout_from_the_strides_it_was_read_through():
    """Verification calls compare outputs whole: the strides they were read through are judged alike."""
    from cuda_agent.env.rules.samples import whole_layout_refused

    x = torch.randn(64, 48)
    reference = [x.t().contiguous(), x[:1].expand(64, 48)]
    assert whole_layout_refused(reference, [[64, 1], [48, 1]]) is None
    assert whole_layout_refused(reference, [[64, 1], [0, 1]]) is None        # a broadcast reference: free
    refused = whole_layout_refused(reference, [[1, 48], [48, 1]])            # a transposed view of a copy
    assert refused.rule == "output-layout" and refused.message.startswith("output[0]: a view with strides")
    assert whole_layout_refused(reference, [None, [48, 1]]).rule == "output-layout"


def test_dependence_rejects_outputs_that_do_not_follow_the_inputs():
    """A hinge loss over many random values is 1.0 +- 0.005: the constant 1.0 is within tolerance of
    every draw, but it does not move with the inputs as the reference does."""
    refs = [torch.tensor(1.0 + 0.005 * i) for i in (-1, 0, 1, 2)]
    constant = Dependence()
    for r in refs:
        constant.add(r, torch.tensor(1.0))
    assert "same for every input set" in constant.verdict()
    noisy = Dependence()
    for i, r in enumerate(refs):
        noisy.add(r, torch.tensor(1.0 + 0.004 * ((-1) ** i)))   # moves, but not with the inputs
    assert "does not follow" in noisy.verdict()
    honest = Dependence()
    for r in refs:
        honest.add(r, r + 1e-6)
    assert honest.verdict() is None
    flat = Dependence()                               # the reference does not move either: nothing to say
    for _ in refs:
        flat.add(torch.tensor(2.0), torch.tensor(2.0))
    assert flat.verdict() is None


def test_output_scale_is_the_rms_of_the_finite_values_in_every_case():
    """The one-pass norm (what the judge runs on every call) agrees with the plain definition, also
    when values are non-finite or their squares overflow float32."""
    from cuda_agent.env.rules.verify import output_scale

    def plain(t):
        v = t.reshape(-1)
        v = v[torch.isfinite(v)].double()
        return float(v.pow(2).mean().sqrt()) if v.numel() else 1.0

    x = torch.randn(300, 70)
    holes = x.clone()
    holes[0, 0], holes[5, 5] = float("nan"), float("inf")
    huge = torch.full((10,), 3e38)
    for t in (x, holes, huge, x.half()):
        assert output_scale(t) == pytest.approx(plain(t.float() if t.dtype == torch.half else t), rel=1e-5)
    assert output_scale(torch.zeros(4)) == 1.0 and output_scale(torch.full((3,), float("nan"))) == 1.0


def test_the_all_finite_comparison_gives_the_general_paths_verdicts(monkeypatch):
    """compare_outputs takes a shorter path when every value is finite; it must say exactly what the
    general path says (verdict, error, message, relative error), passing and failing alike."""
    from cuda_agent.env.rules import verify

    gen = torch.Generator().manual_seed(3)
    cases = []
    for dtype in (torch.float32, torch.float64, torch.float16):
        ref = torch.randn(64, 33, generator=gen).to(dtype)
        cases += [(ref, ref.clone()), (ref, ref + 0.004), (ref, ref * 1.05), (ref, ref + 0.5 * (ref > 1))]
    cases.append((torch.zeros(5), torch.zeros(5)))
    tol = Tolerance()
    fast = [compare_outputs(r, o, tol) for r, o in cases]
    monkeypatch.setattr(verify, "_compare_finite", lambda *args: None)
    general = [compare_outputs(r, o, tol) for r, o in cases]
    assert fast == general
    assert [c.ok for c in fast].count(False) >= 4   # failures were compared too


def test_the_reference_read_at_the_samples_needs_no_device_to_compare():
    """The judge reads the reference where the candidate was sampled (and its scale) while it holds the
    device, then compares on the CPU: same verdicts as comparing against the whole reference; a
    reference with non-finite values asks for the device again (its scale leaves the fast path)."""
    strict = Tolerance(1e-4, 1e-4, relative_to_scale=True, base_scales=(1.0,))
    ref = torch.randn(128, 64) * 1e-3
    good, bad = take_samples(ref.clone()), take_samples(ref + 1e-3)
    for tol in (PUBLISHED, strict):
        sampled = sample_reference(ref, good, tol)
        assert all(t.expected is not None and t.expected.device.type == "cpu" for t in sampled.tensors)
        assert compare_sampled(sampled, good) == compare_samples(ref, good, tol)
        assert compare_sampled(sample_reference(ref, bad, tol), bad) == compare_samples(ref, bad, tol)
    assert not compare_samples(ref, bad, strict).ok   # the scale (1e-3) tightens the tolerance
    pending = start_sample_reference(ref, good, strict)
    assert not pending.needs_device()
    spiked = ref.clone()
    spiked[0, 0] = float("inf")
    samples = take_samples(spiked.clone())
    pending = start_sample_reference(spiked, samples, strict)
    assert pending.needs_device()
    finished = pending.finish()
    assert finished.tensors[0].limits == strict.for_tensor(spiked, 0)   # the finite values' scale
    assert compare_sampled(finished, samples).ok


def test_a_pass_reports_the_element_nearest_its_tolerance():
    """Not the largest error but the largest share of its own allowance (atol + rtol * |ref|), in
    the all-finite path and the general one (a reference with an Inf), and across a container."""
    ref = torch.tensor([100.0, 1.0, 0.0, 2.0])
    out = ref + torch.tensor([0.5, 0.015, 0.001, 0.0])     # 0.5 of 1.01 allowed; 0.015 of 0.02: nearer
    tol = Tolerance(atol=0.01, rtol=0.01)
    finite = compare_outputs(ref, out, tol)
    assert finite.ok and finite.worst == pytest.approx((0.015, 0.02))
    with_inf = compare_outputs(torch.cat([ref, torch.tensor([math.inf])]), torch.cat([out, torch.tensor([math.inf])]),
                               tol)
    assert with_inf.ok and with_inf.worst == pytest.approx((0.015, 0.02))
    pair = compare_outputs((ref, torch.tensor([0.0])), (out, torch.tensor([0.0099])), tol)
    assert pair.ok and pair.worst == pytest.approx((0.0099, 0.01))
    assert compare_outputs(ref, out + 1, tol).worst == ()    # a failure has its own message instead
