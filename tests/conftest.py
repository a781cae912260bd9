"""Shared fixtures: the shipped ``pe_store`` fixture plus a durable on-disk store; and a
watchdog (``hangs.Watchdog``) that ends a test running longer than ``PE_TEST_TIMEOUT`` seconds
(default 900; every test takes well under a minute) instead of letting CI hang."""

from __future__ import annotations

import os

import pytest

import pravega_embedded as pe
from hangs import Watchdog

pytest_plugins = ["pravega_embedded.testing"]
_WATCHDOG: list[Watchdog] = []


def pytest_configure(config: pytest.Config) -> None:
    # between conftest loading and the first test, pytest's capture is suspended: fd 2 is the
    # real stderr, where the watchdog writes (a test's own stderr is captured)
    limit = float(os.environ.get("PE_TEST_TIMEOUT", "900"))
    if limit > 0:
        _WATCHDOG.append(Watchdog(os.dup(2), limit))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    for w in _WATCHDOG:
        w.start(item.nodeid)
    try:
        return (yield)
    finally:
        for w in _WATCHDOG:
            w.cancel()


@pytest.fixture
def store_path(tmp_path):
    return tmp_path / "store"


@pytest.fixture
def durable_store(store_path):
    """A store with the default durability (real fdatasync) in a test directory."""
    store = pe.open(store_path)
    try:
        yield store
    finally:
        store.close()
