"""The callbacks ``python -m infgrpo.fit`` attaches to a Lightning ``Trainer``: progress, interruption, completion
tables (its strategy and checkpoint IO: :mod:`infgrpo.trainer`)."""
