"""What the tests share: fixtures, SQL helpers, worker handlers and process helpers.

- ``fixtures``: the pytest fixtures (a plugin loaded by tests/conftest.py);
- ``working_tree``: the working tree's extension, built from sql/src, in every server the tests start;
- ``sqlhelpers``: ``Db``, ``Connect`` and small helpers for tests that speak SQL;
- ``databases``: extra roles, databases and connections on the test server;
- ``processes``: the pgjobq CLI and workers as real processes;
- ``handlers`` and ``async_handlers``: the handlers those workers run (``helpers.handlers:NAME``);
- ``required``: the groups of tests that skip where the machine cannot run them, or fail where required;
- ``pythons``: the Python interpreters of this machine that pgjobq supports;
- ``fake_debian``: stand-ins for dpkg-query, apt-get, apt-cache and id (tests/install/test_ensure_deps.py).

The chaos harnesses and their tests are a room of their own: tests/chaos.
"""
