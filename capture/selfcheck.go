package capture

import (
	"fmt"
	"strings"

	"github.com/asrprof/asrprof/bench/driver"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
)

// The driver's self-check (bench/driver.SelfCheck, docs/BUNDLE.md): every
// pass records in the manifest, extra.driver_self_check, how far the
// driver fell behind and the CPU its process used; a pass in which it
// broke a limit is said on stderr at the pass's end and noted. The
// capture records; scripts/lib/driver.star interprets.

// SelfCheckRecord is one entry of the manifest's extra.driver_self_check.
type SelfCheckRecord struct {
	Level  string `json:"level"`
	Repeat int    `json:"repeat"`
	Warmup bool   `json:"warmup,omitempty"`
	driver.SelfCheck
}

// recordDriver keeps a pass's driver checks in the manifest: its
// self-check and, for an open-loop pass, its schedule fidelity
// (extra.schedule_fidelity, extra.replay; capture/replay.go). It says the
// fidelity (with --quiet only when lost) and a driver that lagged, and
// notes either.
func (s *Session) recordDriver(lv SweepPoint, repeat int, warmup bool, res *driver.Pass, say func(string)) {
	f, c := res.Fidelity, res.SelfCheck
	pass := fmt.Sprintf("%s repeat %d", model.LevelLabel(lv.Name), repeat)
	if f != nil && (!s.cfg.Quiet || len(f.Lost) > 0) {
		say(pass + ": " + driver.FidelityLine(f))
	}
	if c != nil && len(c.Lagging) > 0 {
		say(fmt.Sprintf("%s: %s", pass, c))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &s.manifest
	if f != nil {
		x := extra(m)
		if s.replay != nil {
			x["replay"] = s.replay.info
		}
		x["schedule_fidelity_limits"] = map[string]float64{
			"send_lag_p99_s": driver.FidelityP99Limit.Seconds(), "send_lag_max_s": driver.FidelityMaxLimit.Seconds()}
		recs, _ := x["schedule_fidelity"].([]bundle.FidelityRecord)
		x["schedule_fidelity"] = append(recs, bundle.FidelityRecord{Level: lv.Name, Repeat: repeat, Warmup: warmup, Fidelity: *f})
		if len(f.Lost) > 0 {
			m.Notes = append(m.Notes, fmt.Sprintf("%s repeat %d: schedule fidelity lost (%s)", lv.Name, repeat, strings.Join(f.Lost, ", ")))
		}
	}
	if c == nil {
		return
	}
	extra(m)["driver_self_check_limits"] = map[string]float64{
		"send_lag_p99_s": driver.FidelityP99Limit.Seconds(), "send_lag_max_s": driver.FidelityMaxLimit.Seconds(),
		"slot_gap_p99_s": driver.SlotGapP99Limit.Seconds(), "cpu_share_of_allowed": driver.CPUShareLimit,
		"runnable_wait_p99_s": driver.RunnableWaitP99Limit.Seconds(), "read_stall_max_s": driver.ReadStallLimit.Seconds()}
	recs, _ := m.Extra["driver_self_check"].([]SelfCheckRecord)
	m.Extra["driver_self_check"] = append(recs, SelfCheckRecord{Level: lv.Name, Repeat: repeat, Warmup: warmup, SelfCheck: *c})
	if len(c.Lagging) > 0 && !warmup {
		m.Notes = append(m.Notes, fmt.Sprintf("%s repeat %d: the driver lagged (%s)", lv.Name, repeat, strings.Join(c.Lagging, ", ")))
	}
}
