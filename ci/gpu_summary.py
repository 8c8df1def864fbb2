"""The summary table of a GPU validation run: one row per gemm case with its status, the fused
path's ratio to the best alternative (hot, and cold-L2), TFLOP/s of every implementation, what
the fused implementation executed, the chosen algorithm (id, split-K and whether a requested
split-K was applied, workspace), errors and drift. Reads each DIR/results.json (or results.jsonl
of a run that did not finish) and writes Markdown to stdout.
  gpu_summary.py --all-pass DIR...  instead checks that the runs hold at least one case and
                                    that every case passed (a skip counts against it: on a GPU
                                    machine nothing may be skipped for want of one)."""

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
    cold = m.get("fused_vs_best_alternative_cold")
    ratio_text = "n/a (fell back)" if fused and ratio is None and "fused_executed" in m else (
        f"{ratio:.3f}" if isinstance(ratio, (int, float)) else "")
    if ratio_text and isinstance(cold, (int, float)):
        ratio_text += f" (cold {cold:.3f})"
    tflops = "; ".join(f"{name} {e['gflops'] / 1000:.0f}" for name, e in
                       sorted(impls.items(), key=lambda item: -(item[1].get("gflops") or 0))
                       if isinstance(e.get("gflops"), (int, float)) and e["gflops"] > 0)
    algorithm = (f"id {algo.get('id')} tile {algo.get('tile')} splitk {algo.get('splitk_num')} "
                 f"ws {algo.get('workspace_bytes')}" if algo else "")
    # Every configuration that asked for a split-K above 1: did cuBLASLt take it? When it did
    # not, the heuristic's choice ran and no drift between the splits can show.
    pinned = (row.get("params") or {}).get("split_k")
    asked = [algo] if isinstance(pinned, int) and pinned > 1 else []
    asked += [((cf.get("impls") or {}).get(fused) or {}).get("algo") or {}
              for cf in m.get("configs") or [] if (cf.get("split_k") or 0) > 1]
    if asked:
        applied = sum(1 for a in asked if a.get("split_k_forced"))
        algorithm += f"; split-K applied in {applied}/{len(asked)} configurations"
    errors = "; ".join(f"{name}: {e.get('max_abs_err'):.3g}" for name, e in sorted(impls.items())
                       if isinstance(e.get("max_abs_err"), (int, float)))
    drift = ", ".join(f"{name} ({d.get('max_ulp_vs_pinned')} ulp)"
                      for name, d in sorted((m.get("drift") or {}).items()))
    executed = entry.get("executed", "")
    if entry.get("fallback_reason"):
        executed += f" ({entry['fallback_reason']})"
    message = row.get("message", "") if row.get("status") != "pass" else ""
    return "| " + " | ".join(cell(x) for x in (
        row.get("id", "?"), row.get("status", "?"), ratio_text, tflops, executed, algorithm,
        errors, drift or "none", message)) + " |"


def all_pass(folders: list) -> int:
    rows = [r for folder in folders for r in rows_of(pathlib.Path(folder))]
    others = [r for r in rows if r.get("status") != "pass"]
    for row in others:
        print(f"{row.get('id', '?')}: {row.get('status', '?')}: {row.get('message', '')}",
              file=sys.stderr)
    if not rows:
        print(f"no case ran in {', '.join(map(str, folders))}", file=sys.stderr)
    print(f"{len(rows) - len(others)} of {len(rows)} case(s) pass")
    return 0 if rows and not others else 1


def main(argv: list) -> int:
    if len(argv) >= 2 and argv[1] == "--all-pass":
        argv = argv[1:]
        if len(argv) < 2:
            print("usage: gpu_summary.py --all-pass REPORT_DIR...", file=sys.stderr)
            return 2
        return all_pass(argv[1:])
    if len(argv) < 2:
        print("usage: gpu_summary.py [--all-pass] REPORT_DIR...", file=sys.stderr)
        return 2
    rows = [r for folder in argv[1:] for r in rows_of(pathlib.Path(folder))
            if r.get("kind") == "gemm"]
    rows.sort(key=lambda r: r.get("id", ""))
    print("| case | status | fused/best | TFLOP/s | executed | algorithm | max abs error | drift "
          "| message |")
    print("|---|---|---|---|---|---|---|---|---|")
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
