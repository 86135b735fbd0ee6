package diarize

import "github.com/asrprof/asrprof/bundle"

// Row is one sample whose request succeeded: its reference and the
// server's prediction, both in the markup.
type Row struct {
	ID   string
	Ref  string
	Pred string
}

// Result is Compute's answer.
type Result struct {
	Metrics bundle.DiarizeMetrics
	Percent bundle.DiarizeMetrics // diarization_metrics_percent: the seven rates ×100
	// Samples are the rows' scores: their ids and diarization fields.
	Samples []bundle.DiarizePerSample
}

// above50 is the per-sample CER past which a sample counts as "above 50%".
const above50 = 0.5

// Compute scores rows as SGLang-Omni's compute_diarization_metrics does
// (docs/SCORING.md, "Diarization"): CER without speakers, cpCER and
// speaker-timestamp DER at collar 0, each over its own valid samples, each
// a micro average over them.
func Compute(rows []Row) Result {
	res := Result{Samples: make([]bundle.DiarizePerSample, len(rows))}
	var cers, cps, cerOnCP []charStats
	var corpus DER
	m := &res.Metrics
	for i, row := range rows {
		cs := compare(CleanNoSpeaker(row.Ref), CleanNoSpeaker(row.Pred))
		cp := cpCER(row.Ref, row.Pred)
		if cs.refChars > 0 {
			cers = append(cers, cs)
			m.CERValidSamples++
		}
		if cp.valid {
			cps = append(cps, cp.charStats)
			m.CPCERValidSamples++
		}
		if cs.refChars > 0 && cp.valid {
			cerOnCP = append(cerOnCP, cs)
		}

		// DER. The reference counts a parse that raises as
		// timestamp_parse_error; Segments cannot fail (every bracketed
		// time it accepts converts), so that count stays 0.
		ref, pred := Segments(row.Ref), Segments(row.Pred)
		var d DER
		derWhy := ""
		switch {
		case len(ref) == 0:
			derWhy = ReasonNoRefSegs
			m.DERSkipped++
			m.DERSkippedNoRefSegs++
		case len(pred) == 0:
			derWhy = ReasonNoPredSegs
			m.DERSkipped++
			m.DERSkippedNoPredSegs++
		default:
			d = SegmentDER(ref, pred)
			corpus.add(d)
			m.DERValidSamples++
		}
		res.Samples[i] = bundle.DiarizePerSample{ID: row.ID, CERNoSpk: cs.cer, CPCER: cp.cer,
			CERValid: new(cs.refChars > 0), CPCERValid: new(cp.valid), CPInvalidReason: new(cp.reason),
			DERValid: new(derWhy == ""), DERInvalidReason: new(derWhy), RefSegments: new(len(ref)), PredSegments: new(len(pred)),
			DER: d.Rate, DERTotalSeconds: new(d.Total), DERFalseAlarm: new(d.FalseAlarm), DERMissedDetection: new(d.Missed), DERConfusion: new(d.Confusion)}
	}
	all, cpSum, both := sum(cers), sum(cps), sum(cerOnCP)
	m.CERNoSpk, m.CER = all.cer, all.cer
	m.CPCER, m.CERNoSpkCPValid = cpSum.cer, both.cer
	if cpSum.cer != nil && both.cer != nil {
		m.DeltaCER = new(*cpSum.cer - *both.cer)
	}
	if len(cers) > 0 {
		var below []charStats
		for _, c := range cers {
			if c.cer != nil && *c.cer > above50 {
				m.NAbove50++
			}
			if c.cer != nil && *c.cer <= above50 {
				below = append(below, c)
			}
		}
		m.CERBelow50Corpus = sum(below).cer
		m.PctAbove50 = float64(m.NAbove50) / float64(len(cers)) * 100
	}
	if m.DERValidSamples > 0 {
		corpus.rate()
		m.DER = corpus.Rate
		m.DERTotalSeconds, m.DERFalseAlarm, m.DERMissedDetection, m.DERConfusion =
			corpus.Total, corpus.FalseAlarm, corpus.Missed, corpus.Confusion
	}
	m.Count = len(rows)
	res.Percent = percent(*m)
	return res
}

// percent is m with the seven rates (CER, CER no speaker, CER below 50%,
// cpCER, CER on cp-valid samples, their delta, DER) times 100.
func percent(m bundle.DiarizeMetrics) bundle.DiarizeMetrics {
	for _, p := range []**float64{&m.CERNoSpk, &m.CER, &m.CERBelow50Corpus, &m.CPCER, &m.CERNoSpkCPValid, &m.DeltaCER, &m.DER} {
		if *p != nil {
			*p = new(**p * 100)
		}
	}
	return m
}
