"""Fixtures more than one test folder uses."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def S() -> Any:
    """The synthesizer package with its compiled extension (autoccl._synth); skips the test without it."""
    from autoccl import synth

    try:
        synth.ext()
    except ImportError as e:
        pytest.skip(str(e))
    return synth
