#!/usr/bin/env python3
"""The calibration table for docs/CAPACITY.md from tools/calibrate.sh's
calibration.tsv: a markdown row a prediction, then the claim line that
internal/doccheck's TestCalibration reads (coverage, median absolute
error of the central value)."""
import re
import statistics
import sys

rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print("| model | server state | knob | level | predicted ratio [lo–hi] | judged against | measured ratio | inside | inside [lo–hi] alone | scored | runs A / B (req/s) | load |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
inside, alone, errs = 0, 0, []
for r in rows:
    name, flags, lv, cause, knob, pred, meas, judged, ins, load, runs = (r + [""] * 11)[:11]
    if pred == "-":
        continue
    model = cause.replace(" (model)", "")
    p = float(pred.split(" ")[0])
    lo, hi = [float(x) for x in pred.split("[")[1].rstrip("]").split("–")]
    in_alone = lo <= float(meas) <= hi
    alone += in_alone
    errs.append(abs(float(meas) / p - 1) * 100)
    inside += ins == "yes"
    runs = re.sub(r"\[([^]]*)\]", lambda m: " ".join("%.3f" % float(x) for x in m.group(1).replace(",", " ").split()), runs)
    print("| %s | `%s` (%s) | %s | %s | ×%s | %s | ×%s | %s | %s | yes | %s | %s |" % (model, name, flags, knob, lv, pred, judged, meas, ins, "yes" if in_alone else "no", runs, load))
n = len(errs)
print()
print("<!-- calibration: coverage %d of %d; median abs error %.1f %% -->" % (inside, n, statistics.median(errs) if errs else 0))
print("Coverage: %d of %d (%.0f %%) inside the judged interval; %d of %d (%.0f %%) inside the advice's own interval, without the A/A floor; median absolute error of the central ratio %.1f %%." % (
    inside, n, 100 * inside / max(n, 1), alone, n, 100 * alone / max(n, 1), statistics.median(errs) if errs else 0))
