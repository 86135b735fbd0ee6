package analysis

import (
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/bundle"
)

// The validity module: the run's checks on itself (analysis/engine.Validity,
// docs/VALIDITY.md), computed once per capture and knee threshold.
//
//	load("validity", "check", "CHECKS")
//	check(capture, knee_threshold = 0.10)
//	    # {findings: [{check, severity, level, text, fix, passes_affected, passes_scored, sample}],
//	    #  ran: [check], not_run: {check: why}, failures: [{level, cause, count}],
//	    #  intervals: [{level, passes, ok, failed, req_s, latency_mean_s, latency_p95_s, wer,
//	    #               converged, converge_spread}], failed_levels: [level]}
//	    # an interval is {value, lo, hi, n} (None where it cannot be had)
func validityModule() *starlarkstruct.Module {
	return newModule("validity", "validity.", map[string]builtinFunc{"check": validityCheck}, starlark.StringDict{"CHECKS": stringList(engine.ValidityChecks)})
}

// Validity is the capture's validity checks with the knee threshold th
// (engine.KneeThreshold, unless the analysis's options say another).
func (c *Capture) Validity(th float64) (*engine.ValidityResult, error) {
	return c.validity.get(th, func() (*engine.ValidityResult, error) {
		reqs, err := c.Requests()
		if err != nil {
			return nil, err
		}
		gpu, procs, err := engine.ReadGPU(c.Bundle.Path(bundle.GPUFile))
		if err != nil {
			return nil, err
		}
		cores, err := bundle.ReadAll[bundle.CPURecord](c.Bundle.Path(bundle.CPUsFile))
		if err != nil {
			return nil, err
		}
		m := c.Bundle.Manifest
		sent, _ := m.Config["model"].(string)
		var pidUnknown string
		if how, _ := m.Extra["target_pid_how"].(string); strings.HasPrefix(how, bundle.PIDUnknown) {
			pidUnknown = how
		}
		return engine.Validity(engine.ValidityInput{Reqs: reqs, Levels: m.Levels, KneeThreshold: th, GPU: gpu, GPUProcs: procs, Cores: cores,
			Models: m.Fingerprint.ModelIDs(), Model: sent, PIDUnknown: pidUnknown}), nil
	})
}

// Validity loads the bundle in dir and runs its validity checks with the
// default knee threshold.
func Validity(dir string) (*engine.ValidityResult, error) {
	c, err := Load(dir)
	if err != nil {
		return nil, err
	}
	return c.Validity(engine.KneeThreshold)
}

func validityCheck(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var cv *captureValue
	th := engine.KneeThreshold
	if err := starlark.UnpackArgs(b.Name(), args, kw, "capture", &cv, "knee_threshold?", &th); err != nil {
		return nil, err
	}
	v, err := cv.c.Validity(th)
	if err != nil {
		return nil, err
	}
	return jsonValue(v)
}
