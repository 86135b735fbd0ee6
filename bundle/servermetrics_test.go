package bundle

import (
	"encoding/json"
	"math"
	"testing"
)

// A metric value round-trips through JSON, the non-finite ones as
// strings; a ServerMetricsRecord reads the probe's lines.
func TestMetricValueJSON(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		json string
	}{{1.5, "1.5"}, {3, "3"}, {math.NaN(), `"NaN"`}, {math.Inf(1), `"+Inf"`}, {math.Inf(-1), `"-Inf"`}} {
		b, err := json.Marshal(MetricValue(tc.v))
		if err != nil || string(b) != tc.json {
			t.Errorf("%v: %s, %v; want %s", tc.v, b, err, tc.json)
		}
		var back MetricValue
		if err := json.Unmarshal(b, &back); err != nil || !(float64(back) == tc.v || math.IsNaN(tc.v) && math.IsNaN(float64(back))) {
			t.Errorf("%s read back as %v, %v", b, back, err)
		}
	}
	var v MetricValue
	if err := json.Unmarshal([]byte(`"lots"`), &v); err == nil {
		t.Error(`"lots" read as a value`)
	}
	var r ServerMetricsRecord
	line := `{"kind":"period","level":"c4","repeat":1,"warmup":false,"start_unix_ns":10,"end_unix_ns":20,"name":"x_bucket","type":"histogram","labels":{"le":"+Inf"},"samples":3,"delta":"+Inf","from_unix_ns":5,"to_unix_ns":25}`
	if err := json.Unmarshal([]byte(line), &r); err != nil || r.Kind != MetricsKindPeriod || r.Labels.Map["le"] != "+Inf" ||
		r.Delta == nil || !math.IsInf(float64(*r.Delta), 1) || r.Mean != nil || r.ToUnixNs != 25 {
		t.Errorf("%+v, %v", r, err)
	}
}
