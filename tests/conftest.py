"""Test-suite configuration: deterministic hypothesis runs, so CI cannot flake on a new draw."""

from hypothesis import settings

settings.register_profile("skdml", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("skdml")
