"""The client's calls into the extension: the sans-I/O core (proto) and the sync calls on the
caller's connection (sync).

Layer: above the leaves (_errors, _job, _queries, _version); below aio, _worker and _cli.
"""
