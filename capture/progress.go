package capture

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/asrprof/asrprof/model"
)

// progress shows a bar per pass on a terminal and plain lines otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	quiet bool

	mu            sync.Mutex
	label         string
	total, n, bad int
	start, last   time.Time
}

func newProgress(w io.Writer, quiet bool) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, quiet: quiet, tty: ok && term.IsTerminal(int(f.Fd()))}
}

func (p *progress) begin(lv SweepPoint, repeat, repeats int, warmup bool, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	what := fmt.Sprintf("repeat %d/%d", repeat, repeats)
	if warmup {
		what = "warmup"
	}
	p.label = model.LevelLabel(lv.Name) + " " + what // c=4, rate=0.5/s, replay: as the tables write it
	p.total, p.n, p.bad = total, 0, 0
	p.start, p.last = time.Now(), time.Now()
	if !p.quiet && !p.tty {
		fmt.Fprintf(p.w, "%s: %d requests\n", p.label, total)
	}
}

func (p *progress) done(ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if !ok {
		p.bad++
	}
	if p.quiet {
		return
	}
	now := time.Now()
	if p.tty {
		if now.Sub(p.last) < 100*time.Millisecond && p.n < p.total {
			return
		}
		p.last = now
		const width = 30
		fill := 0
		if p.total > 0 {
			fill = width * p.n / p.total
		}
		fmt.Fprintf(p.w, "\r\033[K%-32s [%s%s] %d/%d  failed %d  %.1f req/s",
			p.label, strings.Repeat("=", fill), strings.Repeat(" ", width-fill),
			p.n, p.total, p.bad, float64(p.n)/now.Sub(p.start).Seconds())
		return
	}
	if now.Sub(p.last) >= 5*time.Second {
		p.last = now
		fmt.Fprintf(p.w, "%s: %d/%d done, %d failed\n", p.label, p.n, p.total, p.bad)
	}
}

func (p *progress) end(m model.PassMetrics) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quiet {
		return
	}
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	wer := fmt.Sprintf(", WER %.4f", m.CorpusWER)
	if m.Coverage.Evaluated == 0 {
		wer = "" // warmup passes are not scored
	}
	fmt.Fprintf(p.w, "%s: %d/%d ok, %.2f req/s, latency mean %.3fs p95 %.3fs%s\n",
		p.label, m.Coverage.Total-m.Coverage.Failed, m.Coverage.Total,
		m.RequestsPerS, m.LatencyMeanS, m.LatencyP95S, wer)
	if len(m.Coverage.FailureKinds) > 0 {
		fmt.Fprintf(p.w, "  failed: %s\n", failureText(m.Coverage))
	}
}

// failureText is a pass's failures for people, the most frequent kind
// first: "2 of 6 requests (HTTP 4xx: 2)". The validity table names each
// cause with the server's own message (docs/VALIDITY.md).
func failureText(c model.Coverage) string {
	kinds := slices.SortedFunc(maps.Keys(c.FailureKinds), func(a, b string) int {
		return cmp.Or(cmp.Compare(c.FailureKinds[b], c.FailureKinds[a]), cmp.Compare(a, b))
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		name := strings.ReplaceAll(k, "_", " ")
		if strings.HasPrefix(k, "http_") {
			name = "HTTP " + strings.TrimPrefix(k, "http_")
		}
		parts[i] = fmt.Sprintf("%s: %d", name, c.FailureKinds[k])
	}
	return fmt.Sprintf("%d of %d requests (%s)", c.Failed, c.Total, strings.Join(parts, ", "))
}
