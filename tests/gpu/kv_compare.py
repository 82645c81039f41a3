#!/usr/bin/env python3
"""tests/gpu/kv_compare.py TOL REF_NAME REF_TOKENS REF_LOGITS NAME TOKENS LOGITS

Compares two zinfgen greedy runs of one plan and prompt (`--prompt-ids ...
--temperature 0 --logits FILE`): the reference (the host backend's KV
decoder) and another (the KV decoder or the window on the CUDA backend).

Both runs see the same prefix up to the first token where they differ, so
the logits are compared position by position up to and including that
token: the largest difference over the largest |logit| must be at most
TOL. A differing token is accepted only where the reference's two likeliest
tokens were that close (a near tie, which a different order of summation
may tip); after it the runs continue from different prefixes and are not
compared. Prints one line of figures; exit 0 when they agree, 1 when not,
2 on unreadable input.
"""
import sys


def read_tokens(path):
    with open(path) as f:
        return [int(t) for t in f.read().split()]


def read_logits(path):
    with open(path) as f:
        return [[float(x) for x in line.split()] for line in f if line.strip()]


def main(argv):
    if len(argv) != 8:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    tol = float(argv[1])
    try:
        ref_tok, got_tok = read_tokens(argv[3]), read_tokens(argv[6])
        ref_log, got_log = read_logits(argv[4]), read_logits(argv[7])
    except (OSError, ValueError) as e:
        print("kv_compare: %s" % e)
        return 2
    ref_name, name = argv[2], argv[5]
    n = min(len(ref_tok), len(got_tok))
    if n == 0 or len(ref_log) < n or len(got_log) < n:
        print("kv_compare: FAIL: %s made %d tokens (%d logit rows), %s %d (%d)"
              % (ref_name, len(ref_tok), len(ref_log), name, len(got_tok), len(got_log)))
        return 1
    first_diff = next((i for i in range(n) if ref_tok[i] != got_tok[i]), n)
    last = min(first_diff, n - 1)
    worst, big = 0.0, 0.0
    for i in range(last + 1):
        a, b = ref_log[i], got_log[i]
        if len(a) != len(b):
            print("kv_compare: FAIL: logit rows of %d and %d numbers" % (len(a), len(b)))
            return 1
        big = max(big, max(abs(x) for x in a))
        worst = max(worst, max(abs(x - y) for x, y in zip(a, b)))
    rel = worst / big if big > 0 else worst
    ok = rel <= tol and len(ref_tok) == len(got_tok)
    tie = ""
    if first_diff < n:
        top = sorted(ref_log[first_diff], reverse=True)
        gap = (top[0] - top[1]) / big if big > 0 else 0.0
        tie = "; token %d differs where the %s's two likeliest were %.2e apart (a near tie)" % (first_diff + 1, ref_name, gap)
        if gap > 2 * tol:
            ok = False
            tie = "; token %d differs where the %s's two likeliest were %.2e apart (no tie)" % (first_diff + 1, ref_name, gap)
    print("%s: %s = %s on %d of %d tokens, logits within %.2e of the largest |logit| %.3g (tolerance %.0e)%s"
          % ("ok" if ok else "FAIL", name, ref_name, first_diff, n, rel, big, tol, tie))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
