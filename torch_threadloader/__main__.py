"""``python -m torch_threadloader``: see :mod:`torch_threadloader.tools.cli`."""

import sys

from torch_threadloader.tools.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
