"""Example applications of pgjobq, each with the tests a user would write for it."""
