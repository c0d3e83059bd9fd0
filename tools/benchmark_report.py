"""The report of `tools/benchmark.py`: its Markdown tables and the JSON beside them.

`write_report(report, PREFIX)` writes PREFIX.md (`to_markdown`: the machine,
the peaks, every system side by side, all figures, ratios and profiles) and
PREFIX.json (the report itself).
"""

import json
import pathlib


def _fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def _collapse_skips(results):
    """Rows for the table: one row for a workload and dtype that every system skipped alike."""
    groups = {}
    for row in results:
        groups.setdefault((row["workload"], row["dtype"]), []).append(row)
    out = []
    for rows in groups.values():
        reasons = {(r["status"], r.get("reason")) for r in rows}
        if len(rows) > 1 and len(reasons) == 1 and rows[0]["status"] != "ok":
            out.append(dict(rows[0], system="all systems"))
        else:
            out.extend(rows)
    return out


def to_markdown(report):
    peak, machine = report["peak"].get("gflops", {}), report["machine"]
    lines = [
        "# keras_vit benchmark",
        "",
        f"- Date: {report['date']}; command: `{report['command']}`",
        f"- CPU: {', '.join(filter(None, (machine['cpu'], machine.get('cpu_id'))))}"
        f" ({machine['cores']} cores; flags: {' '.join(machine['flags']) or 'n/a'})",
        "- GPU: " + ("; ".join(machine.get("gpus") or []) or "none"),
        "- Versions: " + ", ".join(
            f"{k} {v}" for k, v in machine["versions"].items() if v
        ),
        "- Matmul peak (GFLOP/s, square n x n): " + ", ".join(
            f"{k} {v:.3g} (n={report['peak'].get('sizes', {}).get(k, '?')})"
            for k, v in peak.items()),
        f"- Repetitions: {report['reps']} timed after {report['warmup']} warm-up;"
        " images/s from the median. First = first call (trace/compile + run).",
        "- % peak: of the fastest matmul of the dtype; % own peak: of the system's own"
        " backend's (torch for HF).",
        "",
        "Images/s (peak RSS, MiB), side by side:",
        "",
        side_by_side(report),
        "",
        "All figures:",
        "",
        "| workload | dtype | system | images/s | ms/batch | build (s) | first (s) | peak RSS (MiB)"
        " | GFLOP/s | % peak | % own peak | note |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in _collapse_skips(report["results"]):
        ok = row["status"] == "ok"
        note = "" if ok else f"{row['status']}: {row.get('reason', '')}"[:120]
        if ok and row.get("info", {}).get("jit_compile"):
            note = f"jit_compile={row['info']['jit_compile']}"
        if ok and row.get("outputs_check"):
            note = f"{note} {row['outputs_check']}".strip()
        if ok and row.get("device_peak_mib"):
            note = f"{note} device peak {row['device_peak_mib']:.0f} MiB".strip()
        lines.append(
            f"| {row['workload']} | {row['dtype']} | {row['system']} | "
            f"{_fmt(row.get('images_per_s'), 2)} | "
            f"{_fmt(ok and row['median_s'] * 1e3 or None, 0)} | "
            f"{_fmt(row.get('build_s'))} | {_fmt(row.get('first_s'))} | {_fmt(row.get('peak_rss_mib'), 0)} | "
            f"{_fmt(row.get('gflops'), 0)} | {_fmt(row.get('peak_fraction') and 100 * row['peak_fraction'], 0)} | "
            f"{_fmt(row.get('own_peak_fraction') and 100 * row['own_peak_fraction'], 0)} | {note} |"
        )
    if report.get("ratios"):
        lines += ["", "| workload | dtype | ratio | value |", "|---|---|---|---:|"]
        lines += [f"| {r['workload']} | {r['dtype']} | {r['ratio']} | {r['value']:.2f} |"
                  for r in report["ratios"]]
    for row in report["results"]:
        profile = row.get("info", {}).get("profile") if row["status"] == "ok" else None
        if profile:
            lines += ["", f"Profile of one step, {row['workload']} {row['dtype']} {row['system']}"
                      " (torch.profiler, self CPU time):", "",
                      "| operator | self ms | share | calls |", "|---|---:|---:|---:|"]
            lines += [f"| `{p['op']}` | {p['self_ms']:.1f} | {100 * p['share']:.0f}% | {p['calls']} |"
                      for p in profile]
    return "\n".join(lines) + "\n"


def side_by_side(report):
    """Images/s (peak RSS MiB) of every system, one column per workload and dtype."""
    results = [r for r in report["results"] if r["status"] == "ok"]
    columns = list(dict.fromkeys((r["workload"], r["dtype"]) for r in results))
    systems = list(dict.fromkeys(r["system"] for r in results))
    cell = {(r["system"], r["workload"], r["dtype"]): r for r in results}
    lines = ["| system | " + " | ".join(f"{w} {d}" for w, d in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for system in systems:
        values = []
        for workload, dtype in columns:
            row = cell.get((system, workload, dtype))
            values.append("" if row is None else
                          f"{row['images_per_s']:.2f} ({row['peak_rss_mib']:.0f})")
        lines.append(f"| {system} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def write_report(report, prefix):
    """Writes PREFIX.json and PREFIX.md."""
    output = pathlib.Path(prefix)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_name(output.name + ".json").write_text(json.dumps(report, indent=1))
    title, rest = to_markdown(report).split("\n", 1)
    # The page links the figures it was made from (the docs keep no JSON
    # file that no page names).
    link = f"All figures as JSON: [{output.name}.json]({output.name}.json)."
    output.with_name(output.name + ".md").write_text(f"{title}\n\n{link}\n{rest}")
