package capture

import (
	"fmt"
	"strings"

	"github.com/asrprof/asrprof/bench/driver"
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

// recordSelfCheck keeps a pass's self-check in the manifest and says it
// when the driver lagged.
func (s *Session) recordSelfCheck(lv SweepPoint, repeat int, warmup bool, res *driver.Pass, say func(string)) {
	c := res.SelfCheck
	if c == nil {
		return
	}
	if len(c.Lagging) > 0 {
		say(fmt.Sprintf("%s repeat %d: %s", model.LevelLabel(lv.Name), repeat, c))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &s.manifest
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
