package export

import (
	"bufio"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/join"
	"github.com/asrprof/asrprof/trace/spans"
)

// Event is one Chrome trace event ("JSON Object Format", which Perfetto UI
// and chrome://tracing open). TS and Dur are in microseconds from the
// trace's start.
type Event struct {
	Name string         `json:"name,omitempty"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"` // "X" events only
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	ID   uint64         `json:"id,omitempty"` // flow events
	BP   string         `json:"bp,omitempty"` // "e" on flow ends: bind to the enclosing slice
	Args map[string]any `json:"args,omitempty"`

	tsNs, durNs int64 // unix ns, before rebasing
}

// TraceFile is the whole JSON document.
type TraceFile struct {
	TraceEvents     []Event        `json:"traceEvents"`
	DisplayTimeUnit string         `json:"displayTimeUnit"`
	OtherData       map[string]any `json:"otherData,omitempty"`
}

// Event categories.
const (
	CatRequest = "request" // one request: its client slice (on its slot's track), its root spans on the server, and the arrows between them
	CatClient  = "client"  // upload, wait_first_byte, response inside a request
	CatServer  = "server"  // a server span below a request's root span
	CatStage   = "stage"   // a derived stage (PerfettoInput.Stages)
	CatState   = "state"   // where a request's latency went: its attribution parent slice and one slice per state
)

// PerfettoInput is what BuildPerfetto draws.
type PerfettoInput struct {
	Capture  string
	Manifest model.Manifest
	Requests []model.Request
	Spans    []spans.Span // client and server spans
	Stages   [][]Stage    // per request, may be nil
	// States are, per request, its attribution's states placed over its
	// latency, in time order, tiling it; nil: none drawn.
	States [][]Stage
	GPU    []bundle.GPURecord
	Sched  []bundle.SchedRecord
}

// PerfettoStats counts what BuildPerfetto drew.
type PerfettoStats struct {
	Requests    int            `json:"requests"`
	ClientSlots map[string]int `json:"client_slots"` // level → tracks
	ServerSpans int            `json:"server_spans"`
	StageSlices int            `json:"stage_slices"`
	StateSlices int            `json:"state_slices"` // one per state segment of a request, the requests' parent slices not counted
	Flows       int            `json:"flows"`
	Counters    int            `json:"counters"`      // "C" events
	SchedSkip   int            `json:"sched_skipped"` // rows whose pass is not in the manifest or did not end
	StartUnixNs int64          `json:"start_unix_ns"` // what ts 0 is
}

// Attributes of a server span that name the thread that ran it.
const (
	AttrThreadName = "thread.name"
	AttrThreadID   = "thread.id"
)

// drawing accumulates events, processes and threads.
type drawing struct {
	meta    []Event
	events  []Event
	nextPID int
	pids    map[string]int // by name, the processes made by named
}

// qualified is name, then sep and what when there is one.
func qualified(name, sep, what string) string {
	if what == "" {
		return name
	}
	return name + sep + what
}

func (d *drawing) process(name string) int {
	d.nextPID++
	pid := d.nextPID
	d.meta = append(d.meta,
		Event{Name: "process_name", Ph: "M", PID: pid, Args: map[string]any{"name": name}},
		Event{Name: "process_sort_index", Ph: "M", PID: pid, Args: map[string]any{"sort_index": pid}})
	return pid
}

// named is the process called name, made on first use.
func (d *drawing) named(name string) int {
	pid, ok := d.pids[name]
	if !ok {
		pid = d.process(name)
		d.pids[name] = pid
	}
	return pid
}

func (d *drawing) thread(pid, tid int, name string) {
	d.meta = append(d.meta,
		Event{Name: "thread_name", Ph: "M", PID: pid, TID: tid, Args: map[string]any{"name": name}},
		Event{Name: "thread_sort_index", Ph: "M", PID: pid, TID: tid, Args: map[string]any{"sort_index": tid}})
}

func (d *drawing) slice(name, cat string, pid, tid int, start, end int64, args map[string]any) {
	d.events = append(d.events, Event{Name: name, Cat: cat, Ph: "X", PID: pid, TID: tid, tsNs: start, durNs: max(end-start, 0), Args: args})
}

