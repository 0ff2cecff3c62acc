"""Learning, replay and evaluation on Apache Spark, for trace sets past one machine.

The executors read the runs and evaluate the predicates; only sufficient statistics
(transition counts, replay tallies) come back to the driver, which then runs the same
code as the single-process engine. ``pyspark`` is an optional dependency (the ``spark``
extra): nothing outside this package imports it, and this package imports it only when
an entry point is called.
"""
from __future__ import annotations

from .evaluate import evaluate_spark
from .learn import count_transitions_spark, learn_bundle_spark, learn_model_spark
from .replay import replay_spark
from .session import spark_session

__all__ = ["evaluate_spark", "learn_model_spark", "learn_bundle_spark", "count_transitions_spark", "replay_spark", "spark_session"]
