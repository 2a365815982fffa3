"""``python -m torch_threadloader``: see :mod:`torch_threadloader.cli`."""

import sys

from torch_threadloader.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
