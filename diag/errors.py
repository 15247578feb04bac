"""The diag error family. The CLI turns any :class:`DiagError` into one line and a non-zero exit."""

from __future__ import annotations


class DiagError(Exception):
    """Base of every error diag reports to a user as one line."""


class ConfigError(DiagError, ValueError):
    """A configuration value, file or flag is wrong."""


class SchemaError(DiagError, ValueError):
    """An event, batch or record does not follow the event schema."""


class CollectorUnavailable(DiagError):
    """A collector's data source is absent on this machine (no NVML library, no GPU)."""


class TransportError(DiagError):
    """A peer (daemon, analyzer) cannot be reached or answered badly."""


class InputError(DiagError):
    """A file given to diag is missing, truncated, corrupt or not what it should be."""


class NotReady(DiagError):
    """A request that needs something not there yet (e.g. a profile window before any step)."""


class Cancelled(DiagError):
    """Work given up on request (a live triage pass when the analyzer closes)."""
