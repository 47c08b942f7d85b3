"""Loads the shared fixtures (tests/helpers/fixtures.py) for every test folder."""

pytest_plugins = ["helpers.fixtures"]
