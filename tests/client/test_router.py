"""pgjobq.QueueRouter: which server holds a queue, decided without a database (placements, a default,
rendezvous hashing), and the configuration it refuses.  tests/worker/test_router_servers.py runs it
over three real servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from pgjobq import ConfigurationError, JobAddress, QueueRouter

THREE = {"pg1": "host=pg1 dbname=app", "pg2": "host=pg2 dbname=app", "pg3": "host=pg3 dbname=app"}
NAMES = [f"queue_{i}" for i in range(3000)]


def test_a_placed_queue_goes_to_its_server_and_the_others_to_the_hash() -> None:
    router = QueueRouter(THREE, {"emails": "pg1", "reports": "pg3"})

    assert router.server("emails") == "pg1"
    assert router.conninfo("emails") == "host=pg1 dbname=app"
    assert router.server("reports") == "pg3"
    assert {router.server(name) for name in NAMES} == {"pg1", "pg2", "pg3"}
    assert router.placements == {"emails": "pg1", "reports": "pg3"}
    assert router.default is None


def test_with_a_default_every_queue_not_placed_goes_there() -> None:
    router = QueueRouter(THREE, {"emails": "pg2"}, default="pg1")

    assert router.server("emails") == "pg2"
    assert {router.server(name) for name in NAMES} == {"pg1"}


def test_the_hash_gives_these_queues_these_servers_in_every_release() -> None:
    # Producers and workers of different versions must agree, and an upgrade must not move a queue
    # (its jobs would stay behind): these assignments may never change.
    router = QueueRouter(THREE)

    assigned = {name: router.server(name) for name in ("default", "emails", "sms", "billing", "thumbnails")}

    assert assigned == {
        "default": "pg3",
        "emails": "pg2",
        "sms": "pg2",
        "billing": "pg3",
        "thumbnails": "pg1",
    }


def test_another_process_with_another_hash_seed_places_every_queue_alike() -> None:
    script = (
        "import json, sys; from pgjobq import QueueRouter; "
        "router = QueueRouter(json.loads(sys.argv[1])); "
        "print(json.dumps([router.server(n) for n in json.loads(sys.argv[2])]))"
    )
    names = NAMES[:500]
    env = {**os.environ, "PYTHONHASHSEED": "12345"}

    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(THREE), json.dumps(names)],
        capture_output=True, text=True, check=True, env=env, timeout=60,
    )  # fmt: skip

    router = QueueRouter(THREE)
    assert json.loads(result.stdout) == [router.server(name) for name in names]


def test_the_hash_spreads_queues_over_the_servers() -> None:
    router = QueueRouter(THREE)

    shares = Counter(router.server(name) for name in NAMES)

    assert set(shares) == set(THREE)
    assert all(0.25 < count / len(NAMES) < 0.42 for count in shares.values()), shares


def test_adding_a_server_moves_only_the_queues_it_wins_and_no_placed_one() -> None:
    before = QueueRouter(THREE, {"emails": "pg1"})
    after = QueueRouter({**THREE, "pg4": "host=pg4 dbname=app"}, {"emails": "pg1"})

    moved = before.moves(after, ["emails", *NAMES])

    assert all(new == "pg4" for _, new in moved.values())
    assert moved == {
        name: (before.server(name), "pg4") for name in NAMES if after.server(name) != before.server(name)
    }
    assert "emails" not in moved
    assert 0.15 < len(moved) / len(NAMES) < 0.35  # about a quarter: its share of four
    assert after.server("emails") == "pg1"


def test_removing_a_server_moves_only_its_own_queues() -> None:
    before = QueueRouter(THREE)
    after = QueueRouter({name: conninfo for name, conninfo in THREE.items() if name != "pg2"})

    moved = before.moves(after, NAMES)

    assert moved
    assert all(old == "pg2" for old, _ in moved.values())
    assert set(moved) == {name for name in NAMES if before.server(name) == "pg2"}


def test_queues_of_one_server_share_its_conninfo() -> None:
    router = QueueRouter(THREE, {"emails": "pg2", "sms": "pg2", "reports": "pg3"})

    assert router.server_for(["emails", "sms", "emails"]) == "pg2"
    assert router.conninfo_for(["emails", "sms"]) == "host=pg2 dbname=app"
    assert router.server_for("reports") == "pg3"


def test_queues_on_several_servers_are_refused_for_one_worker_naming_each_one() -> None:
    router = QueueRouter(THREE, {"emails": "pg1", "sms": "pg1", "reports": "pg3"})

    with pytest.raises(ConfigurationError) as refused:
        router.conninfo_for(["emails", "reports", "sms"])

    message = str(refused.value)
    assert "queues span servers (emails, sms on pg1; reports on pg3)" in message
    assert "by_server" in message
    with pytest.raises(ConfigurationError, match="at least one queue"):
        router.server_for([])


def test_by_server_groups_queues_in_the_servers_order() -> None:
    router = QueueRouter(THREE, {"a": "pg3", "b": "pg1", "c": "pg3", "d": "pg1"})

    assert router.by_server(["a", "b", "c", "a", "d"]) == {"pg1": ["b", "d"], "pg3": ["a", "c"]}
    assert router.by_server([]) == {}


def test_a_job_is_found_by_its_queue_and_id() -> None:
    router = QueueRouter(THREE, {"emails": "pg2"})

    assert router.locate(JobAddress("emails", 7)) == "host=pg2 dbname=app"
    assert router.locate(("emails", 7)) == "host=pg2 dbname=app"
    for bad in (0, -1, True, "7"):
        with pytest.raises(ConfigurationError, match="job id must be a positive integer"):
            router.locate(("emails", bad))  # type: ignore[arg-type]


def test_servers_are_listed_in_order_and_read_only() -> None:
    router = QueueRouter(THREE)

    assert list(router.servers.items()) == list(THREE.items())
    with pytest.raises(TypeError):
        router.servers["pg4"] = "host=pg4"  # type: ignore[index]


def test_repr_names_servers_never_their_conninfo() -> None:
    router = QueueRouter({"main": "host=db password=hunter2"}, {"emails": "main"}, default="main")

    assert repr(router) == "QueueRouter(servers=['main'], placements={'emails': 'main'}, default='main')"


BAD_QUEUE = "must be 1 to 58 characters of a-z, 0-9 and _"


@pytest.mark.parametrize(
    ("servers", "placements", "default", "message"),
    [
        ({}, None, None, "servers must name at least one server, got none"),
        ([("pg1", "host=a")], None, None, "servers must map server names to conninfo strings"),
        ({"": "host=a"}, None, None, "server names must be 1 to 63 characters"),
        ({"pg 1": "host=a"}, None, None, "server names must be 1 to 63 characters"),
        ({"pg1": ""}, None, None, "the conninfo of server 'pg1' must be a non-empty string"),
        ({"pg1": 5}, None, None, "the conninfo of server 'pg1' must be a non-empty string"),
        ({"pg1": "host=a password"}, None, None, "the conninfo of server 'pg1' is not valid"),
        (
            {"pg1": "host=a dbname=x", "pg2": "postgresql://a/x"},
            None, None, "servers 'pg1' and 'pg2' have the same conninfo",
        ),
        (THREE, {"emails": "pg9"}, None, "the placement of queue 'emails' names unknown server 'pg9'"),
        (THREE, {"Emails": "pg1"}, None, f"placed queue names {BAD_QUEUE}, got 'Emails'"),
        (THREE, None, "pg9", "default names unknown server 'pg9' (servers: pg1, pg2, pg3)"),
    ],
)  # fmt: skip
def test_bad_configuration_is_refused_by_name(
    servers: object, placements: object, default: str | None, message: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        QueueRouter(servers, placements, default=default)  # type: ignore[arg-type]

    assert message in str(refused.value)
    assert "password" not in str(refused.value)


@pytest.mark.parametrize("queue", ["", "Emails", "a-b", "a" * 59, "emails\n", "é", None, 5])
def test_a_bad_queue_name_is_refused_as_the_extension_refuses_it(queue: object) -> None:
    router = QueueRouter(THREE)

    with pytest.raises(ConfigurationError, match=f"queue {BAD_QUEUE}"):
        router.server(queue)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=BAD_QUEUE):
        router.conninfo_for(["emails", queue])  # type: ignore[list-item]
