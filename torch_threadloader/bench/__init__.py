"""The benchmark harness: ThreadLoader side by side with ``torch.utils.data.DataLoader``.

Run it with ``python -m torch_threadloader bench`` (or ``python -m benchmarks.run`` in a
checkout). :mod:`~torch_threadloader.bench.harness` times and interleaves,
:mod:`~torch_threadloader.bench.workloads` holds one module per workload,
:mod:`~torch_threadloader.bench.suite` runs them and :mod:`~torch_threadloader.bench.report`
writes JSON, markdown and the chart.

This package imports nothing on its own, so that a child process of the harness (the memory
probe) loads only the one workload it needs.
"""

__all__: list[str] = []
