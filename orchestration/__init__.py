"""The control plane: what runs the data plane, watches it and scales it.

Two layers live here. The control-plane library has no Dagster in it: the job model, the
fleet supervisor (``fleet/``), lag and time lag (``lag.py``), autoscaling (``autoscaling/``),
the runtime that opens what a command needs, and the deployment settings. Above it sits the
Dagster code location: ``resources/`` (one module per external system), ``sensors/``,
``jobs.py``, ``schedules.py`` and ``definitions.py``, the only place that builds
``Definitions``; and ``cli/``, the ``sluice`` command, at the top.

May import: ``pipelines`` and ``quality``; ``assets`` only from ``definitions``, ``jobs``,
``schedules`` and ``sensors`` (import-linter contracts in ``pyproject.toml``).
"""
