"""The real control plane, once per test session (tests/support/controlplane.py)."""

from tests.support.controlplane import controlplane  # noqa: F401
