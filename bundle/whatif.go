package bundle

// WhatIfFile is asrprof what-if's rounds, at the top of its own new
// directory: one WhatIfReport.
const WhatIfFile = "whatif.json"

// WhatIfReport is whatif.json.
type WhatIfReport struct {
	Schema  string         `json:"schema"`
	Bundle  string         `json:"bundle"`
	Level   string         `json:"level"`
	Capture map[string]any `json:"capture"`
	Rounds  []WhatIfRound  `json:"rounds"`
	Knobs   []string       `json:"knobs,omitempty"` // --knob NAME=FLAG
	Stopped string         `json:"stopped"`         // why the rounds ended
	Notes   []string       `json:"notes,omitempty"`
}

// WhatIfRound is one round: the advice acted on and what it measured.
type WhatIfRound struct {
	Round    int          `json:"round"`
	From     string       `json:"advice_from"` // the bundle the advice is of
	Advice   WhatIfAdvice `json:"advice"`
	Edit     WhatIfEdit   `json:"edit"`
	CommandA string       `json:"command_a"`
	CommandB string       `json:"command_b"`
	Runbook  string       `json:"runbook,omitempty"` // the round's runbook dir
	Before   *float64     `json:"before,omitempty"`  // side A's mean, in the advice's unit
	After    *float64     `json:"after,omitempty"`   // side B's
	BeforeN  []float64    `json:"before_runs,omitempty"`
	AfterN   []float64    `json:"after_runs,omitempty"`
	P        *float64     `json:"p,omitempty"`     // Mann-Whitney U over the runs
	Delta    string       `json:"delta,omitempty"` // after vs before (summary.Comparison.Delta)
	Inside   *bool        `json:"in_interval,omitempty"`
	ErrorPct *float64     `json:"error_pct,omitempty"` // (after − predicted) / predicted
	Complete bool         `json:"complete"`
	Error    string       `json:"error,omitempty"`
}

// WhatIfEdit is what a knob does to the server command.
type WhatIfEdit struct {
	Knob  string   `json:"knob"`
	Flag  string   `json:"flag"`
	Kind  string   `json:"kind"`
	Old   string   `json:"old"` // the flag's value before ("" absent; "on"/"off" for a switch)
	New   string   `json:"new"`
	Argv  []string `json:"argv"`
	Where string   `json:"where"` // "replaced", "appended", "removed", "unchanged"
}

// WhatIfAdvice is one row of the advice table.
type WhatIfAdvice struct {
	Level     string   `json:"level"`
	Cause     string   `json:"cause"`
	Knob      string   `json:"knob"`
	From      *float64 `json:"from"`
	To        *float64 `json:"to"`
	Change    string   `json:"change"`
	Metric    string   `json:"metric"`
	Now       *float64 `json:"now"`
	Predicted *float64 `json:"predicted"`
	Lo        *float64 `json:"lo"`
	Hi        *float64 `json:"hi"`
	Basis     string   `json:"basis"`
}
