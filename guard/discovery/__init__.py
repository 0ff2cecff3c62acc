"""Predicates found in the runs (``forewarn discover``): candidates from the data, chosen on held-out folds.

Import from the concept modules: :mod:`.columns` (the runs as columns), :mod:`.candidates`
(candidate predicates), :mod:`.scoring` (held-out scoring by counting), :mod:`.search`
(the greedy search with local splits), :mod:`.write` (the output spec) and
:mod:`.discover` (the whole pipeline, confirmed with the real learner).
"""
