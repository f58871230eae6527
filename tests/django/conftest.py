"""These tests run under Django's own test runner in a Python of their own (Django 6 needs
3.12): ``python -m tests.django.runtests``, which ``.ci/run`` calls. The project's pytest run
leaves them out."""

collect_ignore_glob = ["*.py"]
