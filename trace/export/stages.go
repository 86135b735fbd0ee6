package export

// Stage is one derived stage (or one attribution state) of one request, in
// wall-clock unix ns. The exporters take them from their caller
// (PlanConfig.Stages and States, PerfettoInput.Stages and States), which
// derives them with the analyses (cmd/asrprof: analysis.StageRecords from
// the stage preset, as in the bundle's tables/stages.parquet); trace/export
// does not import analysis.
type Stage struct {
	Name        string
	StartUnixNs int64
	EndUnixNs   int64
}
