package bundle

// FidelityRecord is one entry of the manifest's extra.schedule_fidelity:
// an open-loop pass's schedule fidelity.
type FidelityRecord struct {
	Level  string `json:"level"`
	Repeat int    `json:"repeat"`
	Warmup bool   `json:"warmup,omitempty"`
	Fidelity
}

// Fidelity is how closely an open-loop pass kept its schedule: the lag of
// each request's send (the driver handing it to the protocol client, just
// before its first byte is written) behind its intended time, on the
// monotonic clock.
type Fidelity struct {
	Requests    int     `json:"requests"`
	SendLagP50S float64 `json:"send_lag_p50_s"`
	SendLagP99S float64 `json:"send_lag_p99_s"`
	SendLagMaxS float64 `json:"send_lag_max_s"`
	// Lost says which limit the pass broke (empty: fidelity kept).
	Lost []string `json:"lost,omitempty"`
}
