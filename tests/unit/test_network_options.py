"""The parameters a worker adds to its connections (pgjobq._worker.connections.network_options), without a
database: what makes a silent network noticed within network_timeout, and a multi-host conninfo pick the
primary."""

from __future__ import annotations

import pytest

from pgjobq import WorkerSettings
from pgjobq._worker.connections import network_options


def test_the_default_ten_seconds_give_keepalives_a_user_timeout_and_a_connect_timeout() -> None:
    options = network_options("host=db.example port=5432", WorkerSettings())

    assert options == {
        "connect_timeout": "10",
        "keepalives": "1",
        "keepalives_idle": "3",
        "keepalives_interval": "2",
        "keepalives_count": "3",
        "tcp_user_timeout": "10000",
        "target_session_attrs": "read-write",
    }


@pytest.mark.parametrize("seconds", [2, 2.5, 7, 10, 45, 3600])
def test_keepalive_probing_ends_within_the_network_timeout(seconds: float) -> None:
    options = network_options("", WorkerSettings(network_timeout=seconds))

    idle, interval, count = (
        int(options[k]) for k in ("keepalives_idle", "keepalives_interval", "keepalives_count")
    )
    assert idle >= 1 and interval >= 1
    # the probes alone give a silent peer up in time (libpq takes whole seconds, 1 at least)
    assert idle + interval * count <= max(seconds, 4)
    assert int(options["tcp_user_timeout"]) == int(seconds * 1000)


def test_what_the_conninfo_sets_is_left_to_it() -> None:
    conninfo = "host=a,b port=5432,5433 keepalives_idle=30 tcp_user_timeout=0 target_session_attrs=any"

    options = network_options(conninfo, WorkerSettings())

    assert "keepalives_idle" not in options
    assert "tcp_user_timeout" not in options
    assert "target_session_attrs" not in options
    assert options["keepalives_count"] == "3"


def test_a_uri_conninfo_is_read_too() -> None:
    options = network_options("postgresql://u@a,b/jobs?connect_timeout=4&keepalives=0", WorkerSettings())

    assert "connect_timeout" not in options and "keepalives" not in options
    assert options["target_session_attrs"] == "read-write"


def test_the_environment_variables_of_libpq_win_where_they_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "3")
    monkeypatch.setenv("PGTARGETSESSIONATTRS", "prefer-standby")

    options = network_options("host=a", WorkerSettings())

    assert "connect_timeout" not in options and "target_session_attrs" not in options
    assert options["tcp_user_timeout"] == "10000"
