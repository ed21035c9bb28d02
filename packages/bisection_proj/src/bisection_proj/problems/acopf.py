"""AC optimal power flow on a PYPOWER case (``[opf]`` extra), the paper's non-convex
power-systems problem.

θ = the active and reactive loads (Pd, Qd) of every bus in p.u., each sampled uniformly within ±``load_range``
of its nominal value. The partial variables are Pg of the non-slack generators and Vm at the generator buses.
`complete` solves the power flow by a batched Newton method: Va at the non-slack buses and Vm at the PQ buses,
then the slack Pg and every Qg. The inequalities are the generator P/Q limits and the bus voltage limits. Branch
flow limits are not enforced, as in the paper's data pipeline. y = (Pg, Qg, Vm, Va).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bisection_proj.problems.base import Problem
from icml25_shared.validate import check_float, check_int

__all__ = ["ACOPF"]


def _pypower() -> Any:
    """``pypower.api``, imported with its compile-time SyntaxWarnings (invalid escapes) silenced."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pypower.api as pp
            import pypower.idx_brch
            import pypower.idx_bus
            import pypower.idx_gen
            import pypower.makeYbus  # noqa: F401
    except ImportError as err:  # pragma: no cover - exercised only without the extra
        raise ImportError("ACOPF needs PYPOWER: pip install 'icml25-bisection-proj[opf]'") from err
    return pp


def _load_case(case: str | dict[str, Any]) -> dict[str, Any]:
    pp = _pypower()
    if isinstance(case, str):
        if not hasattr(pp, case):
            raise ValueError(f"case must name a PYPOWER case such as 'case30', got {case!r}")
        case = getattr(pp, case)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PYPOWER's index conversions use deprecated numpy idioms
        return pp.ext2int(case)


