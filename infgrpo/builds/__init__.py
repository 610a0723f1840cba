"""The commands that build the shipped tool models (``python -m infgrpo.builds.tools``, ``.stock_tools``).

They render, cut and parse tool exchanges with the agent room's own template, suffix rule and call formats, so what
a build teaches is what a run reads; being commands, they stand on the top floor with the other commands, where they
may import any room. The tiny default's build stays in :mod:`infgrpo.assets.build` (it needs nothing above it).
"""
