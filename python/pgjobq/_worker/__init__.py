"""The workers: Worker (sync) and AsyncWorker (aio); the core both drive (steps: every round trip to the
database, as steps that yield calls, and the jobs in hand); and the policy both share (settings, in_hand,
leases, acks, listen, upkeep, backoff, signals, connections, observe, observing).

Layer: above _client, _install, _tracing and aio; below _cli and the package root.
"""
