package capture

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/asrprof/asrprof/bench/dataset"
	"github.com/asrprof/asrprof/bench/driver"
	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/bench/score/diarize"
	"github.com/asrprof/asrprof/bundle"
)

// Tasks (Config.Task): what a request asks the server for and how it is scored.
const (
	// TaskASR is a transcript scored by WER/CER (results.json).
	TaskASR = "asr"
	// TaskTranscribeDiarize is MOSS-Transcribe-Diarize's speaker-attributed
	// transcript, [start][Sxx]text[end], sent as SGLang-Omni's client sends
	// it and scored by CER, cpCER and speaker-timestamp DER into
	// transcribe_diarize_results.json and transcribe_diarize_speed_results.json
	// (docs/SCORING.md, docs/BUNDLE.md).
	TaskTranscribeDiarize = "transcribe-diarize"
)

func (c *Config) validateTask() error {
	return cmp.Or(
		errIf(!slices.Contains([]string{"", TaskASR, TaskTranscribeDiarize}, c.Task), "--task %q: want asr or transcribe-diarize", c.Task),
		errIf(c.Task == TaskTranscribeDiarize && c.Protocol != "openai" && c.Protocol != "openai-stream",
			"--task %s sends files: want --protocol openai or openai-stream, not %s", c.Task, c.Protocol),
	)
}

// newClient is the client of cfg's protocol (its realtime knobs
// included) for asr, the MOSS-Transcribe-Diarize client (plain or
// streaming, by --protocol) for transcribe-diarize.
func newClient(cfg *Config, hc *http.Client) (protocol.Client, error) {
	o := protocol.Options{Target: cfg.Target, Path: cfg.Endpoint, Stream: cfg.Protocol == "openai-stream", HTTPClient: hc, Header: cfg.header()}
	if cfg.Task == TaskTranscribeDiarize {
		return protocol.NewDiarize(o)
	}
	o.ChunkMs, o.Pace, o.Loops, o.Dialect, o.Hotwords = cfg.ChunkMs, cfg.Pace, cfg.Loops, cfg.Dialect, cfg.Hotwords
	return protocol.New(cfg.Protocol, o)
}

// diarizeRun keeps what the transcribe-diarize files need: the dataset and
// the records of every scored pass. It is nil for other tasks; its methods
// then do nothing.
type diarizeRun struct {
	cfg     *Config
	samples []diarize.Input
	warmup  int
	passes  []diarizePass
}

type diarizePass struct {
	lv     SweepPoint
	repeat int
	pass   *driver.Pass
}

func newDiarizeRun(cfg *Config, samples []dataset.Sample) *diarizeRun {
	if cfg.Task != TaskTranscribeDiarize {
		return nil
	}
	d := &diarizeRun{cfg: cfg}
	for _, s := range samples {
		d.samples = append(d.samples, diarize.Input{ID: s.ID, AudioPath: s.Audio, Expected: s.Text})
	}
	if cfg.Warmup {
		d.warmup = len(samples)
	}
	return d
}

// add keeps a scored pass that ran whole.
func (d *diarizeRun) add(lv SweepPoint, repeat int, p *driver.Pass) {
	if d != nil {
		d.passes = append(d.passes, diarizePass{lv, repeat, p})
	}
}

// write scores every kept pass and writes its two files; each pass's
// figures are said in one line.
func (d *diarizeRun) write(w *bundle.Writer, say func(string)) error {
	if d == nil {
		return nil
	}
	if len(d.passes) == 0 {
		say("transcribe-diarize: no scored pass ran whole; no result files written")
		return nil
	}
	for _, p := range d.passes {
		cfg := bundle.DiarizeConfig{
			Dataset: d.cfg.Dataset, ModelPath: d.cfg.Model, BaseURL: d.cfg.Target,
			Concurrency: p.lv.Concurrency, Warmup: d.warmup, RequestRate: "inf",
			RequestTimeout: d.cfg.Timeout.Seconds(), MaxNewTokens: protocol.DiarizeMaxNewTokens,
			Stream: d.cfg.Protocol == "openai-stream", Level: p.lv.Name, Repeat: p.repeat,
			WallClockS: p.pass.WallS(),
		}
		if p.lv.Rate > 0 {
			cfg.RequestRate = p.lv.Rate
		}
		if d.cfg.MaxSamples > 0 {
			cfg.MaxSamples = &d.cfg.MaxSamples
		}
		res, speed := diarize.Score(d.samples, p.pass.Records, cfg)
		// SGLang-Omni's names when the capture has one scored pass, and
		// <name>.<level>.r<repeat>.json when it has several.
		rn, sn := bundle.DiarizeResultsFile, bundle.DiarizeSpeedFile
		if len(d.passes) > 1 {
			suffix := fmt.Sprintf(".%s.r%d.json", p.lv.Name, p.repeat)
			rn, sn = strings.TrimSuffix(rn, ".json")+suffix, strings.TrimSuffix(sn, ".json")+suffix
		}
		if err := w.WriteJSON(rn, res); err != nil {
			return err
		}
		if err := w.WriteJSON(sn, speed); err != nil {
			return err
		}
		m := res.MetricsPercent
		say(fmt.Sprintf("transcribe-diarize %s repeat %d: CER %s, cpCER %s, DER %s (%d of %d evaluated, DER over %d) -> %s",
			p.lv.Name, p.repeat, pct(m.CER), pct(m.CPCER), pct(m.DER),
			res.Summary.Evaluated, res.Summary.TotalSamples, m.DERValidSamples, rn))
	}
	return nil
}

func pct(p *float64) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f%%", *p)
}
