"""The benchmarks of this repository: ThreadLoader side by side with ``torch.utils.data.DataLoader``.

Run them with ``python -m benchmarks.run`` from the repository root (or ``bash benchmarks/run.sh``
from a fresh clone). :mod:`~benchmarks.harness` times and interleaves, :mod:`~benchmarks.workloads`
holds one module per workload, :mod:`~benchmarks.suite` runs them and :mod:`~benchmarks.report`
writes JSON, markdown and the chart. The other modules are the profiling scripts that
``docs/performance.md`` cites.

This package imports nothing on its own, so that a child process of the harness (the memory
probe) loads only the one workload it needs. It is not installed with ``torch-threadloader``;
its dependencies are the ``bench`` extra.
"""

__all__: list[str] = []
