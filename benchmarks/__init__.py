"""The benchmarks of this repository: ThreadLoader side by side with ``torch.utils.data.DataLoader``.

One command runs every suite, from the repository root: ``python -m benchmarks SUITE [ARGS]``
(``python -m benchmarks --list`` lists them; ``bash benchmarks/run.sh`` runs the harness from a
fresh clone). :mod:`~benchmarks.suites` names the suites, :mod:`~benchmarks.timing` is their one
timing loop, :mod:`~benchmarks.datasets` their shared datasets, and :mod:`~benchmarks.result` the
one result type they record, write as JSON and report as a table. The harness (``run``) is
:mod:`~benchmarks.harness`, :mod:`~benchmarks.workloads` (one module per workload),
:mod:`~benchmarks.suite` and :mod:`~benchmarks.report` (the published run's markdown and chart).

This package imports nothing on its own, so that a child process of a suite (the memory probe)
loads only what it needs. It is not installed with ``torch-threadloader``; its dependencies are
the ``bench`` extra.
"""

__all__: list[str] = []
