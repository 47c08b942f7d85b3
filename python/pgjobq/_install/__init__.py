"""Which extension versions this package works with (check), and the plain-SQL and pg_tle install
scripts (plain).

Layer: above the leaves; below everything that talks to a database.
"""
