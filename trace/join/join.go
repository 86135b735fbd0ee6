package join

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/spans"
)

// MinRate is the joined fraction below which Stats.Warning speaks up.
const MinRate = 0.99

// AttrGenAIRequestID is the span attribute vLLM puts its request id in.
const AttrGenAIRequestID = "gen_ai.request.id"

// Index holds, for each request (by its index in the slice given to Build),
// the spans and events that joined it. It is read-only once built and safe
// for concurrent reads.
type Index struct {
	spans  [][]spans.Span
	events [][]bundle.Event
	stats  Stats
}

// Stats says how well the join went. Only measured requests count: not
// warm-up, status ok.
type Stats struct {
	Requests   int `json:"requests"`
	WithSpans  int `json:"with_spans"`  // with at least one server (non-client) span
	WithEvents int `json:"with_events"` // with at least one event
	// ServerSpans and Events count the sources: all non-client spans and all
	// events given to Build, joined or not.
	ServerSpans int `json:"server_spans"`
	Events      int `json:"events"`
}

// Build joins spans and events to reqs. Each request gets copies of its
// spans, sorted by start, in one shared backing array: ss may be dropped
// afterwards.
func Build(reqs []model.Request, ss []spans.Span, evs []bundle.Event) *Index {
	return BuildChunks(reqs, [][]spans.Span{ss}, evs)
}

// BuildChunks is Build over spans given in chunks, in order (as a span
// store's records decode), so that a caller need not concatenate them.
func BuildChunks(reqs []model.Request, chunks [][]spans.Span, evs []bundle.Event) *Index {
	at := flatten(chunks)
	picked, from, server := pick(reqs, at)
	ix := &Index{
		spans:  make([][]spans.Span, len(reqs)),
		events: make([][]bundle.Event, len(reqs)),
	}
	for _, s := range at {
		if !s.IsClient() {
			ix.stats.ServerSpans++
		}
	}
	byReq := map[string][]bundle.Event{}
	for _, e := range evs {
		byReq[e.RequestID] = append(byReq[e.RequestID], e)
	}
	ix.stats.Events = len(evs)
	// Copy the spans once into a backing array and sort each request's.
	all := make([]spans.Span, len(picked))
	for k, j := range picked {
		all[k] = *at[j]
	}
	for i := range reqs {
		r := &reqs[i]
		if lo, hi := from[i], from[i+1]; hi > lo {
			ix.spans[i] = all[lo:hi:hi]
			spans.SortByStart(ix.spans[i])
		}
		if id := EventKey(r); id != "" {
			ix.events[i] = slices.Clip(byReq[id]) // shared by the requests of one key (read-only: an append copies)
			slices.SortStableFunc(ix.events[i], func(a, b bundle.Event) int { return cmp.Compare(a.TimestampNs, b.TimestampNs) })
		}
		if r.Warmup || r.Status != model.StatusOK {
			continue
		}
		ix.stats.Requests++
		if server[i] {
			ix.stats.WithSpans++
		}
		if len(ix.events[i]) > 0 {
			ix.stats.WithEvents++
		}
	}
	return ix
}

// flatten lists the spans of chunks, in order.
func flatten(chunks [][]spans.Span) []*spans.Span {
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	at := make([]*spans.Span, 0, n)
	for _, c := range chunks {
		for k := range c {
			at = append(at, &c[k])
		}
	}
	return at
}

// pick lists the spans (indices into at) each request gets, request i's
// at picked[from[i]:from[i+1]], and whether one of them is a server span:
// the spans of its trace id; for a request without server spans in its
// trace, the server spans whose gen_ai.request.id names it.
func pick(reqs []model.Request, at []*spans.Span) (picked []int32, from []int, server []bool) {
	next, byTrace := chain(at, func(s *spans.Span) string { return s.TraceID })
	// gen_ai ids chain through their own list (a span can be on both).
	nextGenAI, byGenAI := chain(at, func(s *spans.Span) string {
		if v, ok := s.Attrs[AttrGenAIRequestID].(string); ok && v != "" && !s.IsClient() {
			return requestKey(v)
		}
		return ""
	})
	picked = make([]int32, 0, len(at))
	from = make([]int, len(reqs)+1)
	server = make([]bool, len(reqs))
	for i := range reqs {
		r := &reqs[i]
		from[i] = len(picked)
		if h, ok := byTrace[r.TraceID]; ok {
			for j := h; j >= 0; j = next[j] {
				picked = append(picked, j)
				server[i] = server[i] || !at[j].IsClient()
			}
		}
		if !server[i] {
			for _, id := range uniq(r.RequestID, r.ServerRequestID) {
				if h, ok := byGenAI[id]; ok {
					for j := h; j >= 0; j = nextGenAI[j] {
						picked = append(picked, j)
						server[i] = true
					}
				}
			}
		}
	}
	from[len(reqs)] = len(picked)
	return picked, from, server
}

