#!/usr/bin/env python3
"""The paged decode runs of tools/device/paged3.sh side by side.

Reads the bench log (runs of `bench_cuda --suite serving`, each after a
line `## tiles paged=P args=...`; P is "auto" for the plan's own choice or
the forced paged tile) and prints, per (paged tile, split setting), one line
per decode case: the median ms of the runs, and in brackets the contiguous
rows' share of the copy bandwidth or the paged rows' speed against the
contiguous row of the same batch and settings.
"""
import re
import statistics
import sys


def main(path):
    rows, copy, tiles = {}, [], "?"
    for line in open(path):
        m = re.match(r"## tiles paged=(\S+)", line)
        if m:
            tiles = m.group(1)
            continue
        m = re.match(r"serving suite: device copy bandwidth ([0-9.]+) TB/s", line)
        if m:
            copy.append(float(m.group(1)))
            continue
        m = re.match(r"serving\s+cuda_sm80_tc\s+(decode .*?)\s+ms\s+([0-9.]+)\s+K\+V\s+([0-9.]+) TB/s", line)
        if m:
            case = m.group(1)
            sm = re.search(r" splits=(\d+)", case)
            split = sm.group(1) if sm else "-"
            case = re.sub(r" splits=\d+", "", case)
            rows.setdefault((tiles, split, case), []).append((float(m.group(2)), float(m.group(3))))
    cp = statistics.median(copy) if copy else float("nan")
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v), len(v))
           for k, v in rows.items()}

    def batch(case):
        return re.split(r" (?:paged|contiguous|seqused_k)", case)[0]

    print(f"\npaged tile (auto = the plan's), splits (0 = automatic): median ms of the rounds (n) "
          f"[contiguous: of copy {cp:.2f} TB/s; paged: speed / contiguous of the same run settings]")
    groups = []
    for (t, s, _) in med:
        if (t, s) not in groups:
            groups.append((t, s))
    for t, s in groups:
        print(f"paged={t} splits={s}:")
        contig = {batch(c): ms for (tt, ss, c), (ms, _, _) in med.items() if tt == t and ss == s and " paged" not in c}
        for (tt, ss, case), (ms, tb, n) in med.items():
            if (tt, ss) != (t, s):
                continue
            if " paged" in case:
                ref = contig.get(batch(case))
                cell = f"{ms:.4f} ({n}) [{ref / ms:.3f}]" if ref else f"{ms:.4f} ({n})"
            else:
                cell = f"{ms:.4f} ({n}) [{tb / cp:.3f}]"
            print(f"  {case}: {cell}")


if __name__ == "__main__":
    main(sys.argv[1])
