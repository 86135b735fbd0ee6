package bundle

// EventsFile holds the server's request-profile events (SGLang-Omni's
// format), imported at the end of a capture (bundle/events): one Event a
// line.
const EventsFile = "events.jsonl"

// Event is one request-profile event, one line of events.jsonl. Its fields
// are the columns of events.parquet (bundle/columns), after request_index.
type Event struct {
	RequestID   string         `json:"request_id"`
	Stage       string         `json:"stage"`
	EventName   string         `json:"event_name"`
	TimestampNs int64          `json:"timestamp_ns"` // unix ns, server wall clock
	RunID       string         `json:"run_id"`
	PID         int            `json:"pid"`
	Metadata    map[string]any `json:"metadata,omitempty"`
}
