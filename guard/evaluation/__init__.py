"""Evaluation of a guard on logged runs: calibration, baselines, cross-validation, reports.

Import from the concept modules: :mod:`guard.evaluation.calibration`,
:mod:`guard.evaluation.baselines`, :mod:`guard.evaluation.folds`,
:mod:`guard.evaluation.evaluate`, :mod:`guard.evaluation.plots`,
:mod:`guard.evaluation.report` and :mod:`guard.evaluation.cli`. This package
re-exports nothing: :mod:`guard.replay` imports the calibration module, and the
modules here import :mod:`guard.replay`, so eager re-exports would be circular.
"""
