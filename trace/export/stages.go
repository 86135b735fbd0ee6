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

// ReadStages reads the bundle's stages.jsonl and returns, for each request
// of reqs (by index), its stages ordered by start. It returns nil, 0, nil
// when the bundle has no stages.jsonl. unmatched counts lines that named
// no request of reqs.
func ReadStages(b *bundle.Bundle, reqs []model.Request) (stages [][]Stage, unmatched int, err error) {
	byTrace := map[string]int{}
	byReqID := map[string]int{}
	byID := map[string]int{}
	for i := range reqs {
		r := &reqs[i]
		if r.TraceID != "" {
			byTrace[r.TraceID] = i
		}
		if r.RequestID != "" {
			byReqID[r.RequestID] = i
		}
		if r.ServerRequestID != "" {
			if _, dup := byReqID[r.ServerRequestID]; !dup {
				byReqID[r.ServerRequestID] = i
			}
		}
		if r.ID != "" {
			byID[r.ID] = i
		}
	}
	find := func(l *stageLine) (int, bool) {
		if i, ok := byTrace[l.TraceID]; ok && l.TraceID != "" {
			return i, true
		}
		if i, ok := byReqID[l.RequestID]; ok && l.RequestID != "" {
			return i, true
		}
		if l.ID != nil {
			if i, ok := byID[fmt.Sprint(l.ID)]; ok {
				return i, true
			}
		}
		return 0, false
	}
	out := make([][]Stage, len(reqs))
	_, err = bundle.ReadJSONL(b.Path(StagesFile), func(l stageLine) error {
		i, ok := find(&l)
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
	for _, ss := range out {
		sort.SliceStable(ss, func(a, b int) bool { return ss[a].StartUnixNs < ss[b].StartUnixNs })
	}
	return out, unmatched, nil
}
