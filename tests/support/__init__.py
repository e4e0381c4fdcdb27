"""Fixtures and helpers that several test packages share (import the fixtures from a conftest)."""
