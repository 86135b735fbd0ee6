package main

import (
	"context"
	"fmt"
	"io"
	"net/url"

	"github.com/asrprof/asrprof/option"
	"github.com/asrprof/asrprof/probe/doctor"
)

func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("doctor", `Usage: asrprof doctor [--target URL] [--pid N] [--header "NAME: VALUE"]

Checks what profiling needs on this machine (privileges, BTF, tracefs, perf
events, eBPF, the memlock limit, NVML and GPM, the NVML clock offset) and,
when asked, the target server (its /health, the model its /v1/models lists
or the API key it wants, the process listening on its port); prints one
line per check, "ok" or "no" with what to do. It always exits 0 unless the
flags are wrong.

Example:
  sudo asrprof doctor --target http://127.0.0.1:8000

Flags:
`, stderr)
	var o doctor.Options
	option.DefineAll(fs, doctor.OptionTable(), &o, &o)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if o.PID < 0 {
		return fmt.Errorf("%w: --pid must be positive", errUsage)
	}
	if u, err := url.Parse(o.Target); o.Target != "" && (err != nil || u.Scheme == "" || u.Host == "") {
		return fmt.Errorf("%w: --target %q: want a URL such as http://127.0.0.1:8000", errUsage, o.Target)
	}
	if _, err := option.ParseHeader(o.Headers); err != nil {
		return fmt.Errorf("%w: --header: %v", errUsage, err)
	}
	for _, f := range doctor.Check(ctx, o) {
		fmt.Fprintln(stdout, f)
	}
	return nil
}
