"""One formula, two number types: the few array operations domain formulas use, for Python numbers
(``SCALAR``, the per-plan estimator) and for numpy arrays (``VECTOR``, the plan search).

A formula written against ``xp`` (``where``, ``maximum``, ``minimum``, ``ceil``, ``log2``, ``log``, ``sqrt``, ``logical_and``,
``logical_or``, ``logical_not`` and the arithmetic operators) runs unchanged on both, so the search and the estimator cannot drift apart.
"""

from __future__ import annotations

import math

import numpy as np


class _ScalarOps:
    @staticmethod
    def where(cond, a, b):
        return a if cond else b

    @staticmethod
    def logical_and(a, b):
        return bool(a) and bool(b)

    @staticmethod
    def logical_or(a, b):
        return bool(a) or bool(b)

    @staticmethod
    def logical_not(a):
        return not a

    maximum = staticmethod(max)
    minimum = staticmethod(min)
    ceil = staticmethod(math.ceil)
    log2 = staticmethod(math.log2)
    log = staticmethod(math.log)
    sqrt = staticmethod(math.sqrt)


SCALAR = _ScalarOps()
VECTOR = np
