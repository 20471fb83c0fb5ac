"""The top-k overlap rule of the distribution check (docs/verification.md
"quality_distribution"): KL over the reference's top-k plus one "other" bucket."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from agentperf.verification.quality import (
    compare_distributions,
    distribution_verdict,
    position_divergence,
    precision_class,
)


def lp(*probs: float) -> list[list]:
    return [[f"t{i}", math.log(p)] for i, p in enumerate(probs)]


def test_equal_distributions_diverge_by_zero_and_agree_on_top1():
    kl, same = position_divergence(lp(0.6, 0.3, 0.05), lp(0.6, 0.3, 0.05))
    assert kl == 0.0 and same


def test_a_reference_token_missing_from_the_deployments_top_k_gets_a_share_of_its_unseen_mass():
    reference = [["a", math.log(0.5)], ["b", math.log(0.4)]]
    candidate = [["a", math.log(0.5)], ["c", math.log(0.3)]]  # unseen mass 0.2, b missing
    kl, same = position_divergence(reference, candidate)
    # buckets: a 0.5|0.5, b 0.4|0.1 (half of 0.2), other 0.1|0.4
    expected = 0.4 * math.log(0.4 / 0.1) + 0.1 * math.log(0.1 / 0.4)
    assert math.isclose(kl, expected, rel_tol=1e-9) and same


def test_disjoint_top_k_lists_diverge_far_and_disagree():
    kl, same = position_divergence([["a", math.log(0.99)]], [["z", math.log(0.99)]])
    assert kl > 3 and not same


def _rule_buckets(reference, candidate):
    """The rule written out (docs/verification.md "quality_distribution"): the reference's
    top-k tokens, each reference token the candidate did not list sharing the candidate's
    unseen mass equally with the "other" bucket, and "other" on both sides."""
    p = {tok: math.exp(lp) for tok, lp in reversed(reference)}
    q_listed = {tok: math.exp(lp) for tok, lp in reversed(candidate)}
    missing = [t for t in p if t not in q_listed]
    unseen = 1.0 - sum(q_listed.values())
    q = {t: q_listed.get(t, unseen / (len(missing) + 1)) for t in p}
    return [(p[t], q[t]) for t in p] + [(1.0 - sum(p.values()), 1.0 - sum(q.values()))]


@given(
    st.lists(st.floats(0.001, 1.0), min_size=1, max_size=8),
    st.lists(st.floats(0.001, 1.0), min_size=1, max_size=8),
    st.integers(0, 8),
)
def test_the_divergence_is_the_kl_of_the_rules_buckets(ref_weights, cand_weights, overlap):
    def normalised(weights, prefix):
        total = sum(weights) * 1.25  # some mass outside the top-k
        return [[f"{prefix}{i}", math.log(w / total)] for i, w in enumerate(weights)]

    reference = normalised(ref_weights, "r")
    candidate = normalised(cand_weights, "c")
    for i in range(min(overlap, len(reference), len(candidate))):
        candidate[i][0] = reference[i][0]
    buckets = _rule_buckets(reference, candidate)
    # both sides are distributions, so Gibbs' inequality makes the KL non-negative by itself
    assert math.isclose(sum(pi for pi, _ in buckets), 1.0, abs_tol=1e-9)
    assert math.isclose(sum(qi for _, qi in buckets), 1.0, abs_tol=1e-9)
    expected = sum(pi * math.log(pi / qi) for pi, qi in buckets if pi > 1e-12)
    kl, _ = position_divergence(reference, candidate)
    assert math.isclose(kl, max(0.0, expected), rel_tol=1e-6, abs_tol=1e-9)


def test_unknown_precisions_are_held_to_the_strictest_limits():
    assert precision_class("gguf_q4_0") == "4bit" and precision_class("made-up") == "full"


def test_positions_without_logprobs_count_against_the_deployment():
    reference = {"distributions": {"texts": [{"id": "x", "positions": [lp(0.9)] * 10}]}}
    collected = {"texts": [{"id": "x", "positions": [lp(0.9)] * 8 + [None, None], "error": ""}]}
    compared = compare_distributions(collected, reference)
    assert compared["unscored_positions"] == 2 and compared["top1_agreement"] == 0.8
    status, summary, _ = distribution_verdict(compared, weight_precision="bf16")
    assert status == "fail" and "without log-probabilities" in summary
