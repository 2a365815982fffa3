"""User tools apart from the engine: ``python -m torch_threadloader`` (``cli.py``: ``info``,
``bench``), ``info.py`` (the machine and settings report), ``tune/`` (``bench``: a user's
dataset under torch's DataLoader and ThreadLoader over a grid) and ``lightning.py``
(``LoaderStatsCallback``; imports Lightning itself, so nothing here is imported by
``import torch_threadloader``). ``torch_threadloader.tune`` and ``torch_threadloader.lightning``
stay the documented import paths."""
