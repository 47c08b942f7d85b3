"""The benchmark's report: report.md and PNG plots from results.json.

Every figure is computed from the measurements in results.json; nothing is
hard-coded.  Figures are medians over the repeats with the min-max range;
ratios are paired per repeat (contenders of one repeat ran minutes apart, so
drift of the machine cancels) and then summarised the same way.

    .venv/bin/python bench/report.py bench/results/latest   # re-render from results.json
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from workloads import IDEAL_PER_WORKER, Results  # noqa: E402

__all__ = ["write_report"]

TIMES = "\u00d7"  # the multiplication sign of ratios
DASH = "\u2013"  # the en dash of ranges

OURS = ("article", "article_bulk", "sql_ceiling", "sql_ceiling_one_trip", "pgjobq_sql", "pgjobq_worker")
WORKER = "pgjobq_worker"

# The throughput ratios listed at every worker count: (label, numerator, denominator, batch of both).
PAIRS = (
    ("Worker b1 / article b1", WORKER, "article", 1),
    ("Worker b50 / SQL ceiling b50", WORKER, "sql_ceiling", 50),
    ("Worker b50 / one-trip SQL ceiling b50", WORKER, "sql_ceiling_one_trip", 50),
    ("pgjobq SQL b50 / SQL ceiling b50", "pgjobq_sql", "sql_ceiling", 50),
    ("Worker b50 / article bulk-done b50", WORKER, "article_bulk", 50),
)


# -- small statistics -------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """Median of some repeats with their min and max."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread | None:
        data = list(values)
        if not data:
            return None
        return cls(statistics.median(data), min(data), max(data), len(data))

    def show(self, fmt: Callable[[float], str], unit: str = "") -> str:
        if self.n == 1 or self.low == self.high:
            return f"{fmt(self.median)}{unit}"
        return f"{fmt(self.median)}{unit} ({fmt(self.low)}{DASH}{fmt(self.high)})"


def shown(values: Iterable[float], fmt: Callable[[float], str], empty: str = "\u2014") -> str:
    """The median and range of values, or empty when there are none."""
    spread = Spread.of(values)
    return spread.show(fmt) if spread else empty


