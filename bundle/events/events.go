package events

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/asrprof/asrprof/bundle"
)

// bundle.Event names SGLang-Omni's request profiler writes.
const (
	StageInputReceived         = "stage_input_received"
	RequestAdmission           = "request_admission"
	SchedulerRequestBuildStart = "scheduler_request_build_start"
	SchedulerRequestBuildEnd   = "scheduler_request_build_end"
	SchedulerQueueEnter        = "scheduler_queue_enter"
	SchedulerPrefillStart      = "scheduler_prefill_start"
	SchedulerPrefillEnd        = "scheduler_prefill_end"
	SchedulerFirstEmit         = "scheduler_first_emit"
	StageComplete              = "stage_complete"
	TerminalResponse           = "terminal_response"
)

// Stats counts what ImportDir found.
type Stats struct {
	Files     int `json:"files"`
	Events    int `json:"events"`
	Malformed int `json:"malformed"` // lines skipped; see Problems
	Truncated int `json:"truncated"` // files whose last line was cut short
	// Problems names the first MaxProblems malformed lines as file:line: why.
	Problems []string `json:"problems,omitempty"`
}

// MaxProblems bounds Stats.Problems.
const MaxProblems = 20

var fileRe = regexp.MustCompile(`^events_(.+)_([0-9]+)\.jsonl$`)

// ParseFileName returns the stage and pid of an events_<stage>_<pid>.jsonl
// file name; ok is false for other names.
func ParseFileName(name string) (stage string, pid int, ok bool) {
	m := fileRe.FindStringSubmatch(name)
	if m == nil {
		return "", 0, false
	}
	pid, err := strconv.Atoi(m[2])
	if err != nil {
		return "", 0, false
	}
	return m[1], pid, true
}

// ImportDir appends every event of every events_<stage>_<pid>.jsonl in dir
// to w's events.jsonl, file by file in name order. A malformed line is
// skipped, counted and named in Stats.Problems; a truncated last line (a
// process killed mid-write) is dropped and counted. Events missing their
// stage or pid get them from the file name. The error is for what stops the
// import: an unreadable directory or file, or a failed append; the stats
// then count what was imported before it.
func ImportDir(dir string, w *bundle.Writer) (Stats, error) {
	var st Stats
	ents, err := os.ReadDir(dir)
	if err != nil {
		return st, fmt.Errorf("reading event dir: %w", err)
	}
	// os.ReadDir sorts by name.
	for _, e := range ents {
		name := e.Name()
		stage, pid, ok := ParseFileName(name)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, name)
		f, err := bundle.OpenFile(p)
		if err != nil {
			return st, fmt.Errorf("reading events: %w", err)
		}
		st.Files++
		err = readLines(f, p, &st, func(ev *bundle.Event) error {
			ev.Stage = cmp.Or(ev.Stage, stage)
			ev.PID = cmp.Or(ev.PID, int64(pid))
			if err := w.Append(bundle.EventsFile, ev); err != nil {
				return err
			}
			st.Events++
			return nil
		})
		f.Close()
		if err != nil {
			return st, err
		}
	}
	return st, nil
}

// readLines parses every line of r, skipping malformed ones into st.
func readLines(r io.Reader, name string, st *Stats, fn func(*bundle.Event) error) error {
	// A blank line is skipped; one that is not an event object, or
	// has no event_name, is malformed.
	return bundle.Lines(r, name, func(line int, b []byte, cut bool) error {
		var ev bundle.Event
		err := json.Unmarshal(b, &ev)
		if err == nil && ev.EventName == "" {
			err = errors.New("event without event_name")
		}
		switch {
		case err != nil && cut:
			st.Truncated++
		case err != nil:
			st.Malformed++
			if len(st.Problems) < MaxProblems {
				st.Problems = append(st.Problems, fmt.Sprintf("%s:%d: %v", name, line, err))
			}
		default:
			return fn(&ev)
		}
		return nil
	})
}
