"""The real control plane with the local kubelet as its Node, in a network namespace, once per test session
(tests/support/controlplane.py). The session's plain control plane, `controlplane`, is tests/conftest.py's: one
per worker for this directory and tests/e2e/ alike."""

from tests.support.controlplane import node  # noqa: F401
