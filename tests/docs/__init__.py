"""The documentation's tests: every example of README.md, CONTRIBUTING.md and docs/ runs (runner.py), and
the Sphinx build passes with warnings as errors."""
