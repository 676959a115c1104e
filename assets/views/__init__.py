"""The ``views`` group: per view, ``realtime_<view>`` and ``corrected_<view>``, built by
:func:`build_view_assets` from the views in force
(:meth:`orchestration.control_plane.runtime.Runtime.views_in_force`, resolved when the code location
loads, :mod:`orchestration.definitions`). Nothing here reads files or the control store at import
time.

May import: ``assets`` helpers, ``orchestration.resources``, ``quality``, ``pipelines``.
"""

from assets.views.factory import build_view_assets

__all__ = ["build_view_assets"]
