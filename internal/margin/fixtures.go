package margin

// FixtureExempt are the causes of the synthetic golden fixtures
// (internal/fixture.Golden) whose deciding figure lies within Near of its
// threshold: the analysis goldens and cmd/asrprof's CLI goldens mask
// their rows, and the analysis package's TestVerdictMargins fails for any
// other such cause.
func FixtureExempt() []Exempt {
	return []Exempt{
		// the synthetic fixtures' stage times were chosen for the sweep's
		// shape (internal/fixture.SweepLevels); these causes sit on a
		// threshold by accident of those times. Moving them would rewrite
		// every golden of the fixture (sweep, stages, the CLI's), so the
		// rows are not asserted instead.
		Exempted("refserver", "c32", 2, "admission wait", "MIN_SHARE", "a secondary state at 10.9 % of latency against 10 %: whether it is listed turns on a point of latency"),
		Exempted("refserver", "c32", 3, "busy thread", "BUSY_THREAD", "the fixture's scheduler thread at 0.90 of a core against 0.85"),
		Exempted("refserver_random", "c32", 3, "admission behind first forwards", "MIN_SHARE", "a secondary state at 10.9 % of latency against 10 %"),
		Exempted("refserver_random", "c64", 1, "admission wait", "BEHIND_FF", "a first forward ran during 45 % of the wait against 50 %: admission wait or behind first forwards is a coin toss here"),
		Exempted("sglang", "c32", 3, "admission behind first forwards", "MIN_SHARE", "a secondary state at 10.9 % of latency against 10 %"),
	}
}
