package capture

import (
	"encoding/json"
	"fmt"
	"time"
)

// ConfigFromRecord is the inverse of Record: the configuration a
// manifest's "config" holds, on top of DefaultConfig (fields the record
// does not keep, json "-", keep their defaults; durations come back from
// their <name>_s seconds). asrprof what-if reruns a capture with it.
func ConfigFromRecord(rec map[string]any) (Config, error) {
	c := DefaultConfig()
	b, err := json.Marshal(rec)
	if err != nil {
		return c, fmt.Errorf("reading the recorded configuration: %w", err)
	}
	type fields Config // Config's fields without MarshalJSON
	secs := struct {
		*fields
		Timeout      *float64 `json:"timeout_s"`
		Grace        *float64 `json:"grace_s"`
		ReadyTimeout *float64 `json:"ready_timeout_s"`
		GPMWindow    *float64 `json:"gpm_window_s"`
		SpanGrace    *float64 `json:"span_grace_s"`
		MetricsEvery *float64 `json:"server_metrics_interval_s"`
		LevelGap     *float64 `json:"level_gap_s"`
		Duration     *float64 `json:"duration_s"`
		Period       *float64 `json:"period_s"`
		PassDuration *float64 `json:"pass_duration_s"`
	}{fields: (*fields)(&c)}
	if err := json.Unmarshal(b, &secs); err != nil {
		return c, fmt.Errorf("reading the recorded configuration: %w", err)
	}
	for _, d := range []struct {
		s   *float64
		dst *time.Duration
	}{
		{secs.Timeout, &c.Timeout}, {secs.Grace, &c.Grace}, {secs.ReadyTimeout, &c.ReadyTimeout},
		{secs.GPMWindow, &c.GPMWindow}, {secs.SpanGrace, &c.SpanGrace}, {secs.MetricsEvery, &c.ServerMetricsInterval},
		{secs.LevelGap, &c.LevelGap}, {secs.Duration, &c.Duration}, {secs.Period, &c.Period}, {secs.PassDuration, &c.PassDuration},
	} {
		if d.s != nil {
			*d.dst = time.Duration(*d.s * float64(time.Second))
		}
	}
	return c, nil
}
