"""The error family, under the name the documentation uses: every class is defined in
:mod:`forewarn.errors` (a leaf the monitors can import too) and is the same object here."""
from __future__ import annotations

from forewarn.errors import (
    CheckError,
    ConfigError,
    ForewarnError,
    ForewarnWarning,
    ModelFileError,
    MonitorError,
    PredicateError,
    SpecError,
    StateSpaceTooLargeError,
    ThresholdWarning,
    TraceError,
    UsageError,
)

__all__ = [
    "ForewarnError",
    "SpecError",
    "TraceError",
    "PredicateError",
    "ModelFileError",
    "CheckError",
    "ConfigError",
    "UsageError",
    "MonitorError",
    "StateSpaceTooLargeError",
    "ForewarnWarning",
    "ThresholdWarning",
]
