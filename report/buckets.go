package report

// bucketsSection draws the results by audio length (the buckets analysis:
// its tables, through the generic table path), when the capture has them.
func (d *captureData) bucketsSection(p *page) {
	t := d.tables["length_buckets"]
	if t == nil {
		return
	}
	p.section("lengths", "By audio length", "Does the server saturate at a different level for short and for long audio?")
	if len(t.Columns) == 0 { // one bucket: the analysis's one line
		p.para("note", t.Title)
		p.notes(t.Notes)
		p.end()
		return
	}
	p.table(t)
	p.table(d.tables["length_sweep"])
	p.table(d.tables["length_stages"])
	p.end()
}
