"""The PNG next to the results: worker CPU ms/job and AWS requests/job per framework (median runs).

Run in the bench virtualenv (it has matplotlib): ``python -m bench.plot results.json out.png``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(json_path: str, png_path: str) -> None:
    """Two bar charts side by side, one bar per framework and proxy latency."""
    doc = json.loads(Path(json_path).read_text())
    rows = doc["summary"]
    latencies = doc["meta"]["latency_ms"]
    labels = doc["meta"]["frameworks"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / max(1, len(latencies))
    for j, latency in enumerate(latencies):
        at = {r["framework"]: r for r in rows if r["latency_ms"] == latency}
        xs = [i + j * width for i in range(len(labels))]
        cpu = [at[f]["worker_cpu_ms_per_job"] if f in at else 0 for f in labels]
        sqs = [at[f]["sqs_requests_per_job"] if f in at else 0 for f in labels]
        ddb = [at[f]["requests_per_job"] - at[f]["sqs_requests_per_job"] if f in at else 0 for f in labels]
        axes[0].bar(xs, cpu, width, label=f"+{latency:g} ms/request")
        axes[1].bar(xs, sqs, width, label=f"SQS, +{latency:g} ms")
        axes[1].bar(xs, ddb, width, bottom=sqs, label=f"DynamoDB, +{latency:g} ms", alpha=0.55)
    ticks = [i + width * (len(latencies) - 1) / 2 for i in range(len(labels))]
    for ax, title in zip(
        axes, ("worker CPU ms per job (lower is better)", "AWS requests per job (enqueue + run)"), strict=True
    ):
        ax.set_xticks(ticks, labels, rotation=15)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    meta = doc["meta"]
    fig.suptitle(
        f"{meta['n']} no-op jobs, 1 KB payload, median of {meta['runs']} runs, {meta['emulator']}, "
        f"{meta['cpus']} CPUs (load {meta['load_average_before'][0]:.1f})",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
