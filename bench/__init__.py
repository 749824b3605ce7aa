"""The benchmarks: scripts that start real processes and print figures (docs/performance.md).

Each script runs from the repository's root (``.venv/bin/python bench/mail/lone_mail.py
--help``); ``bench/suite.py`` runs the ones docs/performance.md's table is made of. The rooms
are by concern, so that a figure's script is found by its folder and name.
"""
