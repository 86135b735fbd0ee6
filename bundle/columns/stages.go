package columns

// StageRows are the stage boundaries a stage preset derives, one row per
// stage of each request that has the preset's telemetry, in request
// order and, within a request, in the preset's stage order. Duration is
// the stage's length in seconds (what the stage table averages); Start
// and End its boundaries on the server's clock, where the preset gives
// them (HasBounds). A stage the request lacks has neither (a row with
// nulls), so that every request with telemetry has rows.
type StageRows struct {
	RequestIndex []int32
	Stage        Strings
	StartUnixNs  []int64
	EndUnixNs    []int64
	HasBounds    []bool
	DurationS    []float64
	HasDuration  []bool
}

// Len is the number of rows.
func (r *StageRows) Len() int { return len(r.RequestIndex) }

// Resize makes the table n rows long (Set fills them).
func (r *StageRows) Resize(n int) {
	r.RequestIndex, r.Stage.Codes = make([]int32, n), make([]int32, n)
	r.StartUnixNs, r.EndUnixNs, r.HasBounds = make([]int64, n), make([]int64, n), make([]bool, n)
	r.DurationS, r.HasDuration = make([]float64, n), make([]bool, n)
}

// Set sets row j.
func (r *StageRows) Set(j int, req int32, stage int32, start, end int64, bounds bool, dur float64, hasDur bool) {
	r.RequestIndex[j], r.Stage.Codes[j] = req, stage
	r.StartUnixNs[j], r.EndUnixNs[j], r.HasBounds[j] = start, end, bounds
	r.DurationS[j], r.HasDuration[j] = dur, hasDur
}

// Add appends one row.
func (r *StageRows) Add(req int32, stage int32, start, end int64, bounds bool, dur float64, hasDur bool) {
	r.RequestIndex = append(r.RequestIndex, req)
	r.Stage.Codes = append(r.Stage.Codes, stage)
	r.StartUnixNs = append(r.StartUnixNs, start)
	r.EndUnixNs = append(r.EndUnixNs, end)
	r.HasBounds = append(r.HasBounds, bounds)
	r.DurationS = append(r.DurationS, dur)
	r.HasDuration = append(r.HasDuration, hasDur)
}

// stageRow is a row of stages.parquet. The request's own facts (its ids,
// level, status) stay in requests.parquet, joined on request_index; the
// preset is the file's key-value metadata (asrprof.stages.preset) and
// tables/tables.json's.
type stageRow struct {
	RequestIndex int32    `parquet:"request_index"`
	Stage        string   `parquet:"stage,dict"`
	StartUnixNs  *int64   `parquet:"start_unix_ns,optional"`
	EndUnixNs    *int64   `parquet:"end_unix_ns,optional"`
	DurationS    *float64 `parquet:"duration_s,optional"`
}

func writeStages(path string, r *StageRows, meta map[string]string) error {
	return writeRows(path, meta, r.Len(), func(i int) stageRow {
		row := stageRow{RequestIndex: r.RequestIndex[i], Stage: r.Stage.At(i)}
		if r.HasBounds[i] {
			row.StartUnixNs, row.EndUnixNs = &r.StartUnixNs[i], &r.EndUnixNs[i]
		}
		if r.HasDuration[i] {
			row.DurationS = &r.DurationS[i]
		}
		return row
	})
}

func readStages(path string) (*StageRows, error) {
	cols, err := readColumns(path, []string{"request_index", "stage", "start_unix_ns", "end_unix_ns", "duration_s"}, nil)
	if err != nil {
		return nil, err
	}
	// The bounds are null together (the end's nulls are the start's).
	return &StageRows{RequestIndex: cols[0].int32s(-1), Stage: cols[1].str,
		StartUnixNs: cols[2].int64s(), EndUnixNs: cols[3].int64s(), HasBounds: cols[2].present(),
		DurationS: cols[4].f64, HasDuration: cols[4].present()}, nil
}
