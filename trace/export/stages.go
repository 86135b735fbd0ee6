package export

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"

	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/bundle"
)

// StagesFile is the bundle file with per-request stage boundaries that an
// analysis may leave behind. Each line is either one stage of one request,
//
//	{"trace_id":"…","stage":"build","start_unix_ns":…,"end_unix_ns":…}
//
// or all stages of one request,
//
//	{"request_id":"…","stages":[{"stage":"build","start_unix_ns":…,"end_unix_ns":…},…]}
//
// A request is named by trace_id, request_id (asrprof's X-Request-Id or the
// server's) or id (requests.jsonl's sequence number), tried in that order;
// a stage's name is in "stage" or "name". Lines naming no known request are
// counted, not fatal.
const StagesFile = bundle.StagesFile

// Stage is one derived stage of one request, in wall-clock unix ns.
type Stage struct {
	Name        string
	StartUnixNs int64
	EndUnixNs   int64
}

type stageLine struct {
	TraceID   string      `json:"trace_id"`
	RequestID string      `json:"request_id"`
	ID        any         `json:"id"`
	Stage     string      `json:"stage"`
	Name      string      `json:"name"`
	Start     int64       `json:"start_unix_ns"`
	End       int64       `json:"end_unix_ns"`
	Stages    []stageLine `json:"stages"`
}

func (l *stageLine) stageName() string {
	if l.Stage != "" {
		return l.Stage
	}
	return l.Name
}

// StageRecord is one stage of one request as an analysis gives it (a
// line of stages.jsonl): the request named by trace id or request id.
type StageRecord struct {
	TraceID, RequestID string
	Name               string
	StartUnixNs        int64
	EndUnixNs          int64
}

// ReadStages reads the bundle's stages.jsonl and returns, for each request
// of reqs (by index), its stages ordered by start. It returns nil, 0, nil
// when the bundle has no stages.jsonl. unmatched counts lines that named
// no request of reqs.
func ReadStages(b *bundle.Bundle, reqs []model.Request) (stages [][]Stage, unmatched int, err error) {
	m := newStageMatcher(reqs)
	out := make([][]Stage, len(reqs))
	_, err = bundle.ReadJSONL(b.Path(StagesFile), func(l stageLine) error {
		i, ok := m.find(&l)
		if !ok {
			unmatched++
			return nil
		}
		if n := l.stageName(); n != "" {
			out[i] = append(out[i], Stage{Name: n, StartUnixNs: l.Start, EndUnixNs: l.End})
		}
		for _, s := range l.Stages {
			if n := s.stageName(); n != "" {
				out[i] = append(out[i], Stage{Name: n, StartUnixNs: s.Start, EndUnixNs: s.End})
			}
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading stages: %w", err)
	}
	sortStages(out)
	return out, unmatched, nil
}

// MatchStages is ReadStages over records an analysis computed (the stages
// that `asrprof analyze --save-stages` would have written to
// stages.jsonl): each request's stages, ordered by start, and how many
// records named no request of reqs.
func MatchStages(reqs []model.Request, recs []StageRecord) (stages [][]Stage, unmatched int) {
	m := newStageMatcher(reqs)
	out := make([][]Stage, len(reqs))
	for _, r := range recs {
		i, ok := m.find(&stageLine{TraceID: r.TraceID, RequestID: r.RequestID})
		if !ok {
			unmatched++
			continue
		}
		if r.Name != "" {
			out[i] = append(out[i], Stage{Name: r.Name, StartUnixNs: r.StartUnixNs, EndUnixNs: r.EndUnixNs})
		}
	}
	sortStages(out)
	return out, unmatched
}

func sortStages(out [][]Stage) {
	for _, ss := range out {
		sort.SliceStable(ss, func(a, b int) bool { return ss[a].StartUnixNs < ss[b].StartUnixNs })
	}
}

type stageMatcher struct{ byTrace, byReqID, byID map[string]int }

func newStageMatcher(reqs []model.Request) *stageMatcher {
	m := &stageMatcher{byTrace: map[string]int{}, byReqID: map[string]int{}, byID: map[string]int{}}
	for i := range reqs {
		r := &reqs[i]
		if r.TraceID != "" {
			m.byTrace[r.TraceID] = i
		}
		if r.RequestID != "" {
			m.byReqID[r.RequestID] = i
		}
		if r.ServerRequestID != "" {
			if _, dup := m.byReqID[r.ServerRequestID]; !dup {
				m.byReqID[r.ServerRequestID] = i
			}
		}
		if r.ID != "" {
			m.byID[r.ID] = i
		}
	}
	return m
}

func (m *stageMatcher) find(l *stageLine) (int, bool) {
	if i, ok := m.byTrace[l.TraceID]; ok && l.TraceID != "" {
		return i, true
	}
	if i, ok := m.byReqID[l.RequestID]; ok && l.RequestID != "" {
		return i, true
	}
	if l.ID != nil {
		if i, ok := m.byID[fmt.Sprint(l.ID)]; ok {
			return i, true
		}
	}
	return 0, false
}
