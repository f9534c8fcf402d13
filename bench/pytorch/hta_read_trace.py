"""Reads mantissa's Chrome traces with Holistic Trace Analysis (PyPI: HolisticTraceAnalysis), the tool
written for torch.profiler's traces, as an independent reader: each trace must load, and its CPU ops come back
with their names, durations and call counts.

    python bench/pytorch/hta_read_trace.py TRACE.json [TRACE.json ...]

Prints, per trace, HTA's event count and the five ops with the most time, and exits 1 when HTA cannot read
one. (Run it in the bench environment: scripts/install-deps.sh --bench installs HTA there.)
"""
import os
import shutil
import sys
import tempfile


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    from hta.trace_analysis import TraceAnalysis

    failures = 0
    for path in sys.argv[1:]:
        # HTA reads a folder of traces, one per rank, and takes the rank from distributedInfo.
        with tempfile.TemporaryDirectory() as folder:
            shutil.copy(path, os.path.join(folder, "rank-0.json"))
            try:
                analysis = TraceAnalysis(trace_dir=folder)
                trace = analysis.t.get_trace(0)
                names = analysis.t.symbol_table.get_sym_table()
                trace = trace.assign(op=[names[i] for i in trace["name"]])
                ops = trace[trace["dur"] > 0].groupby("op")["dur"].agg(["count", "sum"]).sort_values("sum", ascending=False)
                print(f"{path}: HTA read {len(trace)} events; the most time (us):")
                print(ops.head(5).to_string())
            except Exception as e:  # what HTA raises on a trace it cannot read varies by version
                print(f"{path}: HTA could not read it: {type(e).__name__}: {e}")
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
