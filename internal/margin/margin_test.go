package margin

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	rows := []Row{
		{Level: "c8", Rank: 1, Cause: "admission wait", Rule: "BEHIND_FF", Figure: 0.44, Threshold: 0.5},      // 12 % off: not near
		{Level: "c8", Rank: 2, Cause: "busy thread", Rule: "BUSY_THREAD", Figure: 0.9, Threshold: 0.85},       // 5.9 %: near
		{Level: "c32", Rank: 1, Cause: "slow worker: w1", Rule: "SLOW_WORKER", Figure: 1.506, Threshold: 1.5}, // 0.4 %: near
		{Level: "c32", Rank: 1, Cause: "GPU-bound", Rule: "GPU_BOUND_BUSY", Figure: 0.3, Threshold: 0.5},      // 40 %: not near
	}
	if !(Row{Figure: 0.4501, Threshold: 0.5}).IsNear() || (Row{Figure: 0.44, Threshold: 0.5}).IsNear() {
		t.Error("IsNear: 0.4501 against 0.5 is within 10 %, 0.44 is not")
	}
	errs := Check("fx", rows, nil)
	if len(errs) != 2 || !strings.Contains(errs[0], "busy thread") || !strings.Contains(errs[1], "slow worker") {
		t.Errorf("Check without exemptions = %q, want the busy thread and the slow worker", errs)
	}
	ex := []Exempt{{"fx", "c8", 2, "busy thread", "BUSY_THREAD", "why"}, {"fx", "c32", 1, "slow worker: w1", "SLOW_WORKER", "why"}}
	if errs := Check("fx", rows, ex); len(errs) != 0 {
		t.Errorf("Check with both exempt = %q, want none", errs)
	}
	stale := append(ex, Exempt{"fx", "c8", 1, "admission wait", "BEHIND_FF", "was near once"})
	if errs := Check("fx", rows, stale); len(errs) != 1 || !strings.Contains(errs[0], "remove the exemption") {
		t.Errorf("Check with a stale exemption = %q, want it named", errs)
	}
	if errs := Check("other", rows, ex); len(errs) != 2 {
		t.Errorf("another fixture's exemptions apply: %q", errs)
	}
}

func TestMask(t *testing.T) {
	text := "level  rank  cause  explains  evidence\n" +
		"c=8       1  admission wait      84 %  waiting\n" +
		"c=8       2  busy thread          -  asr-sched at 90 %\n" +
		"c=32      1  busy thread          -  asr-sched at 99 %\n" +
		"c=64      1  admission wait      84 %  waiting\n" +
		"advice\n" +
		"c=64   admission wait   -   none suggested\n" +
		"c=32   busy thread   -   none suggested\n"
	got := Mask(text, "fx", []Exempt{{"fx", "c8", 2, "busy thread", "BUSY_THREAD", "at 0.90 of a core"}, {"other", "c32", 1, "busy thread", "BUSY_THREAD", "x"},
		{"fx", "c32", 2, "busy thread", "BUSY_THREAD", "rank 2 at c=32: no such row"}, {"fx", "c64", 1, "admission wait", "BEHIND_FF", "45 %"}})
	want := "level  rank  cause  explains  evidence\n" +
		"c=8       1  admission wait      84 %  waiting\n" +
		"c=8  [not asserted: busy thread, decided by BUSY_THREAD within 10 % of its threshold: at 0.90 of a core]\n" +
		"c=32      1  busy thread          -  asr-sched at 99 %\n" +
		"c=64  [not asserted: admission wait, decided by BEHIND_FF within 10 % of its threshold: 45 %]\n" +
		"advice\n" +
		"c=64  [not asserted: admission wait, decided by BEHIND_FF within 10 % of its threshold: 45 %]\n" +
		"c=32   busy thread   -   none suggested\n"
	if got != want {
		t.Errorf("Mask:\n%s\nwant\n%s", got, want)
	}
}

func TestParse(t *testing.T) {
	doc := `{"tables":[{"name":"bottleneck","columns":["level"],"rows":[["c8"]]},{"name":"margins","columns":["level","rank","cause","rule","figure","threshold","margin"],"rows":[["c8",2,"busy thread","BUSY_THREAD",0.9,0.85,0.0588]]}]}`
	rows, err := Parse(doc)
	if err != nil || len(rows) != 1 || rows[0] != (Row{"c8", 2, "busy thread", "BUSY_THREAD", 0.9, 0.85}) {
		t.Errorf("Parse = %+v, %v", rows, err)
	}
	if _, err := Parse(`{"tables":[]}`); err == nil {
		t.Error("Parse of output without a margins table: no error")
	}
}
