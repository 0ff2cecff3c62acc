"""Evaluation of a guard on logged runs: baselines, cross-validation, tuning, reports.

Import from the concept modules: :mod:`forewarn.guard.evaluation.baselines`,
:mod:`forewarn.guard.evaluation.folds`, :mod:`forewarn.guard.evaluation.evaluate`,
:mod:`forewarn.guard.evaluation.plots`, :mod:`forewarn.guard.evaluation.report` and
:mod:`forewarn.guard.evaluation.cli`. They build on :mod:`forewarn.guard.replay` (which
builds on the core's :mod:`forewarn.guard.calibration`); nothing here is imported back by
replay. This package re-exports nothing, so importing one report module stays cheap.
"""
