"""Reporting half of ``bench_scaling.py``: a table cell, its markdown/console line, the README section, the plot."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers

BEGIN, END = "<!-- bench_scaling:begin (written by benchmarks/bench_scaling.py) -->", "<!-- bench_scaling:end -->"


@dataclass
class Row:
    """Medians of one (size, G, T) cell."""

    size: str
    params: int
    group: int
    tokens: int
    rows: int
    sides: dict[str, dict[str, float]] = field(default_factory=dict)  # side -> step_s, tok_s, gen_share, len

    @property
    def ratio(self) -> float:
        """rlforge speed over TRL speed (TRL s/step over rlforge s/step); > 1: rlforge faster."""
        return self.sides["trl"]["step_s"] / self.sides["rlforge"]["step_s"]


def machine() -> str:
    """CPU model (with its family/model numbers and widest vector ISA: VMs often name only the vendor), cores and
    memory in one line. Ratios move with the CPU (benchmarks/README.md: a Zen 3 and a Zen 5 VM), so every table
    says which one it came from."""
    cpu = platform.processor() or "cpu"
    try:
        first_cpu = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
        fields = (line.partition(":") for line in first_cpu.splitlines())
        info = {key.strip(): value.strip() for key, _, value in fields}
        flags = set(info.get("flags", "").split())
        isa = next((name for name in ("amx_tile", "avx512f", "avx2") if name in flags), "no avx2")
        family, model = info.get("cpu family", "?"), info.get("model", "?")
        cpu = f"{info.get('model name', cpu)} (family {family} model {model}, {isa})"
        mem = Path("/proc/meminfo").read_text().split()[1]
        mem_gib = f", {int(mem) / 2**20:.0f} GiB"
    except OSError:
        mem_gib = ""
    return f"{cpu}, {os.cpu_count()} cores{mem_gib}"


def load() -> str:
    """``uptime``'s load averages (1, 5, 15 min)."""
    try:
        return (
            subprocess.run(["uptime"], capture_output=True, text=True, check=True)
            .stdout.split("load average:")[1]
            .strip()
        )
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def versions() -> str:
    """Python, torch, transformers and TRL versions."""
    import trl

    return (
        f"Python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"trl {trl.__version__}"
    )


HEADER = (
    "| model | params | G | T | rows | rlforge s/step | TRL s/step | ratio | rlforge tok/s | TRL tok/s "
    "| rlforge gen % | TRL gen % | resp. len (rl / TRL) |"
)


def table_line(row: Row) -> str:
    """One markdown table row (also the console line)."""
    ours, theirs = row.sides["rlforge"], row.sides["trl"]
    return (
        f"| {row.size} | {row.params / 1e6:.2f}M | {row.group} | {row.tokens} | {row.rows} | {ours['step_s']:.3f} "
        f"| {theirs['step_s']:.3f} | **{row.ratio:.2f}** | {ours['tok_s']:.0f} | {theirs['tok_s']:.0f} "
        f"| {100 * ours['gen_share']:.0f} | {100 * theirs['gen_share']:.0f} | {ours['len']:.0f} / {theirs['len']:.0f} |"
    )


def markdown(rows: list[Row], context: dict[str, str], notes: list[str]) -> str:
    """The README section: context lines, the table, notes (skips, partial run) and a per-size summary."""
    lines = [
        BEGIN,
        f"## Scaling with model size ({context['date']})",
        "",
        f"`{context['command']}` ({context['wall']}): machine {context['machine']}; {context['versions']}; "
        f"{context['threads']} intra-op thread(s) on both sides; load average (1/5/15 min) "
        f"{context['load_before']} at the start, {context['load_after']} at the end. {context['prompts']} prompts "
        "per step, G samples each, T new tokens at temperature 1, beta 0, AdamW lr 1e-4, clip 1; medians "
        "(see the script's docstring for the grid and the number of steps). ratio = TRL s/step / rlforge s/step; "
        "tok/s = response tokens per second of step; gen % = share of the step spent generating and scoring.",
        "",
        HEADER,
        "|" + "---|" * (HEADER.count("|") - 1),
        *[table_line(row) for row in rows],
        "",
        *[f"{note}\n" for note in notes],
        "Per size (medians over its settings):",
        "",
        *[f"- {line}" for line in size_summary(rows)],
        "",
        "![ratio vs model size](scaling.png)",
        "",
        END,
    ]
    return "\n".join(lines)


def size_summary(rows: list[Row]) -> list[str]:
    """One line per model size: median ratio and generation share of each side."""
    lines = []
    for size in dict.fromkeys(r.size for r in rows):
        cells = [r for r in rows if r.size == size]
        share = {s: statistics.median(r.sides[s]["gen_share"] for r in cells) for s in ("rlforge", "trl")}
        lines.append(
            f"{size}: ratio {statistics.median(r.ratio for r in cells):.2f}; generation "
            f"{100 * share['rlforge']:.0f}% of the rlforge step, {100 * share['trl']:.0f}% of TRL's"
        )
    return lines


def write_readme(path: Path, section: str) -> None:
    """Replaces the marked section of ``path`` (appends it when absent)."""
    text = path.read_text() if path.exists() else ""
    begin, end = text.find(BEGIN), text.find(END)
    if begin >= 0 and end > begin:
        text = text[:begin] + section + text[end + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def plot(rows: list[Row], path: Path, title: str) -> None:
    """Ratio (rlforge speed / TRL speed) vs params, one line per (G, T)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for group, tokens in sorted({(r.group, r.tokens) for r in rows}):
        cells = sorted((r for r in rows if (r.group, r.tokens) == (group, tokens)), key=lambda r: r.params)
        ax.plot([r.params for r in cells], [r.ratio for r in cells], marker="o", label=f"G={group}, T={tokens}")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.axhline(3.0, color="grey", linewidth=0.8, linestyle="--", label="3x target")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("policy parameters")
    ax.set_ylabel("rlforge speed / TRL speed (GRPO step)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
