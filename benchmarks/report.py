"""The outputs of a run: a table on stdout, one JSON file with everything, PNG plots."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .harness import OURS, Figure


def is_ours(subject: str) -> bool:
    """Ours: the blocking front end (``OURS``) or a variant of it ("sqldelay async (asyncpg)")."""
    return subject == OURS or subject.startswith(OURS + " ")


def ratios(figures: list[Figure]) -> dict[tuple[str, str, str, str], float]:
    """ours / reference for each (scenario, metric, our subject, reference subject) measured
    in the run."""
    out = {}
    for mine in figures:
        if not is_ours(mine.subject) or mine.value is None:
            continue
        for ref in figures:
            if ((ref.scenario, ref.metric) == (mine.scenario, mine.metric)
                    and not is_ours(ref.subject) and ref.value):
                out[(mine.scenario, mine.metric, mine.subject, ref.subject)] = \
                    mine.value / ref.value
    return out


def _rows(figures: list[Figure]) -> list[tuple[str, ...]]:
    r = ratios(figures)
    rows = []
    for f in figures:
        value = "-" if f.value is None else f"{f.value:,.1f}"
        ratio = r.get((f.scenario, f.metric, OURS, f.subject))
        shown = {k: v for k, v in f.params.items() if not isinstance(v, (list, tuple, dict))}
        params = " ".join(f"{k}={v:,.1f}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in shown.items())
        if f.note:
            params = f"{params} ({f.note})".strip()
        rows.append((f.scenario, f.subject, f.metric, value,
                     "" if ratio is None else f"{ratio:.2f}",
                     "" if f.retries is None else f"{f.retries:,}",
                     "" if f.deadlocks is None else f"{f.deadlocks:,}", params))
    return rows


# retries, deadlocks: what sqldelay's engine layer ran again during the scenario (all of its
# subjects of ours together), and the deadlocks among them; blank for the references
HEADER = ("scenario", "subject", "metric", "value", "ours/it", "retries", "deadlocks",
          "parameters")
_NUMBERS = (3, 4, 5, 6)  # the right-aligned columns


def table(figures: list[Figure]) -> str:
    """The figures, "ours/it" being the blocking front end's over each reference; then the
    other variants of ours over each reference, one line each."""
    rows = [HEADER, *_rows(figures)]
    last = len(HEADER) - 1  # the parameters, unaligned
    widths = [max(len(row[i]) for row in rows) for i in range(last)]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.rjust(w) if i in _NUMBERS else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row[:last], widths, strict=True))]
        lines.append("  ".join([*cells, row[last]]))
        if n == 0:
            lines.append("-" * len(lines[0]))
    variants = [(key, v) for key, v in ratios(figures).items() if key[2] != OURS]
    if variants:
        lines += ["", "other variants of ours over the references of the same scenario:"]
        lines += [f"  {s}: {mine} / {ref} = {v:.2f}" for (s, _, mine, ref), v in variants]
    return "\n".join(lines)


def markdown(figures: list[Figure]) -> str:
    """The same table in Markdown, for benchmarks/README.md."""
    out = ["| " + " | ".join(HEADER) + " |",
           "|" + "|".join("---:" if i in _NUMBERS else "---" for i in range(len(HEADER))) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in _rows(figures)]
    return "\n".join(out)


def write_json(path: Path, run: dict, figures: list[Figure]) -> None:
    payload = {**run, "figures": [f.as_json() for f in figures],
               "ratios": [{"scenario": s, "metric": m, "ours": mine, "reference": ref,
                           "ours_over_it": v}
                          for (s, m, mine, ref), v in ratios(figures).items()]}
    path.write_text(json.dumps(payload, indent=1, default=str))


def plots(out: Path, prefix: str, label: str, figures: list[Figure]) -> list[Path]:
    """One PNG of the throughput bars, one per scenario with a series (x, y) behind it, each
    named ``<prefix>-<what>.png``."""
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    bars = [f for f in figures if f.metric == "messages/s" and f.value and not f.series]
    if bars:
        by_scenario: dict[str, dict[str, float]] = defaultdict(dict)
        for f in bars:
            by_scenario[f.scenario][f.subject] = f.value
        subjects = sorted({f.subject for f in bars}, key=lambda s: (not is_ours(s), s))
        fig, ax = plt.subplots(figsize=(9, 4.5))
        width = 0.8 / len(subjects)
        names = list(by_scenario)
        for i, subject in enumerate(subjects):
            xs = [n + i * width for n in range(len(names))]
            ax.bar(xs, [by_scenario[s].get(subject, 0) for s in names], width, label=subject)
        ax.set_xticks([n + 0.4 - width / 2 for n in range(len(names))], names, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("messages/s (log)")
        ax.set_title(f"throughput, {label}")
        ax.legend(fontsize=8)
        written.append(_save(fig, out / f"{prefix}-throughput.png"))
    series: dict[str, list[Figure]] = defaultdict(list)
    for f in figures:
        if f.series:
            series[f.scenario].append(f)
    for scenario, figs in series.items():
        fig, ax = plt.subplots(figsize=(7, 4))
        for f in figs:
            xs, ys = zip(*f.series, strict=True)
            ax.plot(xs, ys, marker="o", label=f"{f.subject} {f.params.get('series_label', '')}")
        x_label, y_label = figs[0].params.get("axes", ("x", f.metric))
        if figs[0].params.get("log_x"):
            ax.set_xscale("log")
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_ylim(bottom=0)
        ax.set_title(f"{scenario}, {label}")
        ax.legend(fontsize=8)
        written.append(_save(fig, out / f"{prefix}-{scenario}.png"))
    return written


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
