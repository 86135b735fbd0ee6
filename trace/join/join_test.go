package join

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/events"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/spans"
)

// load runs a fixture through the capture's own path: OTLP JSON into the
// span store, event files imported into events.jsonl, then read back.
func load(t *testing.T, dir string) ([]model.Request, []spans.Span, []bundle.Event) {
	t.Helper()
	var reqs []model.Request
	if _, err := bundle.ReadJSONL(filepath.Join(dir, "requests.jsonl"), func(r model.Request) error {
		reqs = append(reqs, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bw, err := bundle.Create(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer bw.Close()
	var ss []spans.Span
	if b, err := os.ReadFile(filepath.Join(dir, "spans.json")); err == nil {
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		if req.Traces().SpanCount() == 0 {
			t.Fatal("fixture decoded to no spans")
		}
		if err := spans.NewWriter(bw).Write(req.Traces()); err != nil {
			t.Fatal(err)
		}
		if ss, err = spans.ReadAll(bw.Path(bundle.SpansFile)); err != nil {
			t.Fatal(err)
		}
	}
	var evs []bundle.Event
	if _, err := os.Stat(filepath.Join(dir, "events")); err == nil {
		st, err := events.ImportDir(filepath.Join(dir, "events"), bw)
		if err != nil || st.Malformed+st.Truncated != 0 {
			t.Fatalf("importing events: %+v, %v", st, err)
		}
		if evs, err = bundle.ReadAll[bundle.Event](bw.Path(bundle.EventsFile)); err != nil {
			t.Fatal(err)
		}
	}
	return reqs, ss, evs
}

type wantReq struct {
	spans  []string // span names by start time; client ones prefixed "client:"
	events []string // stage/event_name by time
}

func spanNames(ss []spans.Span) []string {
	var out []string
	for _, s := range ss {
		n := s.Name
		if s.IsClient() {
			n = "client:" + n
		}
		out = append(out, n)
	}
	return out
}

func eventNames(evs []bundle.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Stage+"/"+e.EventName)
	}
	return out
}

var (
	refServerSpans = []string{"client:asr.request", "transcription", "build", "queue", "first_forward", "decode"}
	omniEvents     = []string{
		"preprocessing/stage_input_received", "preprocessing/stage_complete",
		"thinker/stage_input_received", "thinker/scheduler_request_build_start", "thinker/scheduler_request_build_end",
		"thinker/scheduler_queue_enter", "thinker/scheduler_prefill_start", "thinker/scheduler_prefill_end",
		"thinker/scheduler_first_emit", "thinker/stage_complete",
	}
)

func TestFixtures(t *testing.T) {
	tests := []struct {
		dir         string
		want        []wantReq // by request index
		stats       Stats
		warn        string // substring; "" means no warning
		checkParent bool
	}{
		{
			dir: "refserver",
			want: []wantReq{
				{spans: refServerSpans},
				{spans: refServerSpans},
				{spans: []string{"client:asr.request"}}, // the server exported nothing for r3
				{spans: refServerSpans},                 // warm-up: joined, not counted
			},
			stats:       Stats{Requests: 3, WithSpans: 2, ServerSpans: 15},
			warn:        "only 67% of requests joined to server spans (2 of 3): does the server propagate traceparent",
			checkParent: true,
		},
		{
			dir: "vllm",
			want: []wantReq{
				{spans: []string{"llm_request"}},
				{spans: []string{"llm_request", "llm_request"}}, // two chunks, one trace
				{spans: []string{"llm_request"}},                // no traceparent: joined by gen_ai.request.id
				{},                                              // failed
			},
			stats: Stats{Requests: 3, WithSpans: 3, ServerSpans: 4},
		},
		{
			dir: "sglang_omni",
			want: []wantReq{
				{events: omniEvents},
				{events: omniEvents}, // no server id: joined by the request id
				{},                   // the profiler missed it
			},
			stats: Stats{Requests: 3, WithEvents: 2, Events: 30},
			warn:  "only 67% of requests joined to server events (2 of 3)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			reqs, ss, evs := load(t, filepath.Join("testdata", tt.dir))
			if len(reqs) != len(tt.want) {
				t.Fatalf("%d requests in fixture, test expects %d", len(reqs), len(tt.want))
			}
			ix := Build(reqs, ss, evs)
			if ix.Len() != len(reqs) {
				t.Errorf("Len() = %d", ix.Len())
			}
			for i, w := range tt.want {
				if got := spanNames(ix.Spans(i)); !reflect.DeepEqual(got, w.spans) {
					t.Errorf("request %s spans %v, want %v", reqs[i].ID, got, w.spans)
				}
				if got := eventNames(ix.Events(i)); !reflect.DeepEqual(got, w.events) {
					t.Errorf("request %s events %v, want %v", reqs[i].ID, got, w.events)
				}
				for _, e := range ix.Events(i) {
					want := reqs[i].ServerRequestID
					if want == "" {
						want = reqs[i].RequestID
					}
					if e.RequestID != want {
						t.Errorf("request %s got event of %s", reqs[i].ID, e.RequestID)
					}
				}
				for _, s := range ix.ServerSpans(i) {
					if id, ok := s.Attrs[AttrGenAIRequestID].(string); ok && !strings.HasPrefix(id, "transcribe-"+reqs[i].RequestID+"_") {
						t.Errorf("request %s got span of %s", reqs[i].RequestID, id)
					}
				}
				if tt.checkParent {
					checkTree(t, ix.Spans(i))
				}
			}
			if got := ix.Stats(); got != tt.stats {
				t.Errorf("stats %+v, want %+v", got, tt.stats)
			}
			w := ix.Stats().Warning()
			if (tt.warn == "") != (w == "") || !strings.Contains(w, tt.warn) {
				t.Errorf("warning %q, want one containing %q", w, tt.warn)
			}
		})
	}
}

// checkTree asserts the reference server's tree: transcription under the
// client's span, the four stages under transcription.
func checkTree(t *testing.T, ss []spans.Span) {
	t.Helper()
	ids := map[string]string{}
	for _, s := range ss {
		ids[s.Name] = s.SpanID
	}
	for _, s := range ss {
		want := ""
		switch s.Name {
		case "transcription":
			want = ids["asr.request"]
			if s.Kind != spans.KindServer {
				t.Errorf("transcription kind %s", s.Kind)
			}
		case "build", "queue", "first_forward", "decode":
			want = ids["transcription"]
		default:
			continue
		}
		if s.ParentSpanID != want || want == "" {
			t.Errorf("%s parent %q, want %q", s.Name, s.ParentSpanID, want)
		}
	}
}

func TestVLLMChunkAttributes(t *testing.T) {
	reqs, ss, evs := load(t, filepath.Join("testdata", "vllm"))
	ix := Build(reqs, ss, evs)
	chunks := ix.Spans(1)
	if len(chunks) != 2 {
		t.Fatalf("%d spans", len(chunks))
	}
	for c, s := range chunks {
		if got, want := s.Attrs[AttrGenAIRequestID], "transcribe-"+reqs[1].RequestID+"_"+string(rune('0'+c)); got != want {
			t.Errorf("chunk %d id %v, want %s", c, got, want)
		}
		for _, k := range []string{"gen_ai.latency.time_in_queue", "gen_ai.latency.time_to_first_token", "gen_ai.latency.time_in_model_prefill", "gen_ai.latency.time_in_model_decode", "gen_ai.latency.e2e"} {
			if _, ok := s.Attrs[k].(float64); !ok {
				t.Errorf("chunk %d: %s = %#v, want a float", c, k, s.Attrs[k])
			}
		}
		if s.TraceID != reqs[1].TraceID {
			t.Errorf("chunk %d in trace %s", c, s.TraceID)
		}
	}
}

func TestWarning(t *testing.T) {
	tests := []struct {
		name string
		s    Stats
		want []string // substrings; none means no warning
	}{
		{"no requests", Stats{ServerSpans: 5}, nil},
		{"no sources", Stats{Requests: 100}, nil},
		{"all joined", Stats{Requests: 100, WithSpans: 100, WithEvents: 100, ServerSpans: 100, Events: 800}, nil},
		{"99 of 100 is enough", Stats{Requests: 100, WithSpans: 99, ServerSpans: 99}, nil},
		{"spans poor", Stats{Requests: 100, WithSpans: 12, ServerSpans: 12}, []string{"only 12% of requests joined to server spans", "traceparent"}},
		{"just below", Stats{Requests: 1000, WithSpans: 989, ServerSpans: 989}, []string{"only 98.9%"}},
		{"events poor, spans absent", Stats{Requests: 10, WithEvents: 5, Events: 40}, []string{"only 50% of requests joined to server events"}},
		{"both", Stats{Requests: 10, WithSpans: 1, WithEvents: 2, ServerSpans: 1, Events: 1}, []string{"server spans", "server events"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := tt.s.Warning()
			if len(tt.want) == 0 && w != "" {
				t.Errorf("warning %q, want none", w)
			}
			if len(tt.want) > 0 && w == "" {
				t.Error("no warning")
			}
			for _, sub := range tt.want {
				if !strings.Contains(w, sub) {
					t.Errorf("warning %q lacks %q", w, sub)
				}
			}
		})
	}
}

func TestRequestKey(t *testing.T) {
	for in, want := range map[string]string{
		"transcribe-asrprof-ab-000001_0":  "asrprof-ab-000001",
		"transcribe-asrprof-ab-000001_12": "asrprof-ab-000001",
		"transcribe-abc":                  "abc",
		"transcribe-abc_x":                "abc_x",
		"cmpl-123":                        "cmpl-123",
	} {
		if got := requestKey(in); got != want {
			t.Errorf("requestKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStatsJSONTags(t *testing.T) {
	b := []string{"requests", "with_spans", "with_events"}
	typ := reflect.TypeOf(Stats{})
	for i, tag := range b {
		if got := typ.Field(i).Tag.Get("json"); got != tag {
			t.Errorf("field %s tag %q, want %q", typ.Field(i).Name, got, tag)
		}
	}
}

// SpanOwners gives each span to the first request that BuildChunks joins
// it to: by trace id (a trace two requests name goes to the first), else,
// for a request without server spans in its trace, by gen_ai.request.id;
// a span nobody joins is -1. Chunk boundaries do not matter.
func TestSpanOwners(t *testing.T) {
	srv := func(tid, name string, attrs map[string]any) spans.Span {
		return spans.Span{TraceID: tid, SpanID: name, Name: name, Service: "vllm", Attrs: attrs}
	}
	cli := spans.Span{TraceID: "t2", SpanID: "c2", Name: "client", Service: spans.ClientService}
	chunks := [][]spans.Span{
		{srv("t1", "a", nil), cli},
		{srv("tx", "g", map[string]any{AttrGenAIRequestID: "transcribe-r2_0"}), srv("t9", "lost", nil), srv("t1", "b", nil)},
	}
	reqs := []model.Request{
		{TraceID: "t1", RequestID: "r1"},
		{TraceID: "t2", RequestID: "r2"},
		{TraceID: "t1", RequestID: "r3"},
	}
	got := SpanOwners(reqs, chunks)
	if want := []int32{0, 1, 1, -1, 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("owners %v, want %v", got, want)
	}
	ix := BuildChunks(reqs, chunks, nil)
	if n := spanNames(ix.Spans(1)); !reflect.DeepEqual(n, []string{"client:client", "g"}) {
		t.Errorf("request r2 joined %v, want its client span and the gen_ai span", n)
	}
	if len(ix.Spans(2)) != 2 {
		t.Errorf("request r3 joined %d spans of its trace, want 2", len(ix.Spans(2)))
	}
}
