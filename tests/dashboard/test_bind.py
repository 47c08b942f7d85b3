"""What serve() refuses before it listens: a non-loopback bind without authentication, half a login,
a database it cannot reach (no database needed)."""

from __future__ import annotations

import pytest

import pgjobq
from pgjobq.dashboard import serve


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "::", "dashboard.example"])
def test_serve_refuses_a_non_loopback_bind_without_authentication(host: str) -> None:
    with pytest.raises(pgjobq.ConfigurationError, match="not a loopback address, without authentication"):
        serve("dbname=unused", host, 8080, False, None, None, False)


def test_serve_refuses_a_user_without_a_password() -> None:
    with pytest.raises(pgjobq.ConfigurationError, match="user and password go together"):
        serve("dbname=unused", "127.0.0.1", 8080, False, "ops", None, False)


def test_serve_says_in_one_line_when_it_cannot_reach_the_database() -> None:
    with pytest.raises(pgjobq.Error, match=r"^the dashboard cannot reach its database: .*refused"):
        serve(
            "host=127.0.0.1 port=1 dbname=none connect_timeout=5", "127.0.0.1", 8080, False, None, None, False
        )
