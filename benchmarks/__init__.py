"""The benchmarks of this repository: ``python -m benchmarks.run`` (or ``bash benchmarks/run.sh``
from a fresh clone). The harness itself is the installed ``torch_threadloader.bench``, so
``python -m torch_threadloader bench`` runs the same workloads where the package is installed."""
