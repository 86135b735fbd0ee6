package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/option"
	"github.com/asrprof/asrprof/runbook"
	"github.com/asrprof/asrprof/serve"
)

const serveUsage = `Usage: asrprof serve [--listen ADDR] [--token TOKEN] [--dir DIR]

Runs asrprof as a daemon: a JSON API that starts, lists, follows and stops
captures (driven or probes-only, with the options of 'asrprof capture'),
serves their reports and bundles, a page listing them (GET /), and live
Prometheus metrics of what its captures record (GET /metrics): per GPU
utilization, SM activity, memory and power; the target's threads' CPU share
and run-queue latency; CUDA launches/s; per capture requests in flight, by
status, and a latency histogram.

It is also the agent of remote captures: 'asrprof capture --agent URL' on
another host drives the server while the probes run here, beside it; at the
end the probe data goes back into that capture's bundle (docs/SCALE.md).

It listens on loopback by default. Any other address needs --token: every
route then asks for 'Authorization: Bearer TOKEN'. Without one it refuses
to start; the traffic is plain HTTP either way.

API (JSON):
  POST /v1/captures             {"args": ["--target", "http://127.0.0.1:8000", "--dataset", "PATH", ...]}
                                the flags of 'asrprof capture' (not --out: bundles go to DIR/<id>)
  GET  /v1/captures             every capture, its state and progress
  GET  /v1/captures/ID          one
  GET  /v1/captures/ID/log      its progress lines (?follow=1: streamed until it ends)
  POST /v1/captures/ID/stop     stop it (?wait=1: answer once its bundle is final)
  GET  /v1/captures/ID/report   its bundle's report.html
  GET  /v1/captures/ID/bundle   its bundle as tar.gz
  GET  /v1/time                 this host's clock (the agents' NTP-style offset)

Examples:
  asrprof serve --pidfile runs/serve.pid &     # kill "$(cat runs/serve.pid)" stops it
  curl -s localhost:7070/v1/captures -d '{"args":["--probes-only","--pid","1234","--duration","60s"]}'

  # An agent on a GPU host, reachable by the driver's host:
  ASRPROF_TOKEN=secret asrprof serve --listen 10.0.0.2:7070 --dir /var/tmp/asrprof
  # ... and on the driver's host:
  ASRPROF_AGENT_TOKEN=secret asrprof capture --agent http://10.0.0.2:7070 \
      --target http://10.0.0.2:8000 --dataset data/manifest.jsonl --concurrency 1,8

Flags:
`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", serveUsage, stderr)
	cfg := serve.DefaultConfig()
	option.DefineAll(fs, serve.Options(), &cfg, nil)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (flags start with --)", errUsage, fs.Arg(0))
	}
	cfg.Token = cmp.Or(cfg.Token, os.Getenv("ASRPROF_TOKEN")) // not a flag default: --help would show it
	cfg.Parse = parseAPICapture
	cfg.Finish = finisher(analysis.LengthBuckets{})
	srv, err := serve.New(cfg)
	if err != nil {
		return err
	}
	ln, err := srv.Listen(stderr)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if cfg.PIDFile != "" {
		if err := os.WriteFile(cfg.PIDFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			ln.Close()
			return fmt.Errorf("%w: --pidfile: %v", errUsage, err)
		}
		defer os.Remove(cfg.PIDFile)
	}
	fmt.Fprintf(stderr, "asrprof serve: listening on http://%s (pid %d; bundles in %s)\n", ln.Addr(), os.Getpid(), cfg.Dir)
	return srv.Serve(ctx, ln)
}

// parseAPICapture is the CLI's capture parser for the API's args: the
// same flags and defaults; an option marked Local (--out, --server-cmd,
// --gpu-corunner...) is refused.
func parseAPICapture(args []string) (capture.Config, error) {
	var msg strings.Builder
	cfg, rb, err := parseCapture("capture", args, io.Discard, &msg)
	if err != nil {
		if err == errHelp {
			return cfg, fmt.Errorf("--help is not an option here; see 'asrprof capture --help'")
		}
		return cfg, &reworded{msg: errorText(err), err: err} // as the command line prints it
	}
	for _, o := range append(capture.Options(), runbook.Options("capture")...) {
		if o.Local && rb.set[o.Name] {
			return cfg, fmt.Errorf("--%s is not taken over the API: the daemon names its bundles (<dir>/<id>) and starts no servers", o.Name)
		}
	}
	if err := checkCapture(cfg); err != nil { // as the command line checks it, before it is accepted
		return cfg, &reworded{msg: errorText(err), err: err}
	}
	return cfg, nil
}
