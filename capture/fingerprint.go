package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/asrprof/asrprof/model"
)

// Version is asrprof's version, set at link time by the Makefile.
var Version = "dev"

// ErrTargetUnreachable means the target did not answer before the run
// started; nothing was sent to it.
var ErrTargetUnreachable = errors.New("target did not answer")

// probeTarget checks that the server answers (GET /health, else GET
// /v1/models) and returns its /v1/models answer when it has one. A /health
// that answers but not yet 200 (a server still loading its model) is polled
// until ready; notify is told once that we are waiting.
func probeTarget(ctx context.Context, base string, h http.Header, ready time.Duration, notify func(string)) (models any, err error) {
	base = strings.TrimRight(base, "/")
	deadline := time.Now().Add(ready)
	told := false
	for {
		hs, hb, herr := get(ctx, base+"/health", h)
		if herr == nil && hs != http.StatusOK && hs != http.StatusNotFound && time.Now().Before(deadline) {
			if !told {
				notify(fmt.Sprintf("waiting up to %s for %s/health (HTTP %d: %.80s)", ready, base, hs, strings.TrimSpace(string(hb))))
				told = true
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		ms, mb, merr := get(ctx, base+"/v1/models", h)
		if herr != nil && merr != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrTargetUnreachable, base, herr)
		}
		if herr == nil && hs != http.StatusOK && hs != http.StatusNotFound {
			return nil, fmt.Errorf("%w: %s/health still answers HTTP %d after %s", ErrTargetUnreachable, base, hs, ready)
		}
		if merr == nil && ms == http.StatusOK {
			var v any
			if json.Unmarshal(mb, &v) == nil {
				models = v
			}
		}
		return models, nil
	}
}

// get is a GET of url with the headers h and a 5 s timeout: the status
// and the first MiB of the body.
func get(ctx context.Context, url string, h http.Header) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	maps.Copy(req.Header, h)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, nil
}

func buildFingerprint(target string, models any, dsSHA string, n int) model.Fingerprint {
	fp := model.Fingerprint{
		Version:       Version,
		GoVersion:     runtime.Version(),
		CPUCount:      runtime.NumCPU(),
		TargetURL:     target,
		TargetModels:  models,
		DatasetSHA256: dsSHA,
		DatasetCount:  n,
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				fp.GitCommit = s.Value
			case "vcs.modified":
				if s.Value == "true" && fp.GitCommit != "" {
					fp.GitCommit += "+dirty"
				}
			}
		}
	}
	fp.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		fp.Kernel = strings.TrimSpace(string(b))
	}
	fp.CPUModel = runtime.GOARCH // where /proc/cpuinfo names no model
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.Lines(string(cpuinfo)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			fp.CPUModel = strings.TrimSpace(v)
			break
		}
	}
	return fp
}
