package engine

import (
	"reflect"
	"runtime"
	"testing"

	"github.com/asrprof/asrprof/bundle/columns"
)

// Derive splits the requests over the cores: its rows are those of one
// core, row for row, and requests without telemetry have none.
func TestDeriveParallelAsSerial(t *testing.T) {
	p := &Preset{Name: "e", RequiresEvents: true, Stages: []Stage{
		{Name: "queue", From: Point{Event: "enter"}, To: Point{Event: "start", SameStageAs: "enter"}},
		{Name: "run", From: Point{Event: "start"}, To: Point{Event: "done", Last: true}},
	}}
	const n = 30_011
	var req []int32
	var names []string
	var ts []int64
	for i := range n {
		if i%7 == 3 {
			continue // no events: no rows
		}
		k := []string{"enter", "start", "done", "done"}
		if i%5 == 0 {
			k = k[:2] // no "done": the run stage is null
		}
		for j, name := range k {
			req, names, ts = append(req, int32(i)), append(names, name), append(ts, int64(i)*1e6+int64(j*(i%13+1))*1e5)
		}
	}
	e := &columns.Events{RequestIndex: req, EventName: strs(names...), Stage: strs(make([]string, len(req))...), TimestampNs: ts}
	derive := func(procs int) *columns.StageRows {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		return Derive(p, n, e, nil)
	}
	one, four := derive(1), derive(4)
	if want := 2 * (n - (n+3)/7); one.Len() != want {
		t.Fatalf("%d rows, want %d", one.Len(), want)
	}
	if !reflect.DeepEqual(one, four) {
		t.Fatal("the rows of four cores differ from one core's")
	}
}
