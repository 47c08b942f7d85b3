"""The shop app: orders, placed with their shipping job in one transaction, shipped by a handler."""
