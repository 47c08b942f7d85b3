"""A small application's tasks (tasks.py) and their tests (test_tasks.py), quoted by docs/howto/tasks.md."""
