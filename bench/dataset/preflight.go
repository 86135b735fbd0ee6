package dataset

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/asrprof/asrprof/bench/audio"
)

// BadEntry is a sample Preflight found unusable.
type BadEntry struct {
	ID string
	// Path is the sample's audio path (for a piped wav.scp entry, the
	// command; for inline audio, the table cell: "FILE row N, column C").
	Path string
	// Reason says what is wrong; several problems are joined with "; ".
	Reason string
}

// Preflight probes the audio of every sample in ds with at most workers
// files open at once (workers <= 0 means GOMAXPROCS) and splits the samples
// into those a run can use and those it cannot. It reports missing audio
// files, corrupt or unsupported audio (see audio.Probe), zero-length audio,
// and problems LoadWith recorded: missing transcripts and piped wav.scp entries.
//
// Good samples get their Info filled, both in the returned slice and in
// ds.Samples. Both results are in dataset order whatever the scheduling.
// If ctx is done before every sample was probed, the unprobed ones are
// reported as bad with the context's error as the reason, so a cancelled
// preflight never passes unchecked samples as good.
//
// Preflight must not run concurrently with other changes to ds.
func Preflight(ctx context.Context, ds *Dataset, workers int) (good []Sample, bad []BadEntry) {
	n := len(ds.Samples)
	reasons := make([][]string, n)
	workers = min(cmp.Or(max(workers, 0), runtime.GOMAXPROCS(0)), n)

	next := make(chan int) // unbuffered: the feeder blocks until a worker is free
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				reasons[i] = check(&ds.Samples[i])
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			for j := i; j < n; j++ {
				reasons[j] = []string{"not checked: " + ctx.Err().Error()}
			}
			break feed
		}
	}
	close(next)
	wg.Wait()

	for i, s := range ds.Samples {
		if len(reasons[i]) == 0 {
			good = append(good, s)
			continue
		}
		bad = append(bad, BadEntry{ID: s.ID, Path: s.Where(), Reason: strings.Join(reasons[i], "; ")})
	}
	return good, bad
}

// check probes one sample, filling s.Info when its audio is usable, and
// returns what is wrong with it.
func check(s *Sample) []string {
	var reasons []string
	if s.problem != "" {
		reasons = append(reasons, s.problem)
	}
	if s.noProbe {
		return reasons
	}
	var info audio.Info
	var err error
	switch in := s.Inline; {
	case in != nil && in.null:
		return append(reasons, "no audio: the cell is null")
	case in != nil && len(in.Bytes) == 0:
		return append(reasons, "empty audio bytes")
	case in != nil:
		// Decoded in memory, never staged to a file.
		info, err = audio.ProbeBytes(in.Where, in.Bytes)
	default:
		info, err = audio.Probe(s.Audio)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		reasons = append(reasons, "missing audio file")
	case err != nil:
		// Probe's errors start with the path, which BadEntry carries apart.
		reasons = append(reasons, strings.TrimPrefix(err.Error(), s.Where()+": "))
	case info.Frames == 0:
		reasons = append(reasons, "zero-length audio")
	}
	if len(reasons) == 0 {
		s.Info = info
		if in := s.Inline; in != nil {
			in.Name = nameFor(in.Name, info.Format)
		}
	}
	return reasons
}

// nameFor is the upload name of inline audio of format named name: name
// with the format's extension, replacing a .wav or .flac that says the
// other format, added to anything else (an id such as "utt.01").
func nameFor(name, format string) string {
	ext := filepath.Ext(name)
	switch {
	case strings.EqualFold(ext, "."+format):
		return name
	case strings.EqualFold(ext, ".wav") || strings.EqualFold(ext, ".flac"):
		return strings.TrimSuffix(name, ext) + "." + format
	}
	return name + "." + format
}
