package bundle

import (
	"reflect"

	"github.com/asrprof/asrprof/model"
)

// EventsFile holds the server's request-profile events (SGLang-Omni's
// format), imported at the end of a capture (bundle/events): one Event a
// line.
const EventsFile = "events.jsonl"

// Event is one request-profile event, one line of events.jsonl. Its fields
// (EventFields) are the columns of events.parquet after request_index
// (bundle/columns) and an event's attributes in Starlark; the tag
// parquet:",dict" marks a string of few distinct values.
type Event struct {
	RequestID   string         `json:"request_id"`
	Stage       string         `json:"stage" parquet:",dict"`
	EventName   string         `json:"event_name" parquet:",dict"`
	TimestampNs int64          `json:"timestamp_ns"` // unix ns, server wall clock
	RunID       string         `json:"run_id" parquet:",dict"`
	PID         int64          `json:"pid"`
	Metadata    map[string]any `json:"metadata,omitempty"`
}

// EventFields are the fields of Event, in its order (read-only).
var EventFields = model.FieldsOf(reflect.TypeFor[Event]())