class ACOPF(Problem):
    """AC-OPF on a PYPOWER case with generator P/Q and bus voltage limits (no branch limits)."""

    # buffers (registered in __init__), declared for the type checker
    gen_bus: Tensor
    pv: Tensor
    pq: Tensor
    non_slack_gen: Tensor
    Ybus: Tensor
    pvpq: Tensor
    Pmin: Tensor
    Pmax: Tensor
    Qmin: Tensor
    Qmax: Tensor
    Vmin: Tensor
    Vmax: Tensor
    cost: Tensor
    theta_low: Tensor
    theta_high: Tensor

    def __init__(self, case: str | dict[str, Any] = "case30", load_range: float = 0.1, newton_iters: int = 20,
                 dtype: torch.dtype = torch.float64) -> None:  # fmt: skip
        super().__init__()
        _pypower()
        from pypower.idx_bus import BUS_TYPE, PD, QD, REF, VMAX, VMIN
        from pypower.idx_gen import GEN_BUS, PMAX, PMIN, QMAX, QMIN
        from pypower.makeYbus import makeYbus

        load_range = check_float("load_range", load_range, min=0.0, max=1.0, max_open=True)
        newton_iters = check_int("newton_iters", newton_iters, min=1)
        ppc = _load_case(case)
        self.ppc = ppc
        base = float(ppc["baseMVA"])
        bus, gen = ppc["bus"], ppc["gen"]
        n_bus = bus.shape[0]
        gen_bus = gen[:, GEN_BUS].astype(int)
        if len(set(gen_bus.tolist())) != len(gen_bus):
            raise ValueError("ACOPF supports one generator per bus; this case has several on one bus")
        ref = np.flatnonzero(bus[:, BUS_TYPE] == REF)
        if ref.size != 1:
            raise ValueError(f"ACOPF needs exactly one reference bus, got {ref.size}")
        slack = int(ref[0])
        slack_gen = int(np.flatnonzero(gen_bus == slack)[0])
        pv = np.array(sorted(set(gen_bus.tolist()) - {slack}), dtype=int)
        pq = np.array(sorted(set(range(n_bus)) - set(gen_bus.tolist())), dtype=int)
        non_slack_gen = np.array([g for g in range(len(gen_bus)) if g != slack_gen], dtype=int)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ybus, _, _ = makeYbus(base, bus, ppc["branch"])
        t = lambda a, dt=dtype: torch.as_tensor(np.asarray(a), dtype=dt)  # noqa: E731
        long = lambda a: torch.as_tensor(np.asarray(a), dtype=torch.long)  # noqa: E731
        cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
        self.register_buffer("Ybus", t(ybus.toarray(), cdtype))
        self.n_bus, self.n_gen = n_bus, len(gen_bus)
        self.base_mva, self.slack, self.slack_gen = base, slack, slack_gen
        for name, arr in (("gen_bus", gen_bus), ("pv", pv), ("pq", pq), ("non_slack_gen", non_slack_gen)):
            self.register_buffer(name, long(arr))
        self.register_buffer("pvpq", long(np.concatenate([pv, pq])))
        self.register_buffer("Pmin", t(gen[:, PMIN] / base))
        self.register_buffer("Pmax", t(gen[:, PMAX] / base))
        self.register_buffer("Qmin", t(gen[:, QMIN] / base))
        self.register_buffer("Qmax", t(gen[:, QMAX] / base))
        self.register_buffer("Vmin", t(bus[:, VMIN]))
        self.register_buffer("Vmax", t(bus[:, VMAX]))
        cost = ppc["gencost"]
        if not (cost[:, 0] == 2).all() or not (cost[:, 3] <= 3).all():
            raise ValueError("ACOPF supports polynomial generator costs of degree <= 2")
        coef = np.zeros((self.n_gen, 3))  # c2, c1, c0 in $/MW^k
        for g in range(self.n_gen):
            k = int(cost[g, 3])
            coef[g, 3 - k :] = cost[g, 4 : 4 + k]
        self.register_buffer("cost", t(coef))
        nominal = np.concatenate([bus[:, PD], bus[:, QD]]) / base
        lo, hi = nominal * (1 - load_range), nominal * (1 + load_range)
        self.register_buffer("theta_low", t(np.minimum(lo, hi)))
        self.register_buffer("theta_high", t(np.maximum(lo, hi)))
        self.newton_iters = int(newton_iters)
        self.theta_dim = 2 * n_bus
        self.z_dim = len(non_slack_gen) + self.n_gen
        self.y_dim = 2 * self.n_gen + 2 * n_bus
        self.n_eq = 2 * n_bus
        self.n_ineq = 4 * self.n_gen + 2 * n_bus

    # partial variables: (Pg of the non-slack generators, Vm at the generator buses) -----------------------------
    def _bounds(self) -> tuple[Tensor, Tensor]:
        lo = torch.cat([self.Pmin[self.non_slack_gen], self.Vmin[self.gen_bus]])
        hi = torch.cat([self.Pmax[self.non_slack_gen], self.Vmax[self.gen_bus]])
        return lo, hi

    def scale(self, theta: Tensor, z: Tensor) -> Tensor:
        lo, hi = self._bounds()
        return z * (hi - lo) + lo

    def unscale(self, theta: Tensor, x: Tensor) -> Tensor:
        lo, hi = self._bounds()
        return (x - lo) / (hi - lo)

    def split(self, y: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(Pg, Qg, Vm, Va) of a full y."""
        g, n = self.n_gen, self.n_bus
        return y[..., :g], y[..., g : 2 * g], y[..., 2 * g : 2 * g + n], y[..., 2 * g + n :]

    def partial(self, y: Tensor) -> Tensor:
        pg, _, vm, _ = self.split(y)
        return torch.cat([pg[..., self.non_slack_gen], vm[..., self.gen_bus]], dim=-1)

    def power_injection(self, vm: Tensor, va: Tensor) -> Tensor:
        """Complex bus injections S = V·conj(Ybus V) (B, n_bus)."""
        v = torch.polar(vm, va)
        return v * torch.conj(v @ self.Ybus.T)

    def complete(self, theta: Tensor, x: Tensor) -> Tensor:
        """Newton power flow from a flat start (differentiable through the unrolled iterations). Rows whose power
        flow does not converge get NaN, which counts as infeasible."""
        b = x.shape[0]
        n_ng = len(self.non_slack_gen)
        pg_ns, vm_gen = x[:, :n_ng], x[:, n_ng:]
        pd, qd = theta[:, : self.n_bus], theta[:, self.n_bus :]
        p_inj = -pd
        p_inj = p_inj.index_add(1, self.gen_bus[self.non_slack_gen], pg_ns)
        vm = x.new_ones(b, self.n_bus).index_copy(1, self.gen_bus, vm_gen)
        va = x.new_zeros(b, self.n_bus)
        pvpq, pq = self.pvpq, self.pq
        n1 = len(pvpq)
        for _ in range(self.newton_iters):
            s = self.power_injection(vm, va)
            f = torch.cat([s.real[:, pvpq] - p_inj[:, pvpq], s.imag[:, pq] + qd[:, pq]], dim=1)
            fd = f.detach()
            if float(torch.where(torch.isfinite(fd), fd.abs(), 0.0).amax()) < 1e-11:  # one host sync per iteration
                break
            jac = self._jacobian(vm, va)
            dx = torch.linalg.solve_ex(jac, f.unsqueeze(-1))[0].squeeze(-1)  # no error on a singular row
            va = va.index_add(1, pvpq, -dx[:, :n1])
            vm = vm.index_add(1, pq, -dx[:, n1:])
        s = self.power_injection(vm, va)
        f = torch.cat([s.real[:, pvpq] - p_inj[:, pvpq], s.imag[:, pq] + qd[:, pq]], dim=1)
        ok = (f.detach().abs().amax(-1) < 1e-6).unsqueeze(-1)
        pg = x.new_zeros(b, self.n_gen).index_copy(1, self.non_slack_gen, pg_ns)
        pg = pg.index_copy(1, torch.tensor([self.slack_gen], device=x.device),
                           (s.real[:, self.slack] + pd[:, self.slack]).unsqueeze(-1))  # fmt: skip
        qg = s.imag[:, self.gen_bus] + qd[:, self.gen_bus]
        y = torch.cat([pg, qg, vm, va], dim=-1)
        return torch.where(ok, y, torch.full_like(y, float("nan")))

    def _jacobian(self, vm: Tensor, va: Tensor) -> Tensor:
        v = torch.polar(vm, va)
        ibus = v @ self.Ybus.T
        vnorm = v / vm.to(v.dtype)
        y = self.Ybus.unsqueeze(0)
        ds_dvm = v.unsqueeze(-1) * torch.conj(y * vnorm.unsqueeze(1)) + torch.diag_embed(torch.conj(ibus) * vnorm)
        ds_dva = 1j * v.unsqueeze(-1) * torch.conj(torch.diag_embed(ibus) - y * v.unsqueeze(1))
        pvpq, pq = self.pvpq, self.pq
        j11 = ds_dva.real[:, pvpq][:, :, pvpq]
        j12 = ds_dvm.real[:, pvpq][:, :, pq]
        j21 = ds_dva.imag[:, pq][:, :, pvpq]
        j22 = ds_dvm.imag[:, pq][:, :, pq]
        return torch.cat([torch.cat([j11, j12], 2), torch.cat([j21, j22], 2)], 1)

    def eq_residual(self, theta: Tensor, y: Tensor) -> Tensor:
        """Power balance at every bus: S(V) − (Sg − Sd), real and imaginary parts (B, 2·n_bus)."""
        pg, qg, vm, va = self.split(y)
        s = self.power_injection(vm, va)
        sp = (-theta[:, : self.n_bus]).index_add(1, self.gen_bus, pg)
        sq = (-theta[:, self.n_bus :]).index_add(1, self.gen_bus, qg)
        return torch.cat([s.real - sp, s.imag - sq], dim=-1)

    def ineq_violation(self, theta: Tensor, y: Tensor) -> Tensor:
        return self.signed_ineq(theta, y).clamp_min(0)

    def objective(self, theta: Tensor, y: Tensor) -> Tensor:
        pg = self.split(y)[0] * self.base_mva
        c2, c1, c0 = self.cost.unbind(-1)
        return (c2 * pg**2 + c1 * pg + c0).sum(-1)

    def signed_ineq(self, theta: Tensor, y: Tensor) -> Tensor:
        """The inequalities g(y) <= 0 before clamping (B, n_ineq)."""
        pg, qg, vm, _ = self.split(y)
        return torch.cat([pg - self.Pmax, self.Pmin - pg, qg - self.Qmax, self.Qmin - qg, vm - self.Vmax,
                          self.Vmin - vm], dim=-1)  # fmt: skip

    def nominal_z(self) -> Tensor:
        """The case's own dispatch (Pg of the non-slack generators, generator voltage set-points), normalised."""
        from pypower.idx_gen import PG, VG

        gen = self.ppc["gen"]
        x = np.concatenate([gen[self.non_slack_gen.cpu().numpy(), PG] / self.base_mva, gen[:, VG]])
        x = torch.as_tensor(x, dtype=self.theta_low.dtype, device=self.theta_low.device).unsqueeze(0)
        return self.unscale(self.theta_low, x).clamp(0, 1)  # this problem's scale does not depend on θ

    def solve(self, theta: Tensor, **kw: Any) -> Tensor:
        """Locally optimal y* by SLSQP (scipy) over the normalised partial variables, through the Newton
        completion, from the case's own dispatch; one instance at a time. (PYPOWER's ``runopf`` does not run
        under numpy 2, so it is not used.)"""
        self.check_theta(theta)
        out = []
        z0 = self.nominal_z()[0].detach().cpu().double().numpy()
        for th in theta.detach().double():
            out.append(self._solve_one(th.unsqueeze(0).to(self.theta_low), z0, kw.get("maxiter", 200)))
        return torch.stack(out).to(dtype=theta.dtype, device=theta.device)

    def _solve_one(self, th1: Tensor, z0: np.ndarray, maxiter: int) -> Tensor:
        from scipy.optimize import minimize

        def fg(z: np.ndarray) -> tuple[Tensor, Tensor]:
            zt = torch.as_tensor(z, dtype=th1.dtype).unsqueeze(0).requires_grad_(True)
            return zt, self.z_to_y(th1, zt)

        def obj(z: np.ndarray) -> tuple[float, np.ndarray]:
            zt, y = fg(z)
            f = self.objective(th1, y).sum() / 1e3
            (g,) = torch.autograd.grad(f, zt)
            return float(f.detach()), g[0].double().numpy()

        def cons(z: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                _, y = fg(z)
                return -self.signed_ineq(th1, y)[0].double().numpy()

        def cons_jac(z: np.ndarray, h: float = 1e-7) -> np.ndarray:
            # forward differences, all d perturbations in one batched completion
            zz = torch.as_tensor(z, dtype=th1.dtype).unsqueeze(0)
            pts = torch.cat([zz, zz + h * torch.eye(self.z_dim, dtype=th1.dtype)])
            with torch.no_grad():
                g = -self.signed_ineq(th1, self.z_to_y(th1.expand(len(pts), -1), pts))
            return ((g[1:] - g[:1]) / h).T.double().numpy()

        res = minimize(obj, z0, jac=True, method="SLSQP", bounds=[(0.0, 1.0)] * self.z_dim,
                       constraints=[{"type": "ineq", "fun": cons, "jac": cons_jac}],
                       options={"maxiter": maxiter, "ftol": 1e-10})  # fmt: skip
        with torch.no_grad():
            return self.z_to_y(th1, torch.as_tensor(res.x, dtype=th1.dtype).unsqueeze(0))[0]

    def nominal_theta(self) -> Tensor:
        """The case's own loads."""
        return (0.5 * (self.theta_low + self.theta_high)).unsqueeze(0)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()
