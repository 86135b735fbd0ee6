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
	// Judgement: the measured ratio B/A against the predicted ratio, the
	// A/A spread as the floor (runbook.JudgeRatio); Inside and ErrorPct are its.
	Judgement *WhatIfJudgement `json:"judgement,omitempty"`
	Inside    *bool            `json:"in_interval,omitempty"`
	ErrorPct  *float64         `json:"error_pct,omitempty"` // (after − predicted) / predicted
	Complete  bool             `json:"complete"`
	Error     string           `json:"error,omitempty"`
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

// WhatIfAdvice is one row of the advice table (scripts/bottleneck.star),
// read by its col tags (table.Decode).
type WhatIfAdvice struct {
	Level     string   `json:"level" col:"level"`
	Cause     string   `json:"cause" col:"cause"`
	Knob      string   `json:"knob" col:"knob"`
	From      *float64 `json:"from" col:"from"`
	To        *float64 `json:"to" col:"to"`
	Change    string   `json:"change" col:"change"`
	Metric    string   `json:"metric" col:"metric"`
	Now       *float64 `json:"now" col:"now"`
	Predicted *float64 `json:"predicted" col:"predicted"`
	Lo        *float64 `json:"lo" col:"lo"`
	Hi        *float64 `json:"hi" col:"hi"`
	// Coverage is the share of trials the interval claims to hold the
	// measurement in (0.8), where the advice says; an optional column.
	Coverage *float64 `json:"coverage,omitempty" col:"coverage,optional"`
	Basis    string   `json:"basis" col:"basis"`
}

// WhatIfJudgement is what-if's verdict on one round (docs/CAPACITY.md,
// "What-if"): the ratio B/A measured within one experiment (A and B
// interleaved, A, B, A by default, each run a fresh server) against the
// ratio the advice predicted, predicted / now, whose interval is widened
// where the A/A spread (the same server measured twice in the experiment)
// is wider: no change can be told from noise narrower than that.
type WhatIfJudgement struct {
	// PredictedRatio is the advice's predicted / now; Lo and Hi its
	// interval as ratios (lo / now, hi / now).
	PredictedRatio float64 `json:"predicted_ratio"`
	Lo             float64 `json:"predicted_ratio_lo"`
	Hi             float64 `json:"predicted_ratio_hi"`
	// MeasuredRatio is the mean of the B runs over the mean of the A runs.
	MeasuredRatio float64 `json:"measured_ratio"`
	// AASpread is (max − min) / mean over the A runs; nil with one A run.
	AASpread *float64 `json:"aa_spread,omitempty"`
	// JudgedLo and JudgedHi are the interval the measured ratio is judged
	// against: [Lo, Hi], each side at least PredictedRatio × AASpread away
	// from the predicted ratio.
	JudgedLo float64 `json:"judged_lo"`
	JudgedHi float64 `json:"judged_hi"`
	Inside   bool    `json:"inside"`
	// ErrorPct is (measured − predicted) / predicted ratio, in %.
	ErrorPct float64 `json:"error_pct"`
}
