"""Issue-28 audit cases (lostwork): see tests/_robustness_cases.py for Case, check and classify."""

from __future__ import annotations

from _robustness_cases import Case, Missing, Refused, Wrong, check  # noqa: F401

CASES = []
