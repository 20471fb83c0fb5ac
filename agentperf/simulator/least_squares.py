"""A small bounded least-squares solver for the twin's fit (docs/simulator.md "Calibration:
the fit"): Levenberg–Marquardt on parameters scaled to the unit box, each step projected
back into it, a forward-difference Jacobian; deterministic (no random restarts, no threads
in the arithmetic), so the same residuals give the same solution on any machine. With the
linearised covariance ``σ² (JᵀJ)⁻¹`` and leave-one-out errors ``r_i ÷ (1 − h_ii)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class Solution:
    """Where the solver stopped: the scaled parameters, their residuals and Jacobian."""

    u: np.ndarray
    residuals: np.ndarray
    jacobian: np.ndarray
    evaluations: int
    iterations: int
    converged: bool


def solve(
    residuals: Callable[[np.ndarray], np.ndarray],
    u0: np.ndarray,
    *,
    max_evaluations: int,
    step: float,
    batch: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None,
    rows: np.ndarray | None = None,
) -> Solution:
    """Bounded Levenberg–Marquardt in the unit box, deterministic. ``batch`` evaluates the
    Jacobian's columns (side by side when it can); ``rows`` keeps only those residuals."""
    cache: dict[tuple[float, ...], np.ndarray] = {}
    evals = [0]

    def key(u: np.ndarray) -> tuple[float, ...]:
        return tuple(round(float(x), 12) for x in u)

    def many(us: list[np.ndarray]) -> list[np.ndarray]:
        todo = [u for u in us if key(u) not in cache]
        uniq: dict[tuple[float, ...], np.ndarray] = {key(u): u for u in todo}
        vals = batch(list(uniq.values())) if batch else [residuals(u) for u in uniq.values()]
        for k, v in zip(uniq, vals, strict=True):
            cache[k] = np.asarray(v, dtype=float)
            evals[0] += 1
        out = [cache[key(u)] for u in us]
        return [r if rows is None else r[rows] for r in out]

    def jac(u: np.ndarray, r: np.ndarray) -> np.ndarray:
        cols = []
        for j in range(len(u)):
            v = u.copy()
            h = step if u[j] + step <= 1.0 else -step
            v[j] = u[j] + h
            cols.append((v, h))
        vals = many([v for v, _ in cols])
        return np.column_stack([(val - r) / h for val, (_, h) in zip(vals, cols, strict=True)])

    u = np.clip(np.asarray(u0, dtype=float), 0.0, 1.0)
    (r,) = many([u])
    lam, it, converged = 1e-2, 0, False
    while True:
        J = jac(u, r)
        if converged or evals[0] >= max_evaluations:
            break
        it += 1
        A, g = J.T @ J, J.T @ r
        cost = float(r @ r)
        improved = False
        for _ in range(4):
            damp = lam * (np.diag(np.diag(A)) + 1e-6 * np.eye(len(u)))
            delta = np.linalg.lstsq(A + damp, -g, rcond=None)[0]
            cand = np.clip(u + delta, 0.0, 1.0)
            if np.max(np.abs(cand - u)) < 1e-4:
                converged = True
                break
            (rc,) = many([cand])
            if float(rc @ rc) < cost:
                improved = True
                gain = cost - float(rc @ rc)
                u, r = cand, rc
                lam = max(lam / 3.0, 1e-6)
                if gain < 1e-4 * cost or np.max(np.abs(delta)) < 2e-3:
                    converged = True
                break
            lam *= 4.0
            if evals[0] >= max_evaluations:
                break
        if not improved and evals[0] < max_evaluations:
            converged = True  # no damped step lowers the cost (the budget did not stop it)
    return Solution(u, r, J, evals[0], it, converged)


def covariance(J: np.ndarray, r: np.ndarray) -> np.ndarray | None:
    """The linearised covariance s² (JᵀJ)⁻¹, s² = Σ r² ÷ (m − n); None without spare points."""
    m, n = J.shape
    if m <= n:
        return None
    s2 = float(r @ r) / (m - n)
    return np.asarray(s2 * np.linalg.pinv(J.T @ J), dtype=float)


def condition_number(J: np.ndarray) -> float | None:
    """The ratio of the Jacobian's largest to smallest singular value (parameters scaled to
    their boxes): how unevenly the points pin the parameters; None for a rank-deficient J
    (a direction no point moves)."""
    s = np.linalg.svd(J, compute_uv=False)
    if len(s) == 0 or float(s[-1]) <= 1e-12 * max(1.0, float(s[0])):
        return None
    return float(s[0] / s[-1])


def loo_linearised(J: np.ndarray, r: np.ndarray) -> list[float | None]:
    """Each point's leave-one-out residual r_i ÷ (1 − h_ii), H = J (JᵀJ)⁻¹ Jᵀ (exact for a
    linear model); None where the point alone sets a parameter (h_ii = 1)."""
    H = J @ np.linalg.pinv(J.T @ J) @ J.T
    out: list[float | None] = []
    for i in range(len(r)):
        lev = float(H[i, i])
        out.append(None if lev > 1.0 - 1e-9 else float(r[i] / (1.0 - lev)))
    return out
