"""The documentation's tests: every example of README.md, CONTRIBUTING.md and docs/ runs (runner.py, run by
test_examples.py, itself tested by test_runner.py); the Sphinx build passes with warnings as errors
(test_docs_build.py); the generated reference's rules hold (test_reference.py); README.md keeps its
shape (test_readme.py)."""