// tracks lays intervals out on as few tracks of pid as keep each track's
// intervals apart (assignSlots), numbered from base+1 and named label, or
// "label #k" when there are several; it returns each interval's track and
// how many there are.
func (d *drawing) tracks(pid, base int, label string, ivs []interval) (tids []int, n int) {
	slot, n := assignSlots(ivs)
	for s := 0; s < n; s++ {
		name := label
		if n > 1 {
			name += " #" + strconv.Itoa(s)
		}
		d.thread(pid, base+s+1, name)
	}
	tids = make([]int, len(slot))
	for j, s := range slot {
		tids[j] = base + s + 1
	}
	return tids, n
}

// BuildPerfetto lays a capture out as trace events:
//
//   - a process per level ("client c8") with one track per in-flight slot:
//     each request goes to the lowest slot free at its start, so a track's
//     request slices never overlap; a request slice (named by its sample id)
//     holds upload, wait_first_byte and response slices;
//   - a process per server service ("server: vllm") with a track per server
//     thread when spans carry thread.name or thread.id, else per span name;
//     a track that would overlap itself is split into "name #k" tracks the
//     same way as client slots;
//   - flow arrows from each request slice to the top-level server spans of
//     its trace;
//   - the derived stages (Stages), per stage name, under "stages (derived)";
//   - where each request's time went (States): a process per level
//     ("where the time went c8") with the same slot tracks as its client
//     process; each request a slice over its latency, named by its sample
//     id, holding one slice per state;
//   - counters: per GPU utilization, memory and power; per thread CPU
//     utilization (cores) of each pass, a step from the pass's start to its
//     end.
//
// Timestamps count from the capture's start, or from the earliest event
// when something (a server clock ahead of ours) starts before it. Metadata
// events come first, the others in timestamp order.
func BuildPerfetto(in PerfettoInput) (*TraceFile, PerfettoStats) {
	st := PerfettoStats{ClientSlots: map[string]int{}}
	d := &drawing{pids: map[string]int{}}
	ix := join.Build(in.Requests, in.Spans, nil)

	// Clients: a process per level, in the order the levels ran (then
	// those only requests name).
	var levels []string
	for _, l := range in.Manifest.Levels {
		if !slices.Contains(levels, l.Level) {
			levels = append(levels, l.Level)
		}
	}
	byLevel := map[string][]int{}
	for i, r := range in.Requests {
		if _, ok := byLevel[r.Level]; !ok && !slices.Contains(levels, r.Level) {
			levels = append(levels, r.Level)
		}
		byLevel[r.Level] = append(byLevel[r.Level], i)
	}
	type track struct{ pid, tid int }
	reqTrack := make([]track, len(in.Requests))
	for _, lv := range levels {
		idx := byLevel[lv]
		if len(idx) == 0 {
			continue
		}
		pid := d.process(qualified("client", " ", lv))
		ivs := make([]interval, len(idx))
		for k, i := range idx {
			r := &in.Requests[i]
			ivs[k] = interval{r.StartUnixNs, r.EndUnixNs}
		}
		slot, n := assignSlots(ivs)
		st.ClientSlots[lv] = n
		for s := 0; s < n; s++ {
			d.thread(pid, s+1, "slot "+strconv.Itoa(s))
		}
		for k, i := range idx {
			r := &in.Requests[i]
			tid := slot[k] + 1
			reqTrack[i] = track{pid, tid}
			d.slice(r.SampleID, CatRequest, pid, tid, r.StartUnixNs, r.EndUnixNs, requestArgs(r))
			st.Requests++
			for _, ph := range []struct {
				name     string
				from, to int64
			}{
				{"connect", r.StartUnixNs, r.ConnectedUnixNs},
				{"upload", cmp.Or(r.ConnectedUnixNs, r.StartUnixNs), r.UploadDoneUnixNs},
				{"wait_first_byte", r.UploadDoneUnixNs, r.FirstByteUnixNs},
				{"response", r.FirstByteUnixNs, r.EndUnixNs},
			} {
				if ph.from > 0 && ph.to >= ph.from && ph.from >= r.StartUnixNs && ph.to <= r.EndUnixNs {
					d.slice(ph.name, CatClient, pid, tid, ph.from, ph.to, nil)
				}
			}
		}
	}

	// Servers: which request each server span joined, and whether it is
	// the top of that request's server spans.
	reqOf := map[string]int{}
	top := map[string]bool{}
	for i := 0; i < ix.Len(); i++ {
		ss := ix.ServerSpans(i)
		ids := make(map[string]bool, len(ss))
		for _, s := range ss {
			ids[s.SpanID] = true
		}
		for _, s := range ss {
			k := s.TraceID + "/" + s.SpanID
			if _, dup := reqOf[k]; dup {
				continue
			}
			reqOf[k] = i
			top[k] = !ids[s.ParentSpanID]
		}
	}
	type trackKey struct{ service, key, label string }
	groups := map[trackKey][]int{}
	var keys []trackKey
	for i := range in.Spans {
		s := &in.Spans[i]
		if s.IsClient() {
			continue
		}
		k := trackKey{service: s.Service}
		if v, ok := s.Attrs[AttrThreadName]; ok && fmt.Sprint(v) != "" {
			k.key, k.label = "t:"+fmt.Sprint(v), "thread "+fmt.Sprint(v)
			if id, ok := s.Attrs[AttrThreadID]; ok {
				k.key += "/" + fmt.Sprint(id)
				k.label += " (" + fmt.Sprint(id) + ")"
			}
		} else if id, ok := s.Attrs[AttrThreadID]; ok {
			k.key, k.label = "t:/"+fmt.Sprint(id), "thread "+fmt.Sprint(id)
		} else {
			k.key, k.label = "s:"+s.Name, s.Name
		}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	// By service; thread tracks ("t:") before span-name tracks ("s:"),
	// each by first start.
	slices.SortStableFunc(keys, func(a, b trackKey) int {
		return cmp.Or(strings.Compare(a.service, b.service), cmp.Compare(b.key[0], a.key[0]),
			cmp.Compare(in.Spans[groups[a][0]].StartUnixNs, in.Spans[groups[b][0]].StartUnixNs))
	})
	nextTID := map[int]int{}
	flowID := uint64(0)
	for _, k := range keys {
		pid := d.named(qualified("server", ": ", k.service))
		idx := groups[k]
		ivs := make([]interval, len(idx))
		for j, i := range idx {
			ivs[j] = interval{in.Spans[i].StartUnixNs, in.Spans[i].EndUnixNs}
		}
		tids, n := d.tracks(pid, nextTID[pid], k.label, ivs)
		nextTID[pid] += n
		for j, i := range idx {
			s := &in.Spans[i]
			tid := tids[j]
			args := map[string]any{"trace_id": s.TraceID, "span_id": s.SpanID, "kind": s.Kind, "status": s.StatusCode}
			if s.ParentSpanID != "" {
				args["parent_span_id"] = s.ParentSpanID
			}
			if len(s.Attrs) > 0 {
				args["attrs"] = jsonSafe(s.Attrs)
			}
			sk := s.TraceID + "/" + s.SpanID
			ri, joined := reqOf[sk]
			if joined {
				r := &in.Requests[ri]
				args["request_id"] = r.RequestID
				args["sample_id"] = r.SampleID
			}
			// A request's root span on the server is, like its client
			// slice, of category request: the arrow between them binds to
			// both ends in every viewer, the DevTools trace engine
			// included, which binds a flow event only to a slice of its
			// own category that starts at its timestamp on its thread.
			cat := CatServer
			if joined && top[sk] {
				cat = CatRequest
			}
			d.slice(s.Name, cat, pid, tid, s.StartUnixNs, s.EndUnixNs, args)
			st.ServerSpans++
			if joined && top[sk] {
				r := &in.Requests[ri]
				flowID++
				rt := reqTrack[ri]
				d.events = append(d.events,
					Event{Name: "request", Cat: CatRequest, Ph: "s", PID: rt.pid, TID: rt.tid, ID: flowID, tsNs: r.StartUnixNs},
					Event{Name: "request", Cat: CatRequest, Ph: "f", BP: "e", PID: pid, TID: tid, ID: flowID, tsNs: s.StartUnixNs})
				st.Flows++
			}
		}
	}

	// Derived stages: per stage name, the intervals and their requests.
	ivs, owners := map[string][]interval{}, map[string][]int{}
	var names []string
	for i, ss := range in.Stages {
		for _, s := range ss {
			if _, ok := ivs[s.Name]; !ok {
				names = append(names, s.Name)
			}
			ivs[s.Name] = append(ivs[s.Name], interval{s.StartUnixNs, s.EndUnixNs})
			owners[s.Name] = append(owners[s.Name], i)
		}
	}
	if len(names) > 0 {
		pid := d.process("stages (derived)")
		tid := 0
		for _, name := range names {
			tids, n := d.tracks(pid, tid, name, ivs[name])
			for j, iv := range ivs[name] {
				r := &in.Requests[owners[name][j]]
				d.slice(name, CatStage, pid, tids[j], iv.start, iv.end,
					map[string]any{"request_id": r.RequestID, "sample_id": r.SampleID, "trace_id": r.TraceID})
				st.StageSlices++
			}
			tid += n
		}
	}

	// Where the time went (nothing without States).
	for _, lv := range levels {
		pid := 0 // the level's process, once it has a request with states
		for _, i := range byLevel[lv] {
			if i >= len(in.States) || len(in.States[i]) == 0 {
				continue
			}
			rt := reqTrack[i]
			if pid == 0 {
				pid = d.process(qualified("where the time went", " ", lv))
				for s := 0; s < st.ClientSlots[lv]; s++ {
					d.thread(pid, s+1, "slot "+strconv.Itoa(s))
				}
			}
			r := &in.Requests[i]
			ss := in.States[i]
			d.slice(r.SampleID, CatState, pid, rt.tid, ss[0].StartUnixNs, ss[len(ss)-1].EndUnixNs,
				map[string]any{"request_id": r.RequestID, "sample_id": r.SampleID, "trace_id": r.TraceID, "latency_s": finite(r.LatencyS)})
			for _, s := range ss {
				d.slice(s.Name, CatState, pid, rt.tid, s.StartUnixNs, s.EndUnixNs, map[string]any{"ms": float64(s.EndUnixNs-s.StartUnixNs) / 1e6})
				st.StateSlices++
			}
		}
	}

	// GPU counters.
	for _, g := range in.GPU {
		var name, unit string
		var v float64
		switch {
		case g.GPUUtil != nil:
			name, unit, v = "utilization", "percent", g.UtilPct
		case g.GPUMem != nil:
			name, unit, v = "memory used", "MiB", g.UsedMiB
		case g.GPUPower != nil:
			name, unit, v = "power", "W", g.PowerW
		}
		if name == "" || math.IsNaN(v) || math.IsInf(v, 0) || g.TS <= 0 {
			continue
		}
		pid := d.named("GPU " + strconv.Itoa(g.GPU))
		d.events = append(d.events, Event{Name: name, Ph: "C", PID: pid, tsNs: g.TS, Args: map[string]any{unit: v}})
		st.Counters++
	}

	// Scheduler counters: a step per pass.
	type passKey struct {
		level  string
		repeat int
	}
	passes := map[passKey]model.LevelRun{}
	for _, l := range in.Manifest.Levels {
		passes[passKey{l.Level, l.Repeat}] = l
	}
	for _, r := range in.Sched {
		run, ok := passes[passKey{r.Level, r.Repeat}]
		if !ok || run.StartUnixNs <= 0 || run.EndUnixNs < run.StartUnixNs {
			st.SchedSkip++
			continue
		}
		pid := d.named("threads of pid " + strconv.Itoa(r.PID) + " (sched)")
		name := "cpu " + r.Name + " " + strconv.Itoa(r.TID)
		u := r.Utilization
		if math.IsNaN(u) || math.IsInf(u, 0) {
			u = 0
		}
		d.events = append(d.events,
			Event{Name: name, Ph: "C", PID: pid, tsNs: run.StartUnixNs, Args: map[string]any{"cores": u}},
			Event{Name: name, Ph: "C", PID: pid, tsNs: run.EndUnixNs, Args: map[string]any{"cores": 0.0}})
		st.Counters += 2
	}

	// Rebase and order.
	base := in.Manifest.StartUnixNs
	for _, e := range d.events {
		if base <= 0 || e.tsNs < base {
			base = e.tsNs
		}
	}
	st.StartUnixNs = base
	slices.SortStableFunc(d.events, func(a, b Event) int { return cmp.Compare(a.tsNs, b.tsNs) })
	for i := range d.events {
		e := &d.events[i]
		e.TS = float64(e.tsNs-base) / 1e3
		if e.Ph == "X" {
			dur := float64(e.durNs) / 1e3
			e.Dur = &dur
		}
	}
	return &TraceFile{
		TraceEvents:     append(d.meta, d.events...),
		DisplayTimeUnit: "ms",
		OtherData: map[string]any{
			"asrprof.capture": in.Capture,
			"start_unix_ns":   strconv.FormatInt(base, 10),
		},
	}, st
}

// requestArgs are a request slice's args: the request's fields under
// their requests.jsonl names, derived from the record (model.RequestFields)
// and left out where requests.jsonl leaves them out, but for the
// transcripts (hyp, ref), the lists and the word errors.
func requestArgs(r *model.Request) map[string]any {
	a := map[string]any{}
	v := reflect.ValueOf(r).Elem()
	for _, f := range model.RequestFields {
		fv := v.Field(f.Index)
		switch {
		case f.Name == "hyp" || f.Name == "ref" || f.Kind == model.KindFloats || f.Kind == model.KindStruct:
		case f.OmitEmpty && fv.IsZero():
		case f.Kind == model.KindOptFloat:
			a[f.Name] = finite(fv.Elem().Float())
		case f.Kind == model.KindFloat:
			a[f.Name] = finite(fv.Float())
		default:
			a[f.Name] = fv.Interface()
		}
	}
	return a
}

func finite(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return v
}

// jsonSafe returns v with what encoding/json refuses (NaN, ±Inf) as
// strings and bytes as hex.
func jsonSafe(v any) any {
	switch x := v.(type) {
	case float64:
		return finite(x)
	case []byte:
		return hex.EncodeToString(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonSafe(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonSafe(e)
		}
		return out
	}
	return v
}

// WriteTraceFile writes tf as JSON, one event per line.
func WriteTraceFile(w io.Writer, tf *TraceFile) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.WriteString(`{"traceEvents":[`)
	for i := range tf.TraceEvents {
		b, err := json.Marshal(&tf.TraceEvents[i])
		if err != nil {
			return fmt.Errorf("encoding trace event %d: %w", i, err)
		}
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString("\n")
		bw.Write(b)
	}
	bw.WriteString("\n],\"displayTimeUnit\":")
	b, _ := json.Marshal(tf.DisplayTimeUnit)
	bw.Write(b)
	if tf.OtherData != nil {
		b, err := json.Marshal(tf.OtherData)
		if err != nil {
			return fmt.Errorf("encoding otherData: %w", err)
		}
		bw.WriteString(`,"otherData":`)
		bw.Write(b)
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

// ReadPerfettoInput reads what BuildPerfetto needs from b but the stages
// and states, which the caller derives. Absent files (spans, gpu, sched)
// leave their part empty.
func ReadPerfettoInput(b *bundle.Bundle) (PerfettoInput, error) {
	in := PerfettoInput{Capture: CaptureAttrs(b)[AttrCapture], Manifest: b.Manifest}
	var err error
	if in.Requests, err = columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile)); err != nil {
		return in, fmt.Errorf("reading requests: %w", err)
	}
	if b.Has(bundle.SpansFile) {
		if in.Spans, err = spans.ReadAll(b.Path(bundle.SpansFile)); err != nil {
			return in, fmt.Errorf("reading spans: %w", err)
		}
	}
	if in.GPU, err = bundle.ReadAll[bundle.GPURecord](b.Path(bundle.GPUFile)); err != nil {
		return in, fmt.Errorf("reading %s: %w", bundle.GPUFile, err)
	}
	if in.Sched, err = bundle.ReadAll[bundle.SchedRecord](b.Path(bundle.SchedFile)); err != nil {
		return in, fmt.Errorf("reading %s: %w", bundle.SchedFile, err)
	}
	return in, nil
}
