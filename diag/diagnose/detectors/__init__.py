"""Detectors: plain functions ``detect(features, cfg) -> list[Finding]``, chosen by name.

The registry is explicit (no registration by import side effect). Each detector receives the same
:class:`~diag.diagnose.features.Features` (frames computed once from a run store or a timing
table) and its own typed config; it returns findings with evidence, never raises on odd data
(too few steps or ranks -> no finding).
"""

from __future__ import annotations
