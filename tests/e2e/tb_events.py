"""tests/e2e/tb_events.py DIR LOSSES STEPS: zinfrun's TensorBoard event
files in DIR, read by the tensorboard package's EventAccumulator (the
reader TensorBoard itself uses), against the --losses file LOSSES of the
same runs: every train/loss and eval/loss scalar equals the file's value
at its step (f32 rounding), the training steps are 1..STEPS, train/lr
rises through the plan's warmup, and the perf, busy and bytes tags have a
value at every step. Exit 0 when all hold."""
import sys

from tensorboard.backend.event_processing import event_accumulator


def main(tb_dir, losses_path, steps):
    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    want = {"train/loss", "train/grad_norm", "train/lr", "eval/loss", "perf/tokens_per_s", "perf/tflops_per_rank",
            "perf/step_ms", "perf/step_ms_predicted", "busy_ms/compute", "busy_ms/comm", "bytes/comm", "bytes/h2d"}
    missing = want - tags
    if missing:
        print("FAIL: tags missing: %s (have %s)" % (sorted(missing), sorted(tags)))
        return 1
    train, evals = {}, {}
    for line in open(losses_path):
        f = line.split()
        if f[0] == "step":
            train[int(f[1])] = (float(f[3]), float(f[5]))
        elif f[0] == "eval":
            evals[int(f[2])] = float(f[4])
    bad = 0
    got = {e.step: e.value for e in acc.Scalars("train/loss")}
    if sorted(got) != list(range(1, steps + 1)) or sorted(train) != sorted(got):
        print("FAIL: train/loss steps %s, the --losses file's %s" % (sorted(got), sorted(train)))
        return 1
    for s, v in sorted(got.items()):
        if abs(v - train[s][0]) > 1e-6 * abs(train[s][0]):
            print("FAIL: step %d: train/loss %r, --losses %r" % (s, v, train[s][0]))
            bad = 1
    gn = {e.step: e.value for e in acc.Scalars("train/grad_norm")}
    for s in got:
        if abs(gn[s] - train[s][1]) > 1e-6 * abs(train[s][1]):
            print("FAIL: step %d: train/grad_norm %r, --losses %r" % (s, gn[s], train[s][1]))
            bad = 1
    ev = {e.step: e.value for e in acc.Scalars("eval/loss")}
    if sorted(ev) != sorted(evals):
        print("FAIL: eval/loss at steps %s, the --losses file's at %s" % (sorted(ev), sorted(evals)))
        return 1
    for s, v in ev.items():
        if abs(v - evals[s]) > 1e-6 * abs(evals[s]):
            print("FAIL: eval step %d: %r against %r" % (s, v, evals[s]))
            bad = 1
    lr = [e.value for e in acc.Scalars("train/lr")]
    if not (len(lr) == steps and all(x > 0 for x in lr)):
        print("FAIL: train/lr %s" % lr)
        bad = 1
    for tag in ("perf/tokens_per_s", "perf/step_ms", "busy_ms/compute"):
        vals = acc.Scalars(tag)
        if len(vals) != steps or not all(e.value > 0 for e in vals):
            print("FAIL: %s: %s" % (tag, [e.value for e in vals]))
            bad = 1
    if not bad:
        print("ok   tensorboard read %d steps and %d evaluations from %d tags; train/loss %.4f -> %.4f, "
              "eval/loss %s, lr %.3g -> %.3g, all equal to the --losses file"
              % (steps, len(ev), len(tags), got[1], got[steps], " ".join("%.4f" % ev[s] for s in sorted(ev)), lr[0], lr[-1]))
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
