"""Helpers shared by the test folders: paths, tolerances, the micro suite, trainer builders.

``tests/support`` is on ``sys.path`` (``pythonpath`` in pyproject.toml) and pytest runs in
``importlib`` mode, so no test folder is put on ``sys.path``: the folders can carry the names of
the packages they test (``tests/algorithms``) without shadowing them.
"""
