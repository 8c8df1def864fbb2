"""The summary table of a GPU validation run: one row per gemm case with its status, the fused
path's ratio to the best alternative, what the fused implementation executed, the chosen
algorithm (id, split-K, workspace), errors and drift. Reads DIR/results.json (or results.jsonl
of a run that did not finish) and writes Markdown to stdout."""

import json
import pathlib
import sys


def rows_of(folder: pathlib.Path) -> list:
    final = folder / "results.json"
    if final.exists():
        return json.loads(final.read_text()).get("cases", [])
    lines = (folder / "results.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def row_line(row: dict) -> str:
    m = row.get("metrics") or {}
    impls = m.get("impls") or {}
    fused = m.get("fused_impl") or ("lt_epilogue" if "lt_epilogue" in impls else "")
    entry = impls.get(fused) or {}
    algo = entry.get("algo") or {}
    ratio = m.get("fused_vs_best_alternative")
    ratio_text = "n/a (fell back)" if fused and ratio is None and "fused_executed" in m else (
        f"{ratio:.3f}" if isinstance(ratio, (int, float)) else "")
    algorithm = (f"id {algo.get('id')} splitk {algo.get('splitk_num')} ws {algo.get('workspace_bytes')}"
                 if algo else "")
    errors = "; ".join(f"{name}: {e.get('max_abs_err'):.3g}" for name, e in sorted(impls.items())
                       if isinstance(e.get("max_abs_err"), (int, float)))
    drift = ", ".join(f"{name} ({d.get('max_ulp_vs_pinned')} ulp)"
                      for name, d in sorted((m.get("drift") or {}).items()))
    executed = entry.get("executed", "")
    if entry.get("fallback_reason"):
        executed += f" ({entry['fallback_reason']})"
    message = row.get("message", "") if row.get("status") != "pass" else ""
    return "| " + " | ".join(cell(x) for x in (
        row.get("id", "?"), row.get("status", "?"), ratio_text, executed, algorithm, errors,
        drift or "none", message)) + " |"


def main(argv: list) -> int:
    if len(argv) != 2:
        print("usage: gpu_summary.py REPORT_DIR", file=sys.stderr)
        return 2
    rows = [r for r in rows_of(pathlib.Path(argv[1])) if r.get("kind") == "gemm"]
    print("| case | status | fused/best | executed | algorithm | max abs error | drift | message |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row_line(row))
    counts = {}
    for row in rows:
        counts[row.get("status")] = counts.get(row.get("status"), 0) + 1
    print()
    print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no gemm cases")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
