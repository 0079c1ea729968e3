"""Make the compiled autoccl._synth importable from a development build (AUTOCCL_LIB_DIR) and skip cleanly
when it is absent."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def S():
    from autoccl import synth

    try:
        synth.ext()
    except ImportError as e:
        pytest.skip(str(e))
    return synth
