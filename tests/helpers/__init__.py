"""What the tests share: fixtures, SQL helpers, worker handlers, process helpers and the chaos harness.

- ``fixtures``: the pytest fixtures (a plugin loaded by tests/conftest.py);
- ``sqlhelpers``: ``Db``, ``Connect`` and small helpers for tests that speak SQL;
- ``databases``: extra roles, databases and connections on the test server;
- ``processes``: the pgjobq CLI and workers as real processes;
- ``handlers`` and ``chaos_handlers``: the handlers those workers run
  (``helpers.handlers:NAME``, ``helpers.chaos_handlers:run``);
- ``chaos``: the chaos run, a program (``make chaos``) and the module tests/worker/test_chaos.py uses;
- ``netns`` and ``delay_line``: test hosts made of network namespaces, with nftables faults and a delay
  line of TUN devices; ``chaos_net``: the network chaos run on them (``make chaos-net``,
  tests/worker/test_chaos_net.py);
- ``failover``: a primary, a streaming standby and a failover under load (``make chaos-failover``,
  tests/worker/test_failover.py).
"""
