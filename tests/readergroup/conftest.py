"""Fixtures for reader-group tests: a temporary store with a 4-segment stream iot/sensors."""

from __future__ import annotations

import pytest

import pravega_embedded as pe


@pytest.fixture
def store():
    with pe.open_temporary() as s:
        s.create_scope("iot")
        s.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)))
        yield s
