"""The real control plane, and the one with the local kubelet as its Node, once per test session
(tests/support/controlplane.py)."""

from tests.support.controlplane import controlplane, node  # noqa: F401
