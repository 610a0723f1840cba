"""What ``python -m infgrpo.fit`` attaches to a Lightning ``Trainer``: progress, checkpoint I/O, completion tables."""