// chain links the spans of at that have the same key ("": none) into
// lists through next (head: the first index; -1 ends a list), built back
// to front so that each list is in input order: no slice per key. next is
// made at the first span with a key.
func chain(at []*spans.Span, key func(*spans.Span) string) (next []int32, head map[string]int32) {
	head = map[string]int32{}
	for i := len(at) - 1; i >= 0; i-- {
		k := key(at[i])
		if k == "" {
			continue
		}
		if next == nil {
			next = make([]int32, len(at))
		}
		next[i] = -1
		if h, ok := head[k]; ok {
			next[i] = h
		}
		head[k] = int32(i)
	}
	return next, head
}

// EventKey is the id by which r's events name it: the server's request id
// (its X-Request-Id response header), or asrprof's own when the server
// sent none.
func EventKey(r *model.Request) string { return cmp.Or(r.ServerRequestID, r.RequestID) }

// SpanOwners returns, for each span of chunks (in order, over all chunks),
// the index of the request that BuildChunks gives it to, or -1 (pick). A
// span that two requests would share goes to the first.
func SpanOwners(reqs []model.Request, chunks [][]spans.Span) []int32 {
	at := flatten(chunks)
	picked, from, _ := pick(reqs, at)
	owner := slices.Repeat([]int32{-1}, len(at))
	for i := range reqs {
		for _, j := range picked[from[i]:from[i+1]] {
			if owner[j] < 0 {
				owner[j] = int32(i)
			}
		}
	}
	return owner
}

// requestKey maps vLLM's transcription request id,
// transcribe-<X-Request-Id>_<chunk>, to the X-Request-Id; other ids are
// returned as they are.
func requestKey(id string) string {
	rest, ok := strings.CutPrefix(id, "transcribe-")
	if !ok {
		return id
	}
	if k := strings.LastIndexByte(rest, '_'); k > 0 && isDigits(rest[k+1:]) {
		rest = rest[:k]
	}
	return rest
}

func isDigits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// uniq is a and b, once each, less "".
func uniq(a, b string) []string {
	return slices.DeleteFunc(slices.Compact([]string{a, b}), func(s string) bool { return s == "" })
}

// Len is the number of requests.
func (ix *Index) Len() int { return len(ix.spans) }

// Spans returns the spans joined to request i, client ones included
// (spans.Span.IsClient tells them apart), ordered by start time.
func (ix *Index) Spans(i int) []spans.Span { return ix.spans[i] }

// ServerSpans returns the non-client spans joined to request i.
func (ix *Index) ServerSpans(i int) []spans.Span {
	return slices.DeleteFunc(slices.Clone(ix.spans[i]), func(s spans.Span) bool { return s.IsClient() })
}

// Events returns the events joined to request i, ordered by time.
func (ix *Index) Events(i int) []bundle.Event { return ix.events[i] }

// Stats returns the join's counts.
func (ix *Index) Stats() Stats { return ix.stats }

// Warning explains a poor join: non-empty when a source exists (some server
// span, some event) but joined fewer than MinRate of the measured requests.
func (s Stats) Warning() string {
	if s.Requests == 0 {
		return ""
	}
	var ws []string
	if s.ServerSpans > 0 && float64(s.WithSpans) < MinRate*float64(s.Requests) {
		ws = append(ws, fmt.Sprintf("only %s of requests joined to server spans (%d of %d): does the server propagate traceparent and export to the receiver?",
			pct(s.WithSpans, s.Requests), s.WithSpans, s.Requests))
	}
	if s.Events > 0 && float64(s.WithEvents) < MinRate*float64(s.Requests) {
		ws = append(ws, fmt.Sprintf("only %s of requests joined to server events (%d of %d): does the server return its request id (X-Request-Id), and did the request profiler run for the whole capture?",
			pct(s.WithEvents, s.Requests), s.WithEvents, s.Requests))
	}
	return strings.Join(ws, "; ")
}

func pct(n, d int) string {
	p := 100 * float64(n) / float64(d)
	if p >= 98.5 && n < d {
		return fmt.Sprintf("%.1f%%", p) // not "99%" or "100%" for a rate below MinRate
	}
	return fmt.Sprintf("%.0f%%", p)
}
