"""A minimal Django project for tests/frameworks/test_django.py: one app (shop), one model (Order).

In the test process settings are configured from settings.py's values
(settings_for); a worker subprocess runs manage.py with
DJANGO_SETTINGS_MODULE=frameworks.djangoapp.settings and DJANGOAPP_DSN naming
the test's database.
"""
