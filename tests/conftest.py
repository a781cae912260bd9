"""Shared fixtures: the shipped ``pe_store`` fixture plus a durable on-disk store; and a
watchdog (``hangs.Watchdog``, a process of its own) that ends a test running longer than
``PE_TEST_TIMEOUT`` seconds (default 900, 0 for none; the whole suite takes about 19 minutes in
CI; long runs outside CI set 0) instead of letting the run hang."""

from __future__ import annotations

import faulthandler
import os
import signal

import pytest

import pravega_embedded as pe
from hangs import Watchdog

pytest_plugins = ["pravega_embedded.testing"]
_WATCHDOG: list[Watchdog] = []


def _test_timeout() -> float:
    text = os.environ.get("PE_TEST_TIMEOUT", "900")
    try:
        return float(text)
    except ValueError:
        raise pytest.UsageError(f"PE_TEST_TIMEOUT must be a number of seconds, got {text!r}") from None


def pytest_configure(config: pytest.Config) -> None:
    # between conftest loading and the first test, pytest's capture is suspended: fd 2 is the
    # real stderr, where the watchdog and the stacks it asks for are written
    if _test_timeout() > 0 and not _WATCHDOG:
        err = os.dup(2)
        faulthandler.register(signal.SIGUSR1, file=err, all_threads=True)
        _WATCHDOG.append(Watchdog(err))


def pytest_unconfigure(config: pytest.Config) -> None:
    while _WATCHDOG:
        _WATCHDOG.pop().close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    for w in _WATCHDOG:
        w.start(item.nodeid, _test_timeout())
    try:
        return (yield)
    finally:
        for w in _WATCHDOG:
            w.stop()


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
