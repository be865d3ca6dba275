"""Incentive simulation: does cheating pay? Each strategy's return on stake over many epochs.

Run: .venv/bin/python bench/econ/simulate.py [--epochs 200] [--seeds 5] [--providers 500]

A network of providers (bench/econ/network.py: honest, lazy, misdeclaring, fraudulent, and a
misdeclaration that looks right in fp32, which the tensor-core challenge catches) goes
through `--epochs` epochs. What the challenge measures on each hardware is measured where
bench/results holds it (the CPU's, from bench/results/challenge.json; a GPU model's, from
bench/results/gpu.json once bench/gpu.py has run on one) and assumed otherwise
(bench/econ/measured.py); the output says which is which. Each epoch:
probes, a challenge and the job market (bench/econ/market.py) produce the oracle's inputs;
the project's own `oracle.scoring.score_epoch` scores them and orders slashes; the chain's
consequences are applied here — a slash takes its bps of the remaining stake, a jail sits
the provider out (no jobs, no rewards) until it serves its time and unjails at once, a
tombstone ends its earnings for good (the stake left is still its own to withdraw, so only
the slash counts as lost). Nobody unstakes, so loyalty only grows.

Return on stake = (rewards + job income − operating cost − slashed stake) ÷ initial stake,
summed over each strategy's providers. Written to bench/results/econ.json and plotted to
bench/results/econ.png (mean across seeds, min–max shaded).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.econ.market import run_jobs
from bench.econ.measured import ASSUMED, Throughputs, load_throughputs
from bench.econ.network import (
    DEFAULT_MIX,
    GOAL_STRATEGIES,
    HARDWARE_MIX,
    MISDECLARED,
    MISDECLARED_SUBTLE,
    STRATEGIES,
    WEI,
    Network,
    build_network,
)
from compute.reference import precisions, reference_gflops
from oracle.config import BPS, OracleConfig, load_config
from oracle.scoring import EpochInputs, EpochScores, score_epoch

RESULTS = REPO / "bench" / "results"
UTILIZATION = 0.6
MODELS = tuple(dict.fromkeys([*HARDWARE_MIX, *(m for pair in MISDECLARED + MISDECLARED_SUBTLE
                                                for m in pair)]))  # every hardware simulated


@dataclass(frozen=True)
class Params:
    epochs: int = 200
    providers: int = 500
    utilization: float = UTILIZATION
    mix: tuple[tuple[str, float], ...] = tuple(DEFAULT_MIX.items())


@dataclass
class Books:
    """SWARM per provider per epoch: rows are epochs."""

    rewards: np.ndarray
    income: np.ndarray
    cost: np.ndarray
    slashed: np.ndarray

    @classmethod
    def empty(cls, epochs: int, n: int) -> Books:
        return cls(*(np.zeros((epochs, n)) for _ in range(4)))

    def net(self) -> np.ndarray:
        return self.rewards + self.income - self.cost - self.slashed


@dataclass(frozen=True)
class Run:
    seed: int
    net: Network
    books: Books
    reward_sums: list[int]  # Σ reward_wei of each epoch, from score_epoch
    emissions: list[int]  # the epoch's emission_wei, from score_epoch
    slashes: dict[str, int]  # decisions per row

    def strategy_return(self, name: str) -> dict[str, float | list[float]]:
        """Cumulative return on stake per epoch and the components at the end, in %, for `name`."""
        mask = self.net.of(name)
        stake = sum(s for s, m in zip(self.net.initial_stake_wei, mask, strict=True) if m) / WEI
        pct = lambda a: 100 * a[:, mask].sum(axis=1) / stake
        return {"cumulative": np.cumsum(pct(self.books.net())).tolist(),
                "rewards": float(pct(self.books.rewards).sum()),
                "job_income": float(pct(self.books.income).sum()),
                "cost": float(pct(self.books.cost).sum()),
                "slashed": float(pct(self.books.slashed).sum()),
                "tombstoned": int((self.net.tombstoned & mask).sum()),
                "providers": int(mask.sum())}

    def hardware_returns(self, name: str) -> dict[str, float]:
        """Return on stake at the end, in %, of the providers following `name`, by real hardware."""
        total, out = self.books.net().sum(axis=0), {}
        for model in MODELS:
            mask = self.net.of(name) & np.array([r == model for r in self.net.real_model])
            if mask.any():
                stake = sum(s for s, m in zip(self.net.initial_stake_wei, mask, strict=True) if m) / WEI
                out[model] = float(100 * total[mask].sum() / stake)
        return out

    def pair_returns(self) -> dict[str, float]:
        """Return on stake at the end, in %, of each (real, declared) pair a provider misdeclares."""
        net, out = self.net, {}
        total = self.books.net().sum(axis=0)
        for real, declared in MISDECLARED + MISDECLARED_SUBTLE:
            mask = np.array([(r, d) == (real, declared) for r, d in zip(net.real_model, net.declared_model,
                                                                         strict=True)])
            if mask.any():
                stake = sum(s for s, m in zip(net.initial_stake_wei, mask, strict=True) if m) / WEI
                out[f"{real} as {declared}"] = float(100 * total[mask].sum() / stake)
        return out


def epoch_inputs(net: Network, t: int, online: np.ndarray, jobs, utilization: float,
                 rng: np.random.Generator, probes: int) -> EpochInputs:
    """What the oracle measures this epoch: probes, a challenge, and the jobs' outcomes."""
    n = net.n
    probe_provider = np.repeat(np.arange(n, dtype=np.int32), probes)
    probe_ok = rng.random(n * probes) < online[probe_provider]
    challenged = ~net.tombstoned & (rng.random(n) < online)  # an offline node gets no challenge
    # As oracle/epoch.py judges a GPU: the weaker of its fp32 and tensor-core ratios, as fp32
    # GFLOPS of the declared model.
    references = {m: reference_gflops(m) for m in set(net.declared_model)}
    judged = net.judged_ratio(rng) * np.array([references[m] for m in net.declared_model])
    measured = np.where(challenged, judged, np.nan)
    serving = ~net.tombstoned & (net.jailed_until < t)
    faked_challenge = challenged & serving & (rng.random(n) < net.traits("fake_challenge_p"))
    return EpochInputs(
        providers=net.addresses,
        stake_wei=list(net.stake_wei),
        declared_model=net.declared_model,
        probe_provider=probe_provider,
        probe_ok=probe_ok,
        measured_gflops=measured,
        challenge_ok=~faked_challenge,
        job_successes=net.successes + jobs.completed,
        job_failures=net.failures + jobs.abandoned + jobs.caught,
        abandoned=jobs.abandoned,
        replication_mismatch=jobs.caught > 0,
        epochs_staked=net.epochs_staked,
        jailed=~serving,
        utilization=utilization,
        previous_performance=net.performance,
    )


