package bundle

// SearchFile is the --find-max search's record (docs/CAPACITY.md): one
// SearchResult.
const SearchFile = "search.json"

// SearchProbe is one level the search ran.
type SearchProbe struct {
	Level string  `json:"level"`
	Value float64 `json:"value"` // requests in flight or req/s
	Phase string  `json:"phase"` // "bracket" or "bisect"
	// Attainment is the worst repeat's; Pass is Attainment ≥ the target.
	Attainment     float64   `json:"attainment"`
	PerRepeat      []float64 `json:"attainment_per_repeat"`
	GoodputReqS    float64   `json:"goodput_req_s"` // mean over repeats
	Pass           bool      `json:"pass"`
	Requests       int       `json:"requests"` // requests sent, warmup included
	LatencyP95S    float64   `json:"latency_p95_s"`
	RequestsPerSec float64   `json:"requests_per_s"`
}

// SearchResult is search.json: the path the search took and its answer.
type SearchResult struct {
	Loop       string        `json:"loop"` // "closed" (concurrency) or "open" (rate)
	SLO        string        `json:"slo"`
	Attainment float64       `json:"attainment_target"`
	Tolerance  float64       `json:"tolerance"`
	Relative   bool          `json:"tolerance_relative,omitempty"`
	Probes     []SearchProbe `json:"probes"`
	// Answer is the highest level that passed (0: none did); the SLO's
	// limit lies in [Answer, Upper), Upper the lowest level that failed
	// (0: no level failed up to the limit, so the answer is a lower
	// bound). It is no knee: the knee, where throughput stops rising, is
	// the analyses' one definition (scripts/lib/knee.star).
	Answer   float64 `json:"answer"`
	Upper    float64 `json:"upper,omitempty"`
	Requests int     `json:"requests"` // sent over the whole search
	Done     bool    `json:"done"`     // false: interrupted before the interval closed
	Note     string  `json:"note,omitempty"`
}
