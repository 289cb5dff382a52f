"""Every bad input and fault of the issue-11 audit gets the right answer or a clear error.

The catalogue lives in ``tests/_robustness_cases.py`` so that
``benchmarks/studies/audit_robustness.py`` can run the very same cases against any
checkout (the before/after table in ``doc/robustness.md``).
"""

import pytest

from _robustness_cases import CASES, classify

ACCEPTED = {"ok", "standard", "clear"}

# Cases known to fail, each with the reason (none today). Strict: a fix must remove it here.
PENDING = set()


def _param(case):
    marks = [pytest.mark.xfail(strict=True, reason="fixed on branch deep-defaults")] \
        if case.name in PENDING else []
    return pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_bad_input_is_answered_or_refused_clearly(case):
    outcome, detail, _ = classify(case)
    if outcome == "skipped":
        pytest.skip(detail)
    assert outcome in ACCEPTED, f"{case.name}: {outcome}: {detail}"