def median_bounds(values: Sequence[float], confidence: float = 0.9) -> tuple[float, float, float]:
    """A distribution-free interval for the median of values, and its coverage: the k-th lowest and
    k-th highest value, k the largest whose coverage 1 - 2 P(Binomial(n, 1/2) < k) is at least
    confidence (k = 1, the min and max, when none is: with 3 values that covers 75%)."""
    data, n = sorted(values), len(values)

    def coverage(k: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2.0**n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= confidence:
        k += 1
    return data[k - 1], data[n - k], coverage(k)


def rate(value: float) -> str:
    return f"{value:,.0f}"


def ratio(value: float) -> str:
    return f"{value:.2f}{TIMES}"


def small_ratio(value: float) -> str:
    """A ratio that may be far below 1 (the limits workload's): two significant digits below 0.1."""
    return ratio(value) if value >= 0.1 else f"{value:.2g}{TIMES}"


def ms(value: float) -> str:
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def quantile(data: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of data, linear between closest ranks."""
    ordered = sorted(data)
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# -- reading the results ----------------------------------------------------------------


class View:
    """Indexes over results.json for the report."""

    def __init__(self, results: Results) -> None:
        self.r = results
        self.labels: dict[str, str] = results.meta.get("labels", {})
        # (contender, workers, batch) -> repeat -> record
        self.tp: dict[tuple[str, int, int], dict[int, dict[str, Any]]] = defaultdict(dict)
        for rec in results.throughput:
            if not rec.get("error"):
                self.tp[(rec["contender"], rec["workers"], rec["batch"])][rec["repeat"]] = rec
        self.wk: dict[tuple[str, int], dict[int, dict[str, Any]]] = defaultdict(dict)
        for rec in results.work:
            if not rec.get("error"):
                self.wk[(rec["contender"], rec["workers"])][rec["repeat"]] = rec
        self.contenders = [
            c for c in self.labels if any(k[0] == c for k in self.tp) or any(k[0] == c for k in self.wk)
        ]
        self.workers = sorted({k[1] for k in self.tp})
        self.batches = sorted({k[2] for k in self.tp})

    def label(self, name: str) -> str:
        return self.labels.get(name, name)

    def find(self, prefix: str) -> str | None:
        """The contender whose name starts with prefix (the external ones name themselves)."""
        return next((c for c in self.contenders if c.startswith(prefix)), None)

    def rates(self, contender: str, workers: int, batch: int) -> dict[int, float]:
        return {rep: rec["rate"] for rep, rec in self.tp.get((contender, workers, batch), {}).items()}

    def best_rates(self, contender: str, workers: int) -> dict[int, float]:
        """Per repeat, the contender's best rate over the batch sizes it ran."""
        best: dict[int, float] = {}
        for (name, count, _batch), by_repeat in self.tp.items():
            if name == contender and count == workers:
                for rep, rec in by_repeat.items():
                    best[rep] = max(best.get(rep, 0.0), rec["rate"])
        return best

    def ratio(self, a: str, b: str, workers: int, batch: int) -> Spread | None:
        """a's rate / b's, paired per repeat, at these workers and batch."""
        return paired(self.rates(a, workers, batch), self.rates(b, workers, batch))

    def capped(self, contender: str, workers: int, batch: int) -> bool:
        return any(rec["capped"] for rec in self.tp.get((contender, workers, batch), {}).values())


def paired(a: dict[int, float], b: dict[int, float]) -> Spread | None:
    """a / b per repeat, over the repeats both have."""
    return Spread.of(ratios(a, b))


def ratios(a: dict[int, float], b: dict[int, float]) -> list[float]:
    """a / b per repeat, over the repeats both have, in the order of the repeats."""
    return [a[rep] / b[rep] for rep in sorted(set(a) & set(b)) if b[rep] > 0]


# -- targets ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One of the benchmark's targets against what was measured."""

    target: str
    measured: Spread | None
    bound: float
    at_least: bool  # True: measured >= bound; False: measured <= bound
    fmt: Callable[[float], str]
    note: str = ""

    def status(self) -> str:
        if self.measured is None:
            return "not measured" + (f" ({self.note})" if self.note else "")
        value = self.measured.median
        if (value >= self.bound) if self.at_least else (value <= self.bound):
            return "**met**"
        if self.at_least:
            more = f" (needs {self.bound / value:.2f}{TIMES} more)" if value > 0 else ""
            return f"**missed** by {(1 - value / self.bound) * 100:.0f}%{more}"
        over = value / self.bound
        return f"**missed**: {over:.2f}{TIMES} the limit ({(over - 1) * 100:.0f}% over)"

    def row(self) -> list[str]:
        measured = self.measured.show(self.fmt) if self.measured else "—"
        bound = ("≥ " if self.at_least else "≤ ") + self.fmt(self.bound)
        return [self.target, measured, bound, self.status()]


def latency_quantiles(results: Results, mode: str, q: float) -> Spread | None:
    return Spread.of(
        quantile(rec["samples_ms"], q) for rec in results.latency if rec["mode"] == mode and rec["samples_ms"]
    )


def enqueue_rates(results: Results, variant: str) -> dict[int, float]:
    return {rec["repeat"]: rec["rate"] for rec in results.enqueue if rec["variant"] == variant}


def version_rates(results: Results, path: str, role: str) -> dict[int, float]:
    """Per repeat, the rate of one path of the version comparison on one version ("current"/"previous")."""
    return {
        run["repeat"]: run["rate"]
        for run in results.versions.get("runs", [])
        if run["path"] == path and run["role"] == role and not run.get("error")
    }


def compared_paths(results: Results) -> list[dict[str, Any]]:
    """The paths of the version comparison that both versions ran."""
    return [path for path in results.versions.get("paths", []) if not path.get("missing")]


def claim_medians(results: Results, state: str, key: str = "times_ms") -> dict[int, float]:
    """Per repeat, the median of the claims after the first (the first is reported on its own)."""
    return {
        rec["repeat"]: statistics.median(rec[key][1:] or rec[key])
        for rec in results.claim_cost
        if rec["state"] == state
    }


def claim_firsts(results: Results, state: str, key: str = "times_ms") -> dict[int, float]:
    return {rec["repeat"]: rec[key][0] for rec in results.claim_cost if rec["state"] == state}


def soak_ratios(soak: dict[str, Any]) -> list[float]:
    """Per run with the snapshot held (held_runs; before it, the record itself), its last `compare`
    seconds' jobs/s over its first's."""
    ratios = []
    for run in soak.get("held_runs") or [soak]:
        rates = soak_rates({**run, "compare": soak["compare"]})
        if rates and rates[0] > 0:
            ratios.append(rates[1] / rates[0])
    return ratios


def soak_rates(soak: dict[str, Any]) -> tuple[float, float] | None:
    """Jobs/s over the soak's first and last `compare` seconds (interpolated between samples)."""
    samples = soak.get("samples") or []
    if len(samples) < 2:
        return None
    end = float(soak["seconds"])
    span = min(float(soak["compare"]), end / 2)
    if span <= 0:
        return None

    def processed_at(t: float) -> float:
        for before, after in itertools.pairwise(samples):
            if before["t"] <= t <= after["t"]:
                width = after["t"] - before["t"]
                share = (t - before["t"]) / width if width > 0 else 1.0
                return float(before["processed"] + (after["processed"] - before["processed"]) * share)
        return float(samples[-1]["processed"] if t >= samples[-1]["t"] else samples[0]["processed"])

    first = processed_at(span) / span
    last = (processed_at(end) - processed_at(end - span)) / span
    return first, last


def limit_runs(results: Results, variant: str, cell: tuple[int, int]) -> dict[int, dict[str, Any]]:
    """Per repeat, the run of one queue of the limits workload in one cell (clients, batch), errors
    left out."""
    return {
        run["repeat"]: run
        for run in results.limits.get("runs", [])
        if run["variant"] == variant and (run["clients"], run["batch"]) == cell and not run.get("error")
    }


def limit_rates(results: Results, variant: str, cell: tuple[int, int], key: str = "rate") -> dict[int, float]:
    return {rep: float(run[key]) for rep, run in limit_runs(results, variant, cell).items()}


def limit_cells(results: Results) -> list[tuple[int, int]]:
    """The (clients, batch) cells of the limits workload, in the order they ran."""
    return list(dict.fromkeys((run["clients"], run["batch"]) for run in results.limits.get("runs", [])))


NODE_PGJOBQ = "pgjobq_cli"
NODE_PEERS = ("graphile_worker", "pg_boss")
NODE_LABELS = {
    "pgjobq_cli": "pgjobq worker (CLI)",
    "graphile_worker": "Graphile Worker",
    "pg_boss": "pg-boss",
}
NODE_BOUND = 1.2  # pgjobq's drain / the best of the Node peers', at every cell


def node_rates(results: Results, kind: str, peer: str, **cell: int) -> dict[int, float]:
    """Per repeat, the rate of one peer in one cell of the node workload ("drain" or "enqueue")."""
    return {
        rec["repeat"]: rec["rate"]
        for rec in results.node.get(kind, [])
        if rec["peer"] == peer and not rec.get("error") and all(rec.get(k) == v for k, v in cell.items())
    }


def node_best_peer(results: Results, kind: str, **cell: int) -> dict[int, float]:
    """Per repeat, the best rate of Graphile Worker and pg-boss in the cell (repeats where both ran)."""
    rates = [node_rates(results, kind, peer, **cell) for peer in NODE_PEERS]
    common = set.intersection(*(set(r) for r in rates)) if rates else set()
    return {rep: max(r[rep] for r in rates) for rep in common}


def node_cells(results: Results) -> list[tuple[int, int]]:
    """The (workers, batch) cells the node workload ran, or its scale's when it was skipped."""
    cells = sorted({(rec["workers"], rec["batch"]) for rec in results.node.get("drain", [])})
    if cells:
        return cells
    scale = results.meta.get("scale", {})
    return [(w, b) for w in scale.get("node_workers", (1, 4)) for b in scale.get("node_batches", (1, 50))]


def node_latency(results: Results, peer: str, q: float) -> Spread | None:
    return Spread.of(
        quantile(rec["samples_ms"], q)
        for rec in results.node.get("latency", [])
        if rec["peer"] == peer and rec.get("samples_ms")
    )


def scheduled_quantiles(results: Results, q: float) -> Spread | None:
    return Spread.of(quantile(rec["samples_ms"], q) for rec in results.scheduled if rec["samples_ms"])


# the single-row enqueue's targets: (label, pgjobq's variant, the article's variant)
ENQUEUE_PAIRS = (
    ("no consumer", "pgjobq_no_waiter", "article_insert"),
    ("an idle consumer running (pgjobq Worker / the article's worker loop)", "pgjobq_idle_worker",
     "article_insert_worker"),
)  # fmt: skip


def checks(view: View) -> list[Check]:
    r = view.r
    mode_note = " (quick: scaled down)" if r.meta.get("mode") == "quick" else ""
    found: list[Check] = []
    four = 4 if 4 in view.workers else (max(view.workers) if view.workers else 4)
    for label, baseline, batch, bound in (
        ("the article's queue (per-job done)", "article", 1, 1.5),
        ("the article's bulk-done variant", "article_bulk", 50, 1.0),
        ("the one-trip SQL ceiling", "sql_ceiling_one_trip", 50, 0.9),
    ):
        found.append(
            Check(
                f"Worker, {four} processes, batch {batch} / {label}, batch {batch}",
                view.ratio(WORKER, baseline, four, batch),
                bound,
                True,
                ratio,
                note=f"{baseline} not measured",
            )
        )
    for prefix, bound in (("pgmq", 1.2), ("pgqueuer", 2.0)):
        other = view.find(prefix)
        for count in view.workers or [1, 4, 8]:
            spread = paired(view.best_rates(WORKER, count), view.best_rates(other, count)) if other else None
            found.append(
                Check(
                    f"Worker / {view.label(other) if other else prefix}, best batch each, {count} "
                    f"worker{'s' if count > 1 else ''}",
                    spread,
                    bound,
                    True,
                    ratio,
                    note=f"{prefix} not measured",
                )
            )
    if "node" in r.meta.get("workloads", []) or r.node:
        skipped = r.node.get("skipped")
        for workers, batch in node_cells(r):
            found.append(
                Check(
                    f"Drain, `pgjobq worker` / the best of Graphile Worker and pg-boss, {workers} "
                    f"process{'es' if workers > 1 else ''}, batch {batch}{mode_note}",
                    paired(
                        node_rates(r, "drain", NODE_PGJOBQ, workers=workers, batch=batch),
                        node_best_peer(r, "drain", workers=workers, batch=batch),
                    ),
                    NODE_BOUND,
                    True,
                    ratio,
                    note=f"SKIPPED: {skipped}" if skipped else "a peer failed: see the Node.js peers section",
                )
            )
    for label, ours, theirs in ENQUEUE_PAIRS:
        found.append(
            Check(
                f"Single-row enqueue, 4 clients, jobq.enqueue / the article's INSERT, {label}",
                paired(enqueue_rates(r, ours), enqueue_rates(r, theirs)),
                0.85,
                True,
                ratio,
            )
        )
    bulk = Spread.of(enqueue_rates(r, "bulk_python").values())
    jobs = next((rec["jobs"] for rec in r.enqueue if rec["variant"] == "bulk_python"), 100_000)
    found.append(
        Check(f"Bulk enqueue, one pgjobq.enqueue_many of {jobs:,} jobs (jobs/s){mode_note}", bulk, 150_000.0,
              True, rate)
    )  # fmt: skip
    found.append(
        Check(
            "Bulk enqueue, pgjobq.enqueue_many / one multi-row INSERT of the same rows into the article's "
            "table",
            paired(enqueue_rates(r, "bulk_python"), enqueue_rates(r, "bulk_article")),
            0.9,
            True,
            ratio,
        )
    )
    found.append(Check("Latency with NOTIFY, p50 (ms)", latency_quantiles(r, "notify", 0.5), 1.0, False, ms))
    found.append(Check("Latency with NOTIFY, p99 (ms)", latency_quantiles(r, "notify", 0.99), 5.0, False, ms))
    ahead = next((rec["ahead"] for rec in r.scheduled), 1.0)
    found.append(
        Check(
            f"Scheduled job (run_at {ahead:g} s ahead): handler start \u2212 run_at, p99 (ms)",
            scheduled_quantiles(r, 0.99),
            50.0,
            False,
            ms,
        )
    )
    eight = max(view.r.meta.get("scale", {}).get("work_workers", [8]))
    work = {
        rep: rec["rate"] / (eight * IDEAL_PER_WORKER) * 100
        for rep, rec in view.wk.get((WORKER, eight), {}).items()
    }
    found.append(
        Check(
            f"5 ms of work, {eight} workers, Worker: % of ideal",
            Spread.of(work.values()),
            90.0,
            True,
            lambda v: f"{v:.0f}%",
        )
    )
    found.append(
        Check(
            f"Soak, snapshot held: throughput in the last {r.soak.get('compare', 60):g} s / the first"
            f"{mode_note}",
            Spread.of(soak_ratios(r.soak)) if r.soak else None,
            0.95,
            True,
            ratio,
        )
    )
    states = sorted(
        {rec["state"] for rec in r.claim_cost if rec["state"].startswith("finished_")},
        key=lambda s: int(s.split("_")[1]),
    )
    if states:
        biggest = states[-1]
        rows = int(biggest.split("_")[1])
        found.append(
            Check(
                f"Claim cost with {rows:,} finished rows / empty table (median time){mode_note}",
                paired(claim_medians(r, biggest), claim_medians(r, "empty")),
                1.2,
                False,
                ratio,
            )
        )
    else:
        found.append(Check("Claim cost with 1,000,000 finished rows / empty", None, 1.2, False, ratio))
    return found


# -- ratios side by side ---------------------------------------------------------------


def ratio_rows(view: View) -> list[list[str]]:
    r = view.r
    rows: list[list[str]] = []

    def add(name: str, spread: Spread | None, fmt: Callable[[float], str] = ratio) -> None:
        if spread is not None:
            rows.append([name, spread.show(fmt), str(spread.n)])

    for label, a, b, batch in PAIRS:
        for count in view.workers:
            add(f"{label}, {count}w", view.ratio(a, b, count, batch))
    for other in view.contenders:
        if other in OURS:
            continue
        for count in view.workers:
            add(
                f"Worker / {view.label(other)} (best batch each), {count}w",
                paired(view.best_rates(WORKER, count), view.best_rates(other, count)),
            )
    for label, ours, theirs in ENQUEUE_PAIRS:
        add(
            f"enqueue: jobq.enqueue / article INSERT, {label}",
            paired(enqueue_rates(r, ours), enqueue_rates(r, theirs)),
        )
    add(
        "enqueue: jobq.enqueue with an idle Worker / with none",
        paired(enqueue_rates(r, "pgjobq_idle_worker"), enqueue_rates(r, "pgjobq_no_waiter")),
    )
    add(
        "enqueue: article INSERT with its worker loop / with none",
        paired(enqueue_rates(r, "article_insert_worker"), enqueue_rates(r, "article_insert")),
    )
    add(
        "bulk: pgjobq.enqueue_many / article multi-row INSERT",
        paired(enqueue_rates(r, "bulk_python"), enqueue_rates(r, "bulk_article")),
    )
    for state in sorted({rec["state"] for rec in r.claim_cost} - {"empty"}):
        add(
            f"claim time: {state} / empty (median claim)",
            paired(claim_medians(r, state), claim_medians(r, "empty")),
        )
        add(
            f"claim time: {state} / empty (first claim)",
            paired(claim_firsts(r, state), claim_firsts(r, "empty")),
        )
    if r.soak:
        add("soak: last / first, snapshot held", Spread.of(soak_ratios(r.soak)))
    for path in compared_paths(r):
        add(
            f"versions: {path['label']}, {r.versions['current']} / {r.versions['previous']}",
            paired(version_rates(r, path["name"], "current"), version_rates(r, path["name"], "previous")),
        )
    for cell in limit_cells(r):
        plain = limit_rates(r, "plain", cell)
        for variant in r.limits.get("variants", []):
            if variant["name"] != "plain" and limit_runs(r, variant["name"], cell):
                add(
                    f"limits: {variant['label']} / plain queue, {cell[0]} clients b{cell[1]}",
                    paired(limit_rates(r, variant["name"], cell), plain),
                    small_ratio,
                )
    for rec in r.rate_limit[:1]:
        add(
            f"rate limit: Workers' jobs/s / rate_limit {rec['rate_limit']}/s",
            Spread.of(run["rate"] / run["rate_limit"] for run in r.rate_limit if not run.get("error")),
        )
    return rows


# -- plots -------------------------------------------------------------------------------


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files only, no display), imported when first needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> bool:
    """Write the figure to path as PNG and free it."""
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return True


def plot_throughput(view: View, path: Path) -> bool:
    import matplotlib

    plt = _pyplot()
    if not view.tp:
        return False
    batches = view.batches
    palette = matplotlib.colormaps["tab20" if len(view.contenders) > 10 else "tab10"]
    colors = {name: palette(i % palette.N) for i, name in enumerate(view.contenders)}
    markers = {name: "osD^v<>ph*"[i % 10] for i, name in enumerate(view.contenders)}
    fig, axes = plt.subplots(1, len(batches), figsize=(5 * len(batches), 4.6), sharey=True, squeeze=False)
    for ax, batch in zip(axes[0], batches, strict=False):
        for name in view.contenders:
            xs, ys, lows, highs = [], [], [], []
            for count in view.workers:
                spread = Spread.of(view.rates(name, count, batch).values())
                if spread is not None:
                    xs.append(count)
                    ys.append(spread.median)
                    lows.append(spread.median - spread.low)
                    highs.append(spread.high - spread.median)
            if xs:
                style = "-" if name in OURS else "--"
                ax.errorbar(
                    xs,
                    ys,
                    yerr=[lows, highs],
                    marker=markers[name],
                    color=colors[name],
                    linestyle=style,
                    capsize=3,
                    label=view.label(name),
                    linewidth=2.2 if name == WORKER else 1.3,
                )
        ax.set_title(f"batch {batch}")
        ax.set_xlabel("worker processes")
        ax.set_xticks(view.workers)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel(f"jobs/s (zero work; median, min{DASH}max bars)")
    by_label: dict[str, Any] = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=False):
            by_label.setdefault(label, handle)
    labels = [view.label(name) for name in view.contenders if view.label(name) in by_label]
    handles = [by_label[label] for label in labels]
    fig.legend(handles, labels, loc="lower center", ncol=min(5, len(labels)), fontsize=8, frameon=False)
    meta = view.r.meta
    fig.suptitle(
        f"Throughput, {meta.get('scale', {}).get('jobs', '?'):,} jobs, {meta.get('cpus')} CPUs "
        f"({meta.get('mode')} run, {meta.get('started', '')[:10]})"
    )
    fig.tight_layout(rect=(0, 0.1 + 0.03 * ((len(labels) - 1) // 5), 1, 1))
    return _save(fig, path)


def plot_latency(results: Results, path: Path) -> bool:
    if not results.latency:
        return False
    fig, ax = _pyplot().subplots(figsize=(7, 4.2))
    for mode, label in (("notify", "LISTEN/NOTIFY"), ("poll", "polling only")):
        samples = sorted(s for rec in results.latency if rec["mode"] == mode for s in rec["samples_ms"])
        if samples:
            ys = [(i + 1) / len(samples) for i in range(len(samples))]
            ax.plot([max(s, 1e-3) for s in samples], ys, label=f"{label} ({len(samples)} jobs)")
    late = sorted(s for rec in results.scheduled for s in rec["samples_ms"])
    if late:
        ys = [(i + 1) / len(late) for i in range(len(late))]
        ax.plot(
            [max(s, 1e-3) for s in late],
            ys,
            label=f"scheduled: run_at \u2192 handler start ({len(late)} jobs)",
        )
    ax.set_xscale("log")
    ax.set_xlabel("enqueue commit (scheduled: run_at) → handler start (ms, log scale)")
    ax.set_ylabel("share of jobs (CDF)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title("Latency on an idle pgjobq Worker")
    fig.tight_layout()
    return _save(fig, path)


def _soak_runs(soak: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The soak's runs with their labels: those with a snapshot held (held_runs, the last of them the
    record itself; one before there were repeats), and the second, with none, where there is one."""
    held = soak.get("held_runs") or [soak]
    runs = [
        (f"snapshot held, repeat {index + 1} of {len(held)}" if len(held) > 1 else "snapshot held", run)
        for index, run in enumerate(held)
    ]
    if soak.get("second"):
        runs.append(("snapshot released, vacuumed", soak["second"]))
    return runs


def plot_soak(results: Results, path: Path) -> bool:
    soak = results.soak
    runs = [(label, run) for label, run in _soak_runs(soak) if len(run.get("samples") or []) >= 2]
    if not runs:
        return False
    fig, (top, bottom) = _pyplot().subplots(2, 1, figsize=(8, 6.5), sharex=True)
    mib = 1024 * 1024
    held = [run for label, run in runs if run.get("held", True)]
    oranges = iter(("tab:orange", "tab:red", "tab:brown", "tab:pink", "tab:olive"))
    for label, run in runs:
        color = next(oranges, "tab:gray") if run.get("held", True) else "tab:blue"
        samples = run["samples"]
        ts = [s["t"] for s in samples]
        mids, rates = [], []
        for before, after in itertools.pairwise(samples):
            width = after["t"] - before["t"]
            if width > 0:
                mids.append((before["t"] + after["t"]) / 2)
                rates.append((after["processed"] - before["processed"]) / width)
        top.step(mids, rates, where="mid", color=color, label=label)
        if run.get("held", True) and held and run is not held[-1]:
            continue  # the space of the last run with the snapshot held stands for the others
        if any("queue_bytes" in s for s in samples):
            bottom.plot(
                ts, [(s.get("queue_bytes") or 0) / mib for s in samples], color=color,
                label=f"{label}: every jobq table with its indexes",
            )  # fmt: skip
        bottom.plot(
            ts, [s.get("table_bytes", 0) / mib for s in samples], color=color, linestyle="--",
            label=f"{label}: jobq.jobs heap",
        )  # fmt: skip
    vacuumed = (soak.get("space_vacuumed") or {}).get("queue_bytes")
    if vacuumed:
        bottom.axhline(vacuumed / mib, color="grey", linestyle=":", label="after the VACUUM between the runs")
    top.set_ylabel("jobs/s per window")
    top.grid(True, alpha=0.3)
    top.legend(fontsize=8)
    bottom.set_ylabel("MiB")
    bottom.set_xlabel("seconds since the run's start")
    bottom.grid(True, alpha=0.3)
    bottom.legend(fontsize=7, loc="lower right")
    top.set_title(
        f"Soak: {soak['jobs']:,} jobs per run, {soak['workers']} Workers, batch {soak['batch']}",
        fontsize=10,
    )
    fig.tight_layout()
    return _save(fig, path)


# -- the report -------------------------------------------------------------------------


def _throughput_section(view: View) -> list[str]:
    out = ["## Throughput, zero work", ""]
    scale = view.r.meta.get("scale", {})
    out.append(
        f"A backlog of {scale.get('jobs', 0):,} jobs drained by *k* worker processes, from the start barrier "
        f"to the last job counted; jobs/s, median of the repeats (min{DASH}max). † = stopped at the "
        f"per-run limit of {scale.get('run_limit', 0):g} s (the rate is over the jobs done by then); a run "
        "that earlier runs show will stop there gets a smaller backlog, twice what it is expected to "
        "process (at least 1,000 jobs), so that loading jobs does not eat the time budget. A contender that "
        "cannot batch runs batch 1 only. The clock starts when every worker process has called `ready()`: "
        "whatever a contender still does after that (the first-job column) counts against it."
    )
    out.append("")
    cells = [(w, b) for w in view.workers for b in view.batches]
    rows = []
    for name in view.contenders:
        row = [view.label(name)]
        for count, batch in cells:
            spread = Spread.of(view.rates(name, count, batch).values())
            row.append(
                spread.show(rate) + (" †" if view.capped(name, count, batch) else "") if spread else ""
            )
        firsts = [
            rec["first_job"] * 1000
            for (contender, _, _), by_repeat in view.tp.items()
            if contender == name
            for rec in by_repeat.values()
            if rec.get("first_job")
        ]
        first = Spread.of(firsts)
        row.append(first.show(ms) if first else "")
        if any(row[1:]):
            rows.append(row)
    out.append(table(["contender", *(f"{w}w b{b}" for w, b in cells), "first job, ms"], rows))
    return out


def _work_section(view: View) -> list[str]:
    if not view.wk:
        return []
    scale = view.r.meta.get("scale", {})
    out = ["## Throughput with 5 ms of work per job", ""]
    out.append(
        f"The handler sleeps {scale.get('work_ms', 5):g} ms; the ideal is {IDEAL_PER_WORKER:.0f} jobs/s per "
        f"worker process. Batch {scale.get('work_batch')} where the contender batches (else its largest "
        "below), zero-work contenders without a handler (pgbench) left out."
    )
    out.append("")
    rows = []
    for name in view.contenders:
        for count in sorted({k[1] for k in view.wk}):
            recs = view.wk.get((name, count))
            if not recs:
                continue
            spread = Spread.of(rec["rate"] for rec in recs.values())
            ideal = Spread.of(rec["rate"] / (count * IDEAL_PER_WORKER) * 100 for rec in recs.values())
            batch = next(iter(recs.values()))["batch"]
            if spread and ideal:
                capped = any(rec["capped"] for rec in recs.values())
                rows.append(
                    [
                        view.label(name),
                        str(count),
                        str(batch),
                        spread.show(rate) + (" †" if capped else ""),
                        ideal.show(lambda v: f"{v:.0f}", "%"),
                    ]
                )
    out.append(table(["contender", "workers", "batch", "jobs/s", "% of ideal"], rows))
    return out


def _enqueue_section(r: Results) -> list[str]:
    if not r.enqueue and not r.loads:
        return []
    names = {
        "pgjobq_no_waiter": "pgjobq.enqueue, one row per statement, no worker waiting",
        "article_insert": "article's table, one INSERT per statement, no worker",
        "pgjobq_idle_worker": "pgjobq.enqueue, one row per statement, an idle pgjobq Worker running",
        "article_insert_worker": "article's table, one INSERT per statement, the article's worker running",
        # the variants of results from before 0.5.0 (NOTIFY trigger), so that older results re-render
        "pgjobq_notify": "pgjobq.enqueue, one row per statement, NOTIFY trigger on",
        "pgjobq_no_trigger": "pgjobq.enqueue, one row per statement, trigger disabled",
        "bulk_python": "pgjobq.enqueue_many from Python, one call",
        "bulk_article": "article's table, one INSERT ... SELECT of the same payloads as one JSON array",
        "bulk_sql": "jobq.enqueue_many in SQL, payloads built by the server",  # before 0.5.0's runs
    }
    out = ["## Enqueue", ""]
    rows = []
    for variant, label in names.items():
        recs = [rec for rec in r.enqueue if rec["variant"] == variant and not rec.get("error")]
        spread = Spread.of(rec["rate"] for rec in recs)
        if spread and recs:
            rows.append([label, str(recs[0]["clients"]), f"{recs[0]['jobs']:,}", spread.show(rate)])
    if rows:
        out.append(
            "Each statement is its own transaction (autocommit); durable commits. The single-row clients "
            "run with no consumer, and again with one idle consumer started beside them, so that both "
            "sides carry one: for pgjobq a pgjobq Worker (zero-work handler, batch 10) that registered "
            "as waiting (`jobq.register_waiter`) before the clients started, so enqueues notify it whenever "
            "it waits; for the article's table the article's own worker loop (batch 10, 0.5 s sleep when "
            "empty). The consumer's jobs are not "
            "counted; it shares the machine's CPUs with the clients. The bulk calls start from the same "
            "payloads as Python dicts, each dumped to JSON in the timed section: pgjobq.enqueue_many sends "
            "them as one JSON array, and so does the article's reference INSERT (`INSERT INTO jobs "
            "(payload) SELECT p FROM jsonb_array_elements(...)`, the fastest plain INSERT of them we "
            "found; the article contender's own load path, `unnest` of an array of JSON texts, is about "
            "half as fast). Server-side variants are in the profile."
        )
        out.append("")
        out.append(table(["what", "clients", "jobs", "jobs/s"], rows))
        unregistered = [
            rec
            for rec in r.enqueue
            if rec.get("variant") == "pgjobq_idle_worker" and rec.get("consumer_waiting") is False
        ]
        if unregistered:
            out += [
                "",
                f"In {len(unregistered)} of the runs with an idle pgjobq Worker, the Worker had not "
                "registered as waiting (`jobq.register_waiter`) within a second of its start: those enqueues "
                "had no waiter to notify.",
            ]
    loads: dict[str, list[float]] = defaultdict(list)
    sizes: dict[str, int] = {}
    full_size = r.meta.get("scale", {}).get("jobs")
    for rec in r.loads:
        if rec["workload"] == "throughput" and rec["seconds"] > 0 and rec["jobs"] == full_size:
            loads[rec["contender"]].append(rec["jobs"] / rec["seconds"])
            sizes[rec["contender"]] = rec["jobs"]
    if loads:
        labels = r.meta.get("labels", {})
        out += [
            "",
            "Loading a full backlog for a throughput run with the contender's own bulk path (`enqueue`):",
            "",
        ]
        out.append(
            table(
                ["contender", "jobs", "jobs/s"],
                [
                    [labels.get(name, name), f"{sizes[name]:,}", spread.show(rate)]
                    for name in sorted(
                        loads, key=lambda n: list(labels).index(n) if n in labels else len(labels)
                    )
                    if (spread := Spread.of(loads[name]))
                ],
            )
        )
    return out


def _versions_section(r: Results) -> list[str]:
    v = r.versions
    if not v:
        return []
    out = ["## Current version vs previous", ""]
    if v.get("error"):
        return [*out, f"Not measured: {v['error']}"]
    current, previous, within = v["current"], v["previous"], float(v["within"])
    out.append(
        f"pgjobq's own SQL, the current version ({current}, the extension's default) against the previous "
        f"one ({previous}, `CREATE EXTENSION pgjobq VERSION '{previous}'`), each in a database of its "
        f"own on the same server, driven by pgbench: {v['clients']} clients, prepared statements, "
        f"{v['seconds']} s per run, durable commits; the two versions' runs of a path follow each other, "
        "in alternating order. A claim path starts from a backlog queued just before (jobs done per "
        "second of pgbench's time); the enqueue from an empty table. A new version must keep the two hot "
        f"paths within {(1 - within) * 100:.0f}% of the previous one (current / previous "
        f"≥ {ratio(within)} for the median of the ratios paired per repeat): *yes* when a "
        "distribution-free interval for that median lies above the bound, *no* when it lies below, "
        "else *undecided*: more repeats (`--repeats`) narrow the interval, a quieter machine the "
        "ratios. The interval is the k-th lowest to the k-th highest ratio, k the largest that covers "
        "the median with 90% or more (k = 1, the range of the repeats, with fewer than 8 repeats: it "
        "covers 75% with 3, 94% with 5)."
    )
    out.append("")
    rows = []
    for path in v.get("paths", []):
        label = path["label"] + (" (hot path)" if path["hot"] else "")
        if path.get("missing"):
            rows.append([label, "\u2014", "\u2014", f"not compared: {path['missing']}", ""])
            continue
        before, after = version_rates(r, path["name"], "previous"), version_rates(r, path["name"], "current")
        each = ratios(after, before)
        spread = Spread.of(each)
        drained = any(run.get("drained") for run in v["runs"] if run["path"] == path["name"])
        verdict = ""
        if each:
            low, high, coverage = median_bounds(each)
            bounds = f"{ratio(low)}{DASH}{ratio(high)} covers the median at {coverage * 100:.0f}%"
            if low >= within:
                verdict = f"yes ({bounds})"
            elif high < within:
                verdict = f"**no**: {(1 - statistics.median(each)) * 100:.0f}% slower ({bounds})"
            else:
                verdict = f"undecided ({bounds})"
        rows.append(
            [
                label + (" †" if drained else ""),
                shown(before.values(), rate),
                shown(after.values(), rate),
                spread.show(ratio) if spread else "\u2014",
                verdict,
            ]
        )
    out.append(
        table(
            [
                "path",
                f"previous ({previous}), jobs/s",
                f"current ({current}), jobs/s",
                f"current / previous (min{DASH}max)",
                f"within {(1 - within) * 100:.0f}%",
            ],
            rows,
        )
    )
    if any(run.get("drained") for run in v["runs"]):
        out += ["", "† the backlog ran out in a run before its end: that run's rate is low."]
    return out


def _limits_section(r: Results) -> list[str]:
    lim = r.limits
    if not lim:
        return []
    out = ["## Queues with limits", ""]
    if lim.get("error"):
        return [*out, f"Not measured: {lim['error']}"]
    out.append(
        f"Claim + complete on a queue with limits (`jobq.configure_queue`) against the same queue without "
        "any (plain), one database each, driven by pgbench: prepared statements, "
        f"{lim['seconds']} s per run, durable commits; each client loops over `jobq.claim(q, batch, w)` and "
        f"one `jobq.complete_many` of what it got, and waits {lim['empty_wait_ms']} ms after a claim that "
        "got nothing (a limit reached). Every run starts from a fresh backlog loaded with "
        "`jobq.enqueue_many(..., concurrency_keys => ...)`; every repeat runs every queue in rotated "
        "order, so the ratio to the plain queue is paired per repeat. Claims/s counts every claim, those "
        "that got nothing too; jobs per claim is jobs done / claims. The skewed queues put the hot key's "
        "jobs ahead of the small keys' (enqueued first), the case where priority order walks the hot "
        "key's backlog at every claim."
    )
    plain_label = next((v["label"] for v in lim.get("variants", []) if v["name"] == "plain"), "plain")
    for cell in limit_cells(r):
        out += ["", f"{cell[0]} clients, batch {cell[1]}:", ""]
        plain = limit_rates(r, "plain", cell)
        rows = []
        for variant in lim.get("variants", []):
            name = variant["name"]
            runs = limit_runs(r, name, cell)
            if not runs:
                continue
            rates = {rep: float(run["rate"]) for rep, run in runs.items()}
            each = ratios(rates, plain)
            spread = Spread.of(each)
            drained = any(run.get("drained") for run in runs.values())
            per_claim = Spread.of(
                run["processed"] / run["claims"] for run in runs.values() if run.get("claims")
            )
            rows.append(
                [
                    variant["label"] + (" †" if drained else ""),
                    shown(rates.values(), rate),
                    shown((float(run["claims_per_second"]) for run in runs.values()), rate),
                    per_claim.show(lambda v: f"{v:.1f}") if per_claim else "—",
                    "1" if name == "plain" else (spread.show(small_ratio) if spread else "—"),
                ]
            )
        out.append(
            table(
                ["queue", "jobs/s", "claims/s", "jobs per claim", f"/ {plain_label} (min{DASH}max)"],
                rows,
            )
        )
    if any(run.get("drained") for run in lim.get("runs", [])):
        out += ["", "† the backlog ran out in a run before its end: that run's rate is low."]
    skew = [v for v in lim.get("variants", []) if v.get("hot")]
    sizes = sorted({v["hot"] for v in skew})
    if len(sizes) > 1:
        out += [
            "",
            "The skew by the hot key's backlog (jobs/s, and / the smallest backlog, paired per repeat):",
            "",
        ]
        rows = []

        def kind(variant: dict[str, Any]) -> str:
            """The skew's rows: key order, and jit off where the variant turned it off."""
            order = str(variant["settings"].get("key_order", "priority"))
            return order if variant.get("jit", True) else f"{order}, jit off"

        for cell in limit_cells(r):
            for order in sorted({kind(v) for v in skew}):
                by_size = {v["hot"]: limit_rates(r, v["name"], cell) for v in skew if kind(v) == order}
                base = by_size.get(sizes[0], {})
                cells = []
                for size in sizes:
                    spread = paired(by_size.get(size, {}), base) if base else None
                    cells.append(
                        shown(by_size.get(size, {}).values(), rate)
                        + (f" ({spread.show(small_ratio)})" if spread and size != sizes[0] else "")
                    )
                if any(by_size.values()):
                    rows.append([f"{cell[0]} clients b{cell[1]}, {order}", *cells])
        out.append(table(["cell, key_order", *(f"hot key {size:,} jobs" for size in sizes)], rows))
    return out


def _rate_section(r: Results) -> list[str]:
    runs = [run for run in r.rate_limit if not run.get("error")]
    if not r.rate_limit:
        return []
    out = ["## Rate-limited queue", ""]
    if not runs:
        return [*out, f"Not measured: {r.rate_limit[0]['error'].strip().splitlines()[0]}"]
    first = runs[0]
    out.append(
        f"{first['workers']} pgjobq Worker processes (batch {first['batch']}, defaults otherwise: LISTEN, "
        f"1 s poll) on a queue with `rate_limit => {first['rate_limit']}` per second and a backlog of "
        f"{first['backlog']:,} jobs, for {first['limit']:g} s from the start barrier; zero work. Claims "
        "are the calls of `jobq._claim_gated` (every claim of a queue with limits, whichever function "
        "made it, those that got nothing too), counted with `track_functions = 'pl'` (an upper bound: those "
        "made while the Workers stop count too): a Worker that spun "
        "on a queue at its limit would show hundreds per second. The rate window slides: a run of "
        "*t* s may take up to rate_limit jobs in each of ceil(*t*) windows, so jobs/s over a run can pass "
        "the limit by one window's worth; the most jobs claimed in any 1 s (from their claim times) is "
        "what the limit bounds. Median of the repeats "
        f"(min{DASH}max)."
    )
    out.append("")
    workers = first["workers"]
    out.append(
        table(
            ["jobs/s", "rate_limit/s", "jobs/s / rate_limit", "most claimed in any 1 s",
             "claims/s, all Workers", "claims/s per Worker", "jobs per claim"],
            [
                [
                    shown((run["rate"] for run in runs), rate),
                    str(first["rate_limit"]),
                    shown((run["rate"] / run["rate_limit"] for run in runs), ratio),
                    shown((run.get("window_max", 0) for run in runs), rate),
                    shown((run["claims_per_second"] for run in runs), lambda v: f"{v:,.1f}"),
                    shown((run["claims_per_second"] / workers for run in runs), lambda v: f"{v:,.1f}"),
                    shown((run["processed"] / run["claims"] for run in runs if run["claims"]),
                          lambda v: f"{v:.1f}"),
                ]
            ],
        )
    )  # fmt: skip
    return out


def _latency_section(r: Results) -> list[str]:
    if not r.latency:
        return []
    first = r.latency[0]
    out = ["## Latency", ""]
    out.append(
        f"{first['jobs']} jobs enqueued one at a time (one commit each, random gaps) to one idle pgjobq "
        f"Worker (batch 10, concurrency 1; poll interval {first['poll_interval']:g} s); from the moment the "
        "enqueue's commit returned to the producer to the moment the handler started, both read from "
        f"CLOCK_MONOTONIC. Milliseconds, median over the repeats (min{DASH}max)."
    )
    out.append("")
    rows = []
    for mode, label in (("notify", "LISTEN/NOTIFY"), ("poll", "polling only (listen off)")):
        cols = [label]
        for q in (0.5, 0.9, 0.99, 1.0):
            spread = latency_quantiles(r, mode, q)
            cols.append(spread.show(ms) if spread else "\u2014")
        missing = sum(rec["missing"] for rec in r.latency if rec["mode"] == mode)
        cols.append(str(missing))
        rows.append(cols)
    out.append(table(["mode", "p50", "p90", "p99", "max", "not started"], rows))
    return out


def _node_section(r: Results) -> list[str]:
    """Graphile Worker and pg-boss beside `pgjobq worker`: settings, drain, enqueue, latency."""
    node = r.node
    if not node and "node" not in r.meta.get("workloads", []):
        return []
    out = ["## The Node.js peers: Graphile Worker and pg-boss", ""]
    if not node or node.get("skipped"):
        why = node.get("skipped") if node else "the workload recorded nothing"
        return [*out, f"**SKIPPED: Graphile Worker and pg-boss were not measured in this run: {why}.**"]
    versions = ", ".join(f"{name} {version}" for name, version in node.get("versions", {}).items())
    jobs = next((rec["jobs"] for rec in node.get("drain", [])), 0)
    out += [NODE_INTRO.format(node=node.get("node"), versions=versions, jobs=jobs, dash=DASH), ""]
    settings: dict[str, dict[str, str]] = node.get("settings", {})
    peers = [p for p in (NODE_PGJOBQ, *NODE_PEERS) if p in settings]
    names = [NODE_LABELS.get(p, p) for p in peers]
    keys = list(next(iter(settings.values()), {}))
    out.append(
        table(["setting", *names], [[key, *(settings[p].get(key, "") for p in peers)] for key in keys])
    )
    out += ["", "Drain of a backlog, jobs/s:", ""]
    rows = []
    for workers, batch in node_cells(r):
        cols = [f"{workers} process{'es' if workers > 1 else ''}, batch {batch}"]
        for peer in peers:
            runs = [
                rec
                for rec in node.get("drain", [])
                if (rec["peer"], rec["workers"], rec["batch"]) == (peer, workers, batch)
                and not rec.get("error")
            ]
            capped = " (capped)" if any(rec["capped"] for rec in runs) else ""
            cols.append(shown((rec["rate"] for rec in runs), rate) + capped)
        spread = paired(
            node_rates(r, "drain", NODE_PGJOBQ, workers=workers, batch=batch),
            node_best_peer(r, "drain", workers=workers, batch=batch),
        )
        verdict = "not measured" if spread is None else "met" if spread.median >= NODE_BOUND else "missed"
        rows.append([*cols, spread.show(ratio) if spread else "\u2014", verdict])
    out.append(table(["cell", *names, "pgjobq / best peer", f"\u2265 {NODE_BOUND:g}{TIMES}"], rows))
    firsts = "; ".join(
        f"{NODE_LABELS.get(peer, peer)} "
        + shown(
            (
                rec["first_job"] * 1000
                for rec in node.get("drain", [])
                if rec["peer"] == peer and rec.get("first_job")
            ),
            ms,
        )
        for peer in peers
    )
    out += ["", f"From the release to the first job counted, ms, over every drain: {firsts}."]
    out += _node_enqueue_part(r, peers, names)
    out += _node_latency_part(r, peers)
    failures = [
        rec for kind in ("drain", "enqueue", "latency") for rec in node.get(kind, []) if rec.get("error")
    ]
    broken: dict[str, str] = node.get("broken", {})
    if failures or broken:
        out += ["", "**Failed:**", ""]
        out += [f"- {NODE_LABELS.get(name, name)}: {why}" for name, why in broken.items()]
        if node.get("logs"):
            out.append(f"- The processes' logs: `{node['logs']}`.")
        out += [
            f"- {NODE_LABELS.get(rec['peer'], rec['peer'])}, repeat {rec['repeat']}: {rec['error']}"
            for rec in failures
        ]
    return out


NODE_INTRO = (
    "Each peer runs as its users run it, in OS processes of its own started by the benchmark, against a "
    "database of its own on the same server (durable commits: fsync and synchronous_commit on): pgjobq as "
    "`pgjobq worker` processes, Graphile Worker and pg-boss under Node.js {node} ({versions}; bench/node/). "
    "A drain loads a backlog of {jobs:,} jobs with the peer's own bulk call, starts the processes, and "
    "releases them once every one is connected (each reports ready, then waits for go); it is timed from "
    "the first job counted to the handler call that brings the jobs counted over every process to the "
    "backlog (or, at the time limit, to the last job counted by then: capped). Handlers do no work; each "
    "counts its jobs. "
    "jobs/s, median of the repeats (min{dash}max); the ratio is pgjobq's rate over the better of the two "
    "peers' in the same repeat."
)

NODE_ENQUEUE = (
    "Single-row enqueue from {clients} client processes ({jobs:,} jobs in all, no worker running), each "
    "peer's own call (`pgjobq.enqueue`, Graphile Worker's `addJob`, pg-boss's `send`), one commit each, "
    "jobs/s. pgjobq sends a notification only when a worker is registered as waiting (none is here); "
    "Graphile Worker's `add_job` always notifies, and pg-boss does on a queue created with `notify: true`; "
    "PostgreSQL makes notifying transactions take turns at their commit."
)

NODE_LATENCY = (
    "Latency on an idle worker (one process, batch 1): {jobs} jobs added one at a time by a producer "
    "process of the peer's own client (after 3 warm-up jobs), from the add's return (committed) to the "
    "handler's start, both read from CLOCK_MONOTONIC; ms, median of the repeats (min{dash}max)."
)


def _node_enqueue_part(r: Results, peers: list[str], names: list[str]) -> list[str]:
    enqueue = r.node.get("enqueue", [])
    if not enqueue:
        return []
    out = ["", NODE_ENQUEUE.format(clients=enqueue[0]["clients"], jobs=enqueue[0]["jobs"]), ""]
    names = ["pgjobq" if peer == NODE_PGJOBQ else name for peer, name in zip(peers, names, strict=True)]
    spread = paired(node_rates(r, "enqueue", NODE_PGJOBQ), node_best_peer(r, "enqueue"))
    cols = [shown(node_rates(r, "enqueue", peer).values(), rate) for peer in peers]
    out.append(
        table(
            ["", *names, "pgjobq / best peer"],
            [["jobs/s", *cols, spread.show(ratio) if spread else "\u2014"]],
        )
    )
    return out


def _node_latency_part(r: Results, peers: list[str]) -> list[str]:
    latency = r.node.get("latency", [])
    if not latency:
        return []
    out = ["", NODE_LATENCY.format(jobs=latency[0]["jobs"], dash=DASH), ""]
    rows = []
    for peer in peers:
        cols = [NODE_LABELS.get(peer, peer)]
        for q in (0.5, 0.99, 1.0):
            spread = node_latency(r, peer, q)
            cols.append(spread.show(ms) if spread else "\u2014")
        cols.append(str(sum(rec.get("missing", 0) for rec in latency if rec["peer"] == peer)))
        rows.append(cols)
    out.append(table(["peer", "p50", "p99", "max", "not started"], rows))
    return out


def _scheduled_section(r: Results) -> list[str]:
    if not r.scheduled:
        return []
    first = r.scheduled[0]
    gap = r.meta.get("scale", {}).get("scheduled_gap", [0.15, 0.3])
    out = ["## Scheduled jobs", ""]
    out.append(
        f"{first['jobs']} jobs per repeat, each enqueued one at a time with run_at {first['ahead']:g} s "
        f"ahead of the producer's clock (the next one {gap[0]:g}{DASH}{gap[1]:g} s later, so a few wait at "
        "once), to one "
        f"idle pgjobq Worker (batch 10, LISTEN, poll interval {first['poll_interval']:g} s); from each "
        "job's run_at to the moment its handler started, both by the machine's wall clock (the server, "
        "the producer and the Worker share it). A Worker that only polled would start such a job up to "
        f"one poll interval late. Milliseconds, median over the repeats (min{DASH}max)."
    )
    out.append("")
    cols = []
    for q in (0.5, 0.9, 0.99, 1.0):
        spread = scheduled_quantiles(r, q)
        cols.append(spread.show(ms) if spread else "\u2014")
    missing = sum(rec["missing"] for rec in r.scheduled)
    out.append(table(["p50", "p90", "p99", "max", "not started"], [[*cols, str(missing)]]))
    return out


PLAN_NODE = re.compile(r"->\s+([A-Z][A-Za-z ]*?(?:Scan|Join|Loop))(?: using (\w+))?(?: on (\w+))?")


def plan_summary(plan: str) -> str:
    """The scans and joins of a text plan, in order: "Index Scan using jobs_claim_idx, Hash Join, ..."."""
    nodes = []
    for match in PLAN_NODE.finditer(plan):
        node, index, relation = match.groups()
        if node == "CTE Scan":
            continue
        nodes.append(node + (f" {index}" if index else f" {relation}" if relation else ""))
    return ", ".join(nodes)


def _claim_section(r: Results) -> list[str]:
    if not r.claim_cost:
        return []
    out = ["## Claim cost", ""]
    first = r.claim_cost[0]
    out.append(
        f"`jobq.claim(queue, 10, ...)` with {first['queued']:,} queued jobs behind the rows named; "
        "server-side "
        "execution time and shared buffers (hit + read) from `EXPLAIN (ANALYZE, BUFFERS)`, on a fresh "
        "connection after one claim on an empty queue (which plans the statement). Finished rows were "
        "inserted as done and vacuumed; dead tuples are jobs updated from queued to done and not vacuumed "
        "(autovacuum off on the table in these databases; that table is built afresh for every repeat, so "
        "its first claim is the first one after the update). Median over the repeats "
        f"(min{DASH}max); the plan column names the scans and joins of the statement inside jobq.claim "
        "(auto_explain, one claim per table)."
    )
    out.append("")
    rows = []
    states = list(dict.fromkeys(rec["state"] for rec in r.claim_cost))
    for state in states:
        recs = [rec for rec in r.claim_cost if rec["state"] == state]
        rows.append(
            [
                state,
                f"{recs[0]['finished_rows']:,}",
                f"{recs[0]['dead_tuples']:,}",
                shown(claim_firsts(r, state).values(), ms),
                shown(claim_firsts(r, state, "buffers").values(), rate),
                shown(claim_medians(r, state).values(), ms),
                shown(claim_medians(r, state, "buffers").values(), rate),
                plan_summary(r.claim_plans.get(state, "")),
            ]
        )
    out.append(
        table(
            [
                "table",
                "finished rows",
                "dead tuples",
                "first claim ms",
                "first claim buffers",
                "median claim ms",
                "median claim buffers",
                "plan",
            ],
            rows,
        )
    )
    finished = [state for state in states if state.startswith("finished_")]
    planned = {"empty", *finished[-1:], *(state for state in states if state.startswith("dead_"))}
    for state, plan in r.claim_plans.items():
        if plan and state in planned:
            out += [
                "",
                f"<details><summary>plan inside jobq.claim, {state}</summary>",
                "",
                "```",
                plan.strip(),
                "```",
                "</details>",
            ]
    return out


def _soak_section(r: Results) -> list[str]:
    soak = r.soak
    if not soak:
        return []
    mib = 1024 * 1024
    out = ["## Soak", ""]
    retain = soak.get("retain_done")
    kept = (
        f"The queue keeps its done jobs {retain:g} s (`retain_done`, enforced by the Workers' `jobq.tick`)."
        if retain is not None
        else "The extension has no retention: done jobs stay until purged."
    )
    out.append(
        f"Runs of {soak['jobs']:,} jobs, each loaded up front and drained by {soak['workers']} pgjobq "
        f"Worker processes (batch {soak['batch']}): first while another session holds one REPEATABLE "
        "READ transaction open for the whole run (each such run in a fresh database: the target is the "
        "median of their ratios); then, after the last, the snapshot is released and "
        f"{soak.get('vacuum', 'the tables are vacuumed')}; then the second, with no snapshot held. {kept} "
        "Space is that of every table of the jobq schema with its indexes and TOAST "
        "(`pg_total_relation_size`)."
    )
    out.append("")
    for label, run in _soak_runs(soak):
        capped = " (stopped at the time limit)" if run.get("capped") else ""
        line = f"- {label}: {run['processed']:,} jobs in {run['seconds']:.0f} s{capped}"
        rates = soak_rates({**run, "compare": soak["compare"]})
        if rates and rates[0] > 0:
            span = min(float(soak["compare"]), float(run["seconds"]) / 2)
            line += (
                f"; first {span:.3g} s {rates[0]:,.0f} jobs/s, last {span:.3g} s {rates[1]:,.0f} jobs/s "
                f"({rates[1] / rates[0]:.2f}{TIMES})"
            )
        if run.get("error"):
            line += f"; error: `{run['error'].strip().splitlines()[0]}`"
        out.append(line + ".")
    spaces: list[tuple[str, dict[str, Any]]] = [
        (when, soak[key])
        for when, key in (
            ("at the end of the first run (snapshot held)", "space_held"),
            ("after the snapshot's release and VACUUM", "space_vacuumed"),
            ("at the end of the second run", "space_second"),
        )
        if soak.get(key)
    ]
    if spaces:
        names = sorted(
            {name for _, space in spaces for name in space.get("relation_bytes") or {}},
            key=lambda name: (not name.startswith("jobs"), name),
        )
        main = [name for name in names if name.startswith("jobs")]
        rows = []
        for when, space in spaces:
            sizes = space.get("relation_bytes") or {}
            others = sum(size for name, size in sizes.items() if name not in main)
            rows.append(
                [
                    when,
                    f"{space['queue_bytes'] / mib:,.1f}",
                    *(f"{sizes.get(name, 0) / mib:,.1f}" for name in main),
                    f"{others / mib:,.1f}",
                ]
            )
        out += ["", "Space used by the queue, MiB:", ""]
        out.append(table(["when", "all jobq tables", *main, "the other tables and indexes"], rows))
    for label, run in _soak_runs(soak):
        samples = run.get("samples") or []
        digits = 0 if soak.get("window", 10) >= 5 else 1
        rows = []
        for before, after in itertools.pairwise(samples):
            width = after["t"] - before["t"]
            if width <= 0:
                continue
            indexes = after.get("index_bytes") or {}
            rows.append(
                [
                    f"{before['t']:.{digits}f}{DASH}{after['t']:.{digits}f}",
                    rate((after["processed"] - before["processed"]) / width),
                    f"{(after.get('queue_bytes') or 0) / mib:.1f}",
                    f"{after.get('table_bytes', 0) / mib:.1f}",
                    " / ".join(f"{indexes[k] / mib:.1f}" for k in sorted(indexes)),
                    f"{after.get('dead_tuples') or 0:,}",
                    str(after.get("autovacuums") or 0),
                    str(after.get("checkpoints_requested", "")),
                ]
            )
        if not rows:
            continue
        index_names = sorted(next((s.get("index_bytes") for s in samples if s.get("index_bytes")), {}) or {})
        out += ["", f"{label[0].upper()}{label[1:]}:", ""]
        out.append(
            table(
                [
                    "seconds",
                    "jobs/s",
                    "queue MiB",
                    "jobq.jobs heap MiB",
                    f"its indexes MiB ({' / '.join(index_names)})",
                    "dead tuples",
                    "autovacuums",
                    "checkpoints requested (server total)",
                ],
                rows,
            )
        )
    return out


def _meta_section(r: Results) -> list[str]:
    meta = r.meta
    server = meta.get("server", {})
    out = ["## How this was run", ""]
    timings = ", ".join(f"{k} {v:.0f} s" for k, v in r.timings.items())
    out.append(
        f"- Command: `{meta.get('command')}` ({meta.get('mode')} mode, {meta.get('repeats')} interleaved "
        f"repeats), started {meta.get('started')}, git {meta.get('git')}."
    )
    out.append(f"- Wall time: {timings}.")
    start, end = meta.get("load_average_start", []), meta.get("load_average_end", [])
    out.append(
        f"- Machine: {meta.get('cpus')} CPUs, {meta.get('platform')}, Python {meta.get('python')}. "
        "Load average "
        f"(1/5/15 min) {'/'.join(f'{x:.1f}' for x in start)} at the start, "
        f"{'/'.join(f'{x:.1f}' for x in end)} at the end: other work on the machine shares the CPUs, "
        "which is "
        "why every figure is a ratio measured side by side."
    )
    out.append(
        f"- PostgreSQL {server.get('server_version')}, one throwaway server for all: "
        f"fsync {server.get('fsync')}, "
        f"synchronous_commit {server.get('synchronous_commit')}, full_page_writes "
        f"{server.get('full_page_writes')}, shared_buffers {server.get('shared_buffers')}, max_wal_size "
        f"{server.get('max_wal_size')}, autovacuum {server.get('autovacuum')}; "
        "a fresh database per contender; "
        + (
            "ANALYZE and CHECKPOINT before every run."
            if meta.get("scale", {}).get("checkpoint_each_run", True)
            else "ANALYZE before every run (no CHECKPOINT: the quick run is shorter than checkpoint_timeout "
            "and writes far less than max_wal_size)."
        )
    )
    if meta.get("redis"):
        out.append(f"- Redis: {meta['redis']} (persistence off, as in the article).")
    packages = ", ".join(f"{k} {v}" for k, v in meta.get("packages", {}).items())
    out.append(f"- Packages: {packages}.")
    docs = meta.get("docs", {})
    if docs:
        out += ["", "Contenders and their settings:", ""]
        out += [f"- **{meta['labels'].get(k, k)}** (`{k}`): {v}" for k, v in docs.items()]
    if r.skipped:
        out += ["", "Skipped:", ""]
        out += [f"- `{k}`: {v}" for k, v in r.skipped.items()]
    return out


def write_report(results: Results, out: Path) -> str:
    """Write report.md and the plots to out; return the summary (targets and ratios) as text."""
    view = View(results)
    plots = {
        "throughput.png": plot_throughput(view, out / "throughput.png"),
        "latency.png": plot_latency(results, out / "latency.png"),
        "soak.png": plot_soak(results, out / "soak.png"),
    }
    found = checks(view)
    targets = table(["target", "measured", "bound", "status"], [c.row() for c in found])
    ratios = table(["ratio (paired per repeat)", f"median (min{DASH}max)", "repeats"], ratio_rows(view))
    meta = results.meta
    total = results.timings.get("total", 0)
    lines = [
        f"# pgjobq benchmark ({meta.get('mode')} run)",
        "",
        f"`{meta.get('command')}` · {meta.get('started')} · {meta.get('cpus')} CPUs · "
        f"wall time {total:.0f} s · "
        "all figures measured in this run, side by side",
        "",
        "## Targets",
        "",
        targets,
        "",
        "Where a target is missed, the server-side measurements that say why are in "
        "[`profile.md`](../profile.md) (`make bench-profile`, `bench/profile.py`).",
        "",
        "## Ratios",
        "",
        ratios,
        "",
    ]
    if plots["throughput.png"]:
        lines += ["![throughput by workers and batch](throughput.png)", ""]
    lines += [*_throughput_section(view), ""]
    lines += [*_work_section(view), ""]
    lines += [*_enqueue_section(results), ""]
    if versions := _versions_section(results):  # only runs that measured it have the section
        lines += [*versions, ""]
    if limits := _limits_section(results):
        lines += [*limits, ""]
    if rated := _rate_section(results):
        lines += [*rated, ""]
    lines += [*_latency_section(results), ""]
    if plots["latency.png"]:
        lines += ["![latency distribution](latency.png)", ""]
    if scheduled := _scheduled_section(results):
        lines += [*scheduled, ""]
    if node := _node_section(results):
        lines += [*node, ""]
    lines += [*_claim_section(results), ""]
    lines += [*_soak_section(results), ""]
    if plots["soak.png"]:
        lines += ["![soak over time](soak.png)", ""]
    lines += _meta_section(results)
    (out / "report.md").write_text("\n".join(lines).rstrip() + "\n")
    return "\n".join(
        [f"pgjobq benchmark, {meta.get('mode')} run, wall time {total:.0f} s", "", targets, "", ratios]
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: report.py RESULTS_FOLDER  (re-renders report.md and the plots from results.json)")
        return 2
    folder = Path(args[0])
    print(write_report(Results.load(folder / "results.json"), folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
