"""The libfiu tools (Debian's fiu-utils): without them the io-fault tests skip with one reason;
with ``CI=true`` that is a failure instead, so CI cannot pass without injecting real I/O errors."""

from __future__ import annotations

import pytest
from pg_fixtures import require

from chaos.core.libfiu import missing as libfiu_missing


@pytest.fixture
def libfiu() -> None:
    require(libfiu_missing())
