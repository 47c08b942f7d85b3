"""The chaos room: harnesses that run real workers against real servers while faults are injected, and
their tests.

Each harness is a program (a ``make`` target runs its full version) and a module whose short version a
test here runs:

- ``chaos``: worker processes killed, stopped and restarted, PostgreSQL restarted, under load (``make
  chaos``; test_chaos.py); its judging (``Judged``, ``Invariant``, the evidence queries) is the core the
  others build on;
- ``chaos_limits``: the same faults on limited queues and a 1-second schedule (``make chaos-limits``;
  test_chaos_limits.py);
- ``chaos_durable``: the same faults on durable jobs (steps with side effects counted outside the
  database, sleeps, signals), and zombies refused a step (``make chaos-durable``; test_chaos_durable.py,
  and chaos_durable_handlers.py for its handler);
- ``netns`` and ``delay_line``: test hosts made of network namespaces, with nftables faults and a delay
  line of TUN devices; ``chaos_net``: the network chaos run on them (``make chaos-net``; test_chaos_net.py);
- ``failover``: a primary, a streaming standby and a failover under load (``make chaos-failover``;
  test_failover.py, and test_failover_judging.py for its checks on hand-written logs);
- ``chaos_handlers``: the handler those workers run (``pgjobq worker chaos.chaos_handlers:run``) and the
  tables it writes.

The programs import ``chaos`` and ``helpers`` from tests/, so they run as modules from the repository's
root: ``PYTHONPATH=tests .venv/bin/python -m chaos.chaos --full``.  Their servers run the working tree's
SQL (helpers.working_tree), as every test's do.
"""
