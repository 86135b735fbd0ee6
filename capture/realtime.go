package capture

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/asrprof/asrprof/bench/driver"
	"github.com/asrprof/asrprof/bench/protocol"
)

// checkTarget is the target check before anything is sent. File protocols
// use probeTarget. A realtime target may be WebSocket-only (Fun-ASR's
// server answers a plain GET with 4xx): it is probed over http(s) at its
// host, and any HTTP answer other than 200, 404 or 503 (a server loading)
// counts as reachable, without a model list.
func checkTarget(ctx context.Context, cfg *Config, notify func(string)) (any, error) {
	h := cfg.header()
	if !protocol.IsRealtime(cfg.Protocol) {
		return probeTarget(ctx, cfg.Target, h, cfg.ReadyTimeout, notify)
	}
	u, err := url.Parse(cfg.Target) // an http(s) or ws(s) URL: its http(s) scheme://host
	if err != nil {
		return nil, fmt.Errorf("--target %q: %w", cfg.Target, err)
	}
	base := cmp.Or(map[string]string{"ws": "http", "wss": "https"}[u.Scheme], u.Scheme) + "://" + u.Host
	hs, _, err := get(ctx, base+"/health", h)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrTargetUnreachable, base, err)
	}
	switch hs {
	case http.StatusOK, http.StatusNotFound, http.StatusServiceUnavailable:
		return probeTarget(ctx, base, h, cfg.ReadyTimeout, notify)
	}
	return nil, nil
}

// loopItems makes each item describe what one session sends: with
// --loops K the audio plays K times, so its duration and its reference
// transcript (for WER) are K times as long.
func loopItems(cfg *Config, items []driver.Item) []driver.Item {
	if !protocol.IsRealtime(cfg.Protocol) || cfg.Loops <= 1 {
		return items
	}
	out := make([]driver.Item, len(items))
	for i, it := range items {
		it.Ref = strings.Join(slices.Repeat([]string{it.Ref}, cfg.Loops), " ")
		it.AudioS *= float64(cfg.Loops)
		out[i] = it
	}
	return out
}

// sessionTimeout is the driver's per-request timeout. A paced realtime
// session lasts as long as its audio, so there --timeout counts on top of
// the longest item's (looped) duration.
func sessionTimeout(cfg *Config, items []driver.Item) time.Duration {
	if !protocol.IsRealtime(cfg.Protocol) || cfg.Pace == protocol.PaceNone {
		return cfg.Timeout
	}
	longest := 0.0
	for _, it := range items {
		longest = max(longest, it.AudioS)
	}
	return cfg.Timeout + time.Duration(longest*float64(time.Second))
}
