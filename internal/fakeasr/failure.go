package fakeasr

import (
	"fmt"
	"maps"
)

// Failure is what the server does wrong with one request. The zero value,
// None, is a normal answer; Status(code) answers with that HTTP status;
// the other values are the constants below.
type Failure int

const (
	// None answers normally.
	None Failure = 0
	// Reset reads the request, then closes the TCP connection with a
	// reset (SO_LINGER 0) instead of answering.
	Reset Failure = -1
	// Hang reads the request and never answers, until the client goes
	// away or the server closes.
	Hang Failure = -2
	// MalformedJSON answers 200 with a truncated JSON body; in a stream,
	// the first event's data is not JSON.
	MalformedJSON Failure = -3
	// MalformedSSE streams the deltas and then ends the stream without a
	// done event and without [DONE]. Non-streaming requests answer
	// normally.
	MalformedSSE Failure = -4
	// SSEError streams one delta and then an error event, then [DONE].
	// Non-streaming requests get a 500.
	SSEError Failure = -5
)

// Status returns the Failure that answers with the HTTP status code, with
// a small JSON error body. code must be 100..599.
func Status(code int) Failure {
	if code < 100 || code > 599 {
		panic(fmt.Sprintf("fakeasr.Status(%d): not an HTTP status", code))
	}
	return Failure(code)
}

// StatusCode returns the HTTP status of a Status failure, or 0.
func (f Failure) StatusCode() int {
	if f >= 100 {
		return int(f)
	}
	return 0
}

var failureNames = map[Failure]string{None: "none", Reset: "reset", Hang: "hang",
	MalformedJSON: "malformed_json", MalformedSSE: "malformed_sse", SSEError: "sse_error"}

func (f Failure) String() string {
	if s, ok := failureNames[f]; ok {
		return s
	}
	if c := f.StatusCode(); c != 0 {
		return fmt.Sprintf("status_%d", c)
	}
	return fmt.Sprintf("Failure(%d)", int(f))
}

// FailOn returns a Config.Fail that injects m[n] into request n (1-based,
// in arrival order) and None into the others. m is copied.
func FailOn(m map[int]Failure) func(n int) Failure {
	m = maps.Clone(m)
	return func(n int) Failure { return m[n] }
}

// FailAll returns a Config.Fail that injects f into every request.
func FailAll(f Failure) func(n int) Failure {
	return func(int) Failure { return f }
}
