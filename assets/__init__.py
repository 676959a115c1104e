"""Dagster assets and their checks, one package per group: ``raw`` (the topic and its archive),
``views`` (realtime and corrected per view), ``reports``.

Files stay thin: a decorator and a call into ``pipelines/`` or ``quality/``, counts returned
as metadata; ``orchestration.definitions`` loads each package with its group name from
:mod:`assets.constants`.

May import: ``pipelines``, ``quality``, ``orchestration.resources`` and the control-plane
library below it (never ``orchestration.cli``, ``sensors``, ``jobs`` or ``definitions``).
"""
