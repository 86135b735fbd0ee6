package capture

import (
	"encoding/json"
	"fmt"
	"github.com/asrprof/asrprof/option"
	"maps"
	"reflect"
	"time"
)

// ConfigFromRecord is the inverse of Record: the configuration a
// manifest's "config" holds, on top of DefaultConfig (fields the record
// does not keep, json "-", keep their defaults; durations come back from
// their seconds). asrprof what-if reruns a capture with it.
func ConfigFromRecord(rec map[string]any) (Config, error) {
	c := DefaultConfig()
	rec = maps.Clone(rec)
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		name := option.JSONName(f)
		if s, ok := rec[name]; ok && f.Type == reflect.TypeFor[time.Duration]() {
			secs, err := seconds(s)
			if err != nil {
				return c, fmt.Errorf("reading the recorded configuration: %s: %w", name, err)
			}
			rec[name] = int64(secs * float64(time.Second))
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return c, fmt.Errorf("reading the recorded configuration: %w", err)
	}
	type fields Config // Config's fields without MarshalJSON
	if err := json.Unmarshal(b, (*fields)(&c)); err != nil {
		return c, fmt.Errorf("reading the recorded configuration: %w", err)
	}
	return c, nil
}

// seconds is a recorded number of seconds (a float64 or a json.Number).
func seconds(v any) (float64, error) {
	switch s := v.(type) {
	case float64:
		return s, nil
	case json.Number:
		return s.Float64()
	}
	return 0, fmt.Errorf("%v is not a number of seconds", v)
}
