package report

// validitySection draws the run's checks on itself (the validity
// analysis, docs/VALIDITY.md) before the verdict: what fired, with what
// to do, and the intervals per level. A capture on which no check fired
// gets one line saying so.
func (d *captureData) validitySection(p *page) {
	t := d.tables["validity"]
	if t == nil {
		return
	}
	p.section("validity", "Validity", "Can this run's numbers be trusted: did it check out?")
	if len(t.Rows) == 0 {
		p.para("note", t.Title)
		p.notes(t.Notes)
	} else {
		p.para("warn", t.Title+": read the verdict below with these")
		p.table(t)
	}
	p.table(d.tables["validity_intervals"])
	p.end()
}