def apply_epoch(net: Network, t: int, inputs: EpochInputs, scores: EpochScores, books: Books,
                epoch_length_s: float) -> None:
    """The chain's consequences: slashes, jail (unjailed as soon as served), tombstones."""
    books.rewards[t] = np.array(scores.reward_wei, dtype=np.float64) / WEI
    for s in scores.slashes:
        i = s.provider_index
        cut = net.stake_wei[i] * s.bps // BPS
        net.stake_wei[i] -= cut
        books.slashed[t, i] = cut / WEI
        if s.tombstone:
            net.tombstoned[i] = True
        elif s.jail_seconds:
            net.jailed_until[i] = t + -(-s.jail_seconds // epoch_length_s)
    net.successes, net.failures = inputs.job_successes, inputs.job_failures
    net.epochs_staked = net.epochs_staked + ~net.tombstoned
    net.performance, net.reliability = scores.performance, scores.reliability


def simulate(params: Params, seed: int, config: OracleConfig,
             throughput: Throughputs | None = None) -> Run:
    """One run of `params.epochs` epochs from `seed`, the hardware measuring `throughput` on the
    challenge (by default: bench/results where it holds a measurement, else assumed)."""
    rng = np.random.default_rng(seed)
    net = build_network(params.providers, dict(params.mix), rng, throughput or load_throughputs(MODELS))
    timing = config.epoch.timing()
    probes = int(timing.length_s // timing.probe_interval_s)
    books = Books.empty(params.epochs, net.n)
    reward_sums, emissions = [], []
    slashes: dict[str, int] = {}
    lo, hi = _online_range(net)
    for t in range(params.epochs):
        online = np.where(net.tombstoned, 0.0, rng.uniform(lo, hi))
        serving = ~net.tombstoned & (net.jailed_until < t)
        jobs = run_jobs(net, online, serving, params.utilization, rng)
        inputs = epoch_inputs(net, t, online, jobs, params.utilization, rng, probes)
        scores = score_epoch(inputs, config, epoch_length_s=timing.length_s)
        books.income[t], books.cost[t] = jobs.income, jobs.cost
        apply_epoch(net, t, inputs, scores, books, timing.length_s)
        reward_sums.append(sum(scores.reward_wei))
        emissions.append(scores.emission_wei)
        for s in scores.slashes:
            slashes[s.row] = slashes.get(s.row, 0) + 1
    return Run(seed, net, books, reward_sums, emissions, slashes)


def _online_range(net: Network) -> tuple[np.ndarray, np.ndarray]:
    ranges = [s.online for s in STRATEGIES]
    return (np.array([ranges[k][0] for k in net.strategy]), np.array([ranges[k][1] for k in net.strategy]))


def summarize(runs: list[Run], params: Params) -> dict:
    """Per strategy: final return on stake (mean, min, max over seeds), components, and the curve."""
    names = [name for name, share in params.mix if share > 0]
    strategies: dict[str, dict[str, Any]] = {}
    for name in names:
        per_seed = [run.strategy_return(name) for run in runs]
        curves = np.array([r["cumulative"] for r in per_seed])
        finals = curves[:, -1]
        strategies[name] = {
            "return_pct": {
                "mean": float(finals.mean()),
                "min": float(finals.min()),
                "max": float(finals.max()),
                "per_seed": finals.tolist(),
            },
            **{
                key: float(np.mean([r[key] for r in per_seed]))
                for key in ("rewards", "job_income", "cost", "slashed")
            },
            "tombstoned": float(np.mean([r["tombstoned"] for r in per_seed])),
            "providers": per_seed[0]["providers"],
            "curve": {
                "mean": curves.mean(axis=0).round(4).tolist(),
                "min": curves.min(axis=0).round(4).tolist(),
                "max": curves.max(axis=0).round(4).tolist(),
            },
        }
    honest = strategies["honest"]["return_pct"]["mean"]
    goals = {f"{name} < honest": strategies[name]["return_pct"]["mean"] < honest
             for name in GOAL_STRATEGIES if name != "honest" and name in strategies}
    for name in ("fraudulent", "misdeclaring", "misdeclaring (fp32-alike)"):
        if name in strategies:
            goals[f"{name} < 0"] = strategies[name]["return_pct"]["max"] < 0
    pairs: dict[str, list[float]] = {}
    for run in runs:
        for pair, value in run.pair_returns().items():
            pairs.setdefault(pair, []).append(value)
    hardware: dict[str, list[float]] = {}
    for run in runs:
        for model, value in run.hardware_returns("honest").items():
            hardware.setdefault(model, []).append(value)
    throughput = runs[0].net.throughput
    return {"throughput": throughput.as_dict(), "strategies": strategies, "goals": goals,
            "honest_by_hardware": {
                model: {"mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v)),
                        "measured": all(throughput.of(model, p).measured for p in precisions(model))}
                for model, v in hardware.items()},
            "misdeclared_pairs": {pair: {"mean": float(np.mean(v)), "max": float(np.max(v))}
                                  for pair, v in pairs.items()},
            "rewards_sum_to_emission": all(r.reward_sums == r.emissions for r in runs),
            "slashes_per_run": {row: float(np.mean([r.slashes.get(row, 0) for r in runs]))
                                for row in ("fraud", "misrepresentation", "abandonment", "downtime")}}


def throughput_table(summary: dict) -> str:
    """A markdown table of what the challenge measures on each simulated hardware ÷ its
    reference: each measured figure on a row of its own, the assumed ones together."""
    lines = ["| hardware | precision | challenge ÷ reference | source |", "|---|---|---:|---|"]
    assumed: dict[str, list[str]] = {}
    for model, by_precision in summary["throughput"]["models"].items():
        for precision, t in by_precision.items():
            if t["measured"]:
                low, high = (r / t["reference_gflops"] for r in (min(t["runs"]), max(t["runs"])))
                spread = f" ({low:.2f}–{high:.2f})" if len(t["runs"]) > 1 else ""
                lines.append(f"| {model} | {precision} | {t['ratio']:.2f}{spread} | {t['source']} |")
            else:
                assumed.setdefault(model, []).append(precision)
    if assumed:
        asked = ", ".join(sorted({p for ps in assumed.values() for p in ps}))
        lines.append(f"| {', '.join(assumed)} | {asked} | 1.00 | {ASSUMED} |")
    files = summary["throughput"]["files"]
    lines += ["", *(f"- `bench/results/{name}`: {said}" for name, said in files.items())]
    return "\n".join(lines)


def table(summary: dict) -> str:
    """A markdown table of each strategy's return on stake and where it came from."""
    lines = [("| strategy | return on stake, mean (min – max) | rewards | job income | operating cost "
              "| slashed | tombstoned |"),
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, s in summary["strategies"].items():
        r = s["return_pct"]
        lines.append(f"| {name} | **{r['mean']:+.1f} %** ({r['min']:+.1f} – {r['max']:+.1f}) "
                     f"| {s['rewards']:+.1f} % | {s['job_income']:+.1f} % | {-s['cost'] + 0.0:+.1f} % "
                     f"| {-s['slashed'] + 0.0:+.1f} % | {s['tombstoned']:.1f} of {s['providers']} |")
    lines += ["", "| misdeclared GPU | return on stake, mean (max) |", "|---|---:|"]
    lines += [
        f"| {pair} | **{r['mean']:+.1f} %** ({r['max']:+.1f}) |"
        for pair, r in summary["misdeclared_pairs"].items()
    ]
    lines += ["", "| honest, by hardware | challenge figures | return on stake, mean (min – max) |",
              "|---|---|---:|"]
    lines += [
        f"| {model} | {'measured' if r['measured'] else 'assumed'} "
        f"| **{r['mean']:+.1f} %** ({r['min']:+.1f} – {r['max']:+.1f}) |"
        for model, r in summary["honest_by_hardware"].items()
    ]
    return "\n".join(lines)


def plot(summary: dict, path: Path, epochs: int) -> None:
    """Cumulative return on stake per strategy: mean across seeds, min–max shaded."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=120)
    x = np.arange(1, epochs + 1)
    colors = {"honest": "tab:green", "lazy": "tab:orange", "misdeclaring": "tab:purple",
              "fraudulent": "tab:red", "misdeclaring (fp32-alike)": "tab:gray"}
    for name, s in summary["strategies"].items():
        c = s["curve"]
        style = "--" if name == "misdeclaring (fp32-alike)" else "-"
        ax.plot(
            x, c["mean"], style, color=colors.get(name), label=f"{name} ({s['return_pct']['mean']:+.1f} %)"
        )
        ax.fill_between(x, c["min"], c["max"], color=colors.get(name), alpha=0.2, linewidth=0)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("epoch (1 h)")
    ax.set_ylabel("cumulative return on stake (%)")
    models = summary["throughput"]["models"]
    all_measured = [m for m, by in models.items() if all(t["measured"] for t in by.values())]
    said = {"measured": all_measured, "assumed": [m for m in models if m not in all_measured]}
    ax.set_title("Return on stake by strategy, shipped oracle/config.toml\nchallenge figures measured: "
                 f"{', '.join(said['measured']) or 'none'}; assumed: {', '.join(said['assumed']) or 'none'}",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=5, help="runs, from seeds 1..N")
    parser.add_argument("--providers", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1, help="the first seed")
    parser.add_argument("--config", type=Path, help="an oracle config TOML (default: the packaged one)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where econ.json and econ.png go")
    args = parser.parse_args(argv)
    if min(args.epochs, args.seeds, args.providers) < 1:
        parser.error("--epochs, --seeds and --providers must be at least 1")
    config = load_config(args.config)
    params = Params(epochs=args.epochs, providers=args.providers)
    started = time.perf_counter()
    runs = [simulate(params, seed, config) for seed in range(args.seed, args.seed + args.seeds)]
    seconds = time.perf_counter() - started
    summary = summarize(runs, params)
    args.out.mkdir(parents=True, exist_ok=True)
    plot(summary, args.out / "econ.png", args.epochs)
    figures = {"epochs": args.epochs, "seeds": list(range(args.seed, args.seed + args.seeds)),
               "providers": runs[0].net.n, "utilization": params.utilization,
               "emission_per_epoch_wei": str(runs[0].emissions[0]),
               "config": str(args.config or "oracle/config.toml"), "seconds": round(seconds, 2), **summary}
    (args.out / "econ.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(throughput_table(summary), end="\n\n")
    print(table(summary))
    print(f"\ngoals: {summary['goals']}; rewards sum to the emission every epoch: "
          f"{summary['rewards_sum_to_emission']}; {args.seeds} × {args.epochs} epochs in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
