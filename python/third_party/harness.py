"""The shared part of the third-party checks (docs/third_party.md): each check
is one library operator mapped onto one conform op and format, judged through
a case set (python/conform_cases.py judge); the results are printed as the
Markdown rows of docs/third_party.md and compared with the verdicts recorded
there (EXPECTED in each script), so that CTest notices when a verdict moves.

    python3 python/third_party/onnxruntime_check.py --conform build/conform [--only KEY] [--cases N] [--shard I/N]
                                                    [--json FILE] [--keep] [--record]

Exit status: 0 every verdict as recorded (or nothing recorded: the GPU
script); 1 some verdict differs (printed); 77 the library is not importable
(a CTest skip).
"""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import conform_cases  # noqa: E402

CASES = 50  # per property: the figure docs/third_party.md was measured with
SEED = 1


class Check:
    """One row: `name` the library's operator as used, mapped onto conform `op` in `dtype`."""

    def __init__(self, name, op, dtype, fn, conventions=None, domain=None, unwritten=None, note="", cases=None,
                 weight=1, group=None, profile=None):
        self.name, self.op, self.dtype, self.fn, self.cases, self.weight = name, op, dtype, fn, cases, weight
        # Checks of one group share a shard: they call one compiled function on the
        # same shapes (a JIT compiles each shape once per process).
        self.group = group
        self.conventions, self.domain, self.unwritten, self.note = conventions, domain, unwritten, note
        self.profile = profile  # the accuracy profile claimed (e.g. "strict+ftz"); None: strict

    def key(self):
        declared = ["%s=%s" % kv for kv in sorted((self.conventions or {}).items())]
        declared += ["profile=" + self.profile] if self.profile else []
        return "%s/%s%s" % (self.name, self.dtype, " " + ",".join(declared) if declared else "")


def host_isa():
    """The widest x86-64 vector extension the host offers ("avx512", "avx2",
    "other"), read from /proc/cpuinfo: a CPU library picks its kernels by it
    (ONNX Runtime's MLAS does), so a verdict may be recorded per ISA."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"


def expected_on(expected, by_isa, isa):
    """The verdicts recorded for this host: `expected` (measured on AVX-512)
    with the rows `by_isa[isa]` records differently on that ISA."""
    merged = dict(expected or {})
    merged.update((by_isa or {}).get(isa, {}))
    return merged


def shard_of(checks, shards):
    """The shard of each check: its group (a check without one is its own), the
    heaviest group first, onto the least loaded shard (deterministic)."""
    groups = {}
    for i, c in enumerate(checks):
        groups.setdefault(c.group if c.group is not None else ("check", i), []).append(i)
    weight = {g: sum(checks[i].weight for i in members) for g, members in groups.items()}
    load, out = [0] * shards, [0] * len(checks)
    for g in sorted(groups, key=lambda g: (-weight[g], groups[g][0])):
        shard = min(range(shards), key=lambda s: (load[s], s))
        load[shard] += weight[g]
        for i in groups[g]:
            out[i] = shard
    return out


def _short(message, limit=400):
    message = " ".join(message.split())
    return message if len(message) <= limit else message[:limit] + " ..."


def run_checks(checks, expected, library, argv=None, by_isa=None):
    parser = argparse.ArgumentParser(description=library + " through conform case sets")
    parser.add_argument("--conform", default="conform")
    parser.add_argument("--only", action="append", default=[], help="a check's key (repeatable)")
    parser.add_argument("--cases", type=int, help="per property (default: each check's own, CASES unless it says)")
    parser.add_argument("--record", action="store_true", help="print the EXPECTED dict of these verdicts")
    parser.add_argument("--json", help="write every verdict with its first failure here")
    parser.add_argument("--keep", action="store_true", help="keep the case set of each failing check (--json names it)")
    parser.add_argument("--shard", default="0/1", help="I/N: only every N-th check from the I-th (CTest's time limit)")
    args = parser.parse_args(argv)
    results, differ = {}, []
    isa = host_isa()
    expected = expected_on(expected, by_isa, isa)
    if by_isa:  # the CPU libraries: which record holds here
        print("%s on a host with %s: verdicts compared with those recorded for it" % (library, isa), file=sys.stderr)
    shard, shards = (int(v) for v in args.shard.split("/"))
    mine = shard_of(checks, shards)
    for i, c in enumerate(checks):
        if (args.only and c.key() not in args.only) or mine[i] != shard:
            continue
        cases = args.cases or c.cases or CASES
        v = conform_cases.judge(c.op, c.dtype, c.fn, cases=cases, seed=SEED, conform=args.conform,
                                conventions=c.conventions, profile=c.profile, domain=c.domain, unwritten=c.unwritten,
                                impl=library)
        verdicts = {name: status for name, status, _ in v.properties}
        results[c.key()] = {"op": c.op, "dtype": c.dtype, "isa": isa, "cases_per_property": cases, "verdicts": verdicts,
                            "cases": v.summary,
                            "first_failure": v.first_failure, "note": c.note, "work": v.work}
        cells = ", ".join("%s %s" % (n, s) for n, s in verdicts.items())
        tally = re.sub(r", 0 [a-z ]+", "", re.sub(r" \([^)]*\)", "", v.summary))
        print("| %s | `%s` %s | %s | %s | %s |" % (c.key(), c.op, c.dtype, cells, tally,
                                                 "-" if v.passed else _short(v.first_failure or "")))
        sys.stdout.flush()
        if expected and not args.cases and expected.get(c.key()) != verdicts:  # recorded at each check's count
            differ.append("%s: recorded %s, measured %s" % (c.key(), expected.get(c.key()), verdicts))
        if v.passed or not args.keep:
            conform_cases.shutil.rmtree(v.work, ignore_errors=True)
        if args.json:  # after every check: an interrupted run keeps what it measured
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    if args.record:
        print(json.dumps({k: r["verdicts"] for k, r in results.items()}, indent=1))
    for d in differ:
        print("DIFFERS " + d)
    return 1 if differ else 0


def _self_test():
    """The per-ISA record and the sharding, without a library or conform."""
    base = {"A/fp32": {"p": "PASS"}, "B/fp32": {"p": "PASS"}}
    by_isa = {"avx2": {"B/fp32": {"p": "FAIL"}}}
    assert expected_on(base, by_isa, "avx2") == {"A/fp32": {"p": "PASS"}, "B/fp32": {"p": "FAIL"}}
    assert expected_on(base, by_isa, "avx512") == base and expected_on(base, None, "avx2") == base
    assert base["B/fp32"] == {"p": "PASS"}, "the record itself is not changed"
    assert host_isa() in ("avx512", "avx2", "other")
    checks = [Check("X%d" % i, "silu", "fp32", None, weight=w, group=g)
              for i, (w, g) in enumerate([(4, None), (1, "j"), (1, "j"), (2, None), (1, None)])]
    shards = shard_of(checks, 2)
    assert shards[1] == shards[2], "a group shares a shard"
    assert shards == shard_of(checks, 2), "deterministic"
    assert sorted(set(shards)) == [0, 1]
    print("harness self-test: ok (host %s)" % host_isa())


if __name__ == "__main__" and sys.argv[1:] == ["--self-test"]:
    _self_test()
