"""The layers of docs/architecture.md, as a user meets them.

The import contracts themselves run in `make check` (lint-imports); these tests hold
what a user sees of them: the monitors are usable on their own, without the core.
"""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from forewarn.monitors import VIOL, BoundedResponse, Condition, reachable_product


def test_importing_the_monitors_loads_nothing_of_the_core(tmp_path: Path) -> None:
    code = ("import sys, forewarn.monitors\n"
            "print(sorted(m for m in sys.modules if m.startswith(('forewarn.guard', 'forewarn.server', "
            "'forewarn.domains', 'stormpy'))))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@dataclass
class PlainChain:
    """A chain that is not the core's LearnedDTMC: the product reads only these fields."""

    states: list[int]
    unsafe: np.ndarray
    initial: dict[int, int]
    matrix: sp.csr_matrix
    counts: sp.csr_matrix
    pseudo: sp.csr_matrix | None = None


def test_the_product_runs_on_any_chain_of_plain_arrays() -> None:
    # s0 = {trigger}, s1 = {response}, then end; s0 -> s0 | s1 by halves, s1 -> end.
    rows = [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]
    chain = PlainChain(states=[0b01, 0b10, -1], unsafe=np.zeros(3, dtype=bool), initial={0: 4},
                       matrix=sp.csr_matrix(rows), counts=sp.csr_matrix(np.array(rows) * 4))
    names = ["trigger", "response"]
    # within 0 steps: a trigger without its response is a violation on the spot
    monitor = BoundedResponse("m", Condition("trigger", names), Condition("response", names), 0)
    product = reachable_product(chain, [monitor])
    # (s0, viol), (s1, idle) and the one end
    assert product.base.tolist() == [0, 1]
    assert product.monitor_states[:, 0].tolist()[0] == VIOL
    assert product.unsafe.tolist() == [True, False, False]
    assert product.initial == {0: 4}
    dense = product.matrix.toarray()
    assert dense.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]  # viol and end absorb
