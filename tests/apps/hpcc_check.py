#!/usr/bin/env python3
"""Judges one HPC Challenge output file (hpccoutf.txt) by HPCC's own verification.

    hpcc_check.py FILE NP       prints "ok" or one line per failed check; exit 0 only if every check passed
    hpcc_check.py --selftest FILE NP
                                FILE must pass; then damaged copies of it (one per check) must each fail

Every kernel that moves data between ranks checks its result: HPL's scaled residual, PTRANS's residual,
MPIRandomAccess's error count (a lost or doubled update is an error), MPIFFT's error against the inverse
transform, and the "Node(s) with error" lines each section prints. A transport that loses, duplicates or
corrupts a message shows up in at least one of them. The self-test proves each check can fail, so a run
cannot pass because a pattern no longer matches HPCC's output.
"""
import re
import sys

# MPIFFT's maxErr on a healthy run is ~1e-15; one wrong element makes it O(1).
FFT_MAX_ERR = 1e-8


def summary(text):
    m = re.search(r"^Begin of Summary section\.\n(.*?)^End of Summary section\.", text, re.M | re.S)
    if not m:
        return None
    out = {}
    for line in m.group(1).splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def section(text, name):
    m = re.search(rf"^Begin of {name} section\.\n(.*?)^End of {name} section\.", text, re.M | re.S)
    return m.group(1) if m else None


def residual_checks(body):
    """HPL and PTRANS end with 'N tests completed and passed/failed residual checks'."""
    if body is None:
        return None
    passed = re.search(r"(\d+) tests completed and passed residual checks", body)
    failed = re.search(r"(\d+) tests completed and failed residual checks", body)
    if not passed or not failed:
        return None
    return int(passed.group(1)), int(failed.group(1))


def number(s, key):
    try:
        return float(s[key])
    except (KeyError, ValueError):
        return None


def check(text, np):
    errors = []
    s = summary(text)
    if s is None:
        return ["no summary section (HPCC did not finish)"]
    if s.get("CommWorldProcs") != str(np):
        errors.append(f"CommWorldProcs={s.get('CommWorldProcs')}, expected {np}")
    if s.get("Success") != "1":
        errors.append(f"Success={s.get('Success')} (HPCC counted a failure)")
    for name in ("HPL", "PTRANS"):
        r = residual_checks(section(text, name))
        if r is None:
            errors.append(f"{name}: no residual-check count in its section")
        elif r[0] < 1 or r[1] != 0:
            errors.append(f"{name}: {r[0]} passed, {r[1]} failed residual checks")
    if section(text, "HPL") is not None and "FAILED" in section(text, "HPL"):
        errors.append("HPL: a residual check printed FAILED")
    for key in ("MPIRandomAccess_Errors", "MPIRandomAccess_LCG_Errors"):
        v = number(s, key)
        if v is None:
            errors.append(f"{key} missing")
        elif v != 0:
            errors.append(f"{key}={s[key]} (updates lost or applied twice)")
    v = number(s, "MPIFFT_maxErr")
    if v is None or not v < FFT_MAX_ERR:
        errors.append(f"MPIFFT_maxErr={s.get('MPIFFT_maxErr')} (limit {FFT_MAX_ERR})")
    bad_nodes = re.findall(r"^Node\(s\) with error (\d+)", text, re.M)
    if not bad_nodes:
        errors.append("no 'Node(s) with error' lines")
    elif any(n != "0" for n in bad_nodes):
        errors.append(f"'Node(s) with error' non-zero: {sorted(set(n for n in bad_nodes if n != '0'))}")
    return errors


def damaged(text):
    """One damaged copy per check: (what was damaged, text)."""
    sub = lambda pat, rep: re.sub(pat, rep, text, count=1, flags=re.M)  # noqa: E731
    return [
        ("summary cut off", text.split("Begin of Summary section.")[0]),
        ("Success=0", sub(r"^Success=1$", "Success=0")),
        ("wrong rank count", sub(r"^CommWorldProcs=\d+$", "CommWorldProcs=999")),
        ("HPL residual failed", re.sub(r"(Begin of HPL section\..*?)0 tests completed and failed",
                                       r"\g<1>1 tests completed and failed", text, count=1, flags=re.S)),
        ("PTRANS residual failed", re.sub(r"(Begin of PTRANS section\..*?)0 tests completed and failed",
                                          r"\g<1>2 tests completed and failed", text, count=1, flags=re.S)),
        ("RandomAccess errors", sub(r"^MPIRandomAccess_Errors=0$", "MPIRandomAccess_Errors=17")),
        ("RandomAccess LCG errors", sub(r"^MPIRandomAccess_LCG_Errors=0$", "MPIRandomAccess_LCG_Errors=3")),
        ("FFT error", sub(r"^MPIFFT_maxErr=.*$", "MPIFFT_maxErr=0.5")),
        ("a node with errors", sub(r"^Node\(s\) with error 0$", "Node(s) with error 1")),
    ]


def main(argv):
    selftest = argv[1:2] == ["--selftest"]
    args = argv[2:] if selftest else argv[1:]
    if len(args) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    path, np = args[0], int(args[1])
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError as e:
        print(f"cannot read {path}: {e}")
        return 1
    errors = check(text, np)
    if not selftest:
        print("ok" if not errors else "\n".join(errors))
        return 0 if not errors else 1
    if errors:
        print("selftest: the undamaged file does not pass: " + "; ".join(errors))
        return 1
    missed = [what for what, t in damaged(text) if t == text or not check(t, np)]
    for what in missed:
        print(f"selftest: damage not caught (or pattern absent from the file): {what}")
    if not missed:
        print(f"selftest: all {len(damaged(text))} kinds of damage caught")
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
