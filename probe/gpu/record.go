package gpu

import "github.com/asrprof/asrprof/bundle"

// agg is a running mean and maximum.
type agg struct {
	sum, max float64
	n        int
}

func (a *agg) add(v float64) {
	if a.n == 0 || v > a.max {
		a.max = v
	}
	a.sum += v
	a.n++
}

func (a *agg) meanPtr() *float64 { return a.ptr(a.sum / float64(a.n)) }

func (a *agg) maxPtr() *float64 { return a.ptr(a.max) }

// ptr returns &v, or nil when a has no sample.
func (a *agg) ptr(v float64) *float64 {
	if a.n == 0 {
		return nil
	}
	return &v
}

// periodAcc accumulates one GPU's samples over a pass.
type periodAcc struct {
	util, power, memUsed, smActive, smOcc, tensor, dram, smClock, temp agg
	throttle                                                           uint64
	gpm                                                                int
}

// add adds rec to the summary.
func (a *periodAcc) add(rec *bundle.GPURecord) {
	switch {
	case rec.GPUUtil != nil:
		a.util.add(rec.UtilPct)
	case rec.GPUPower != nil:
		a.power.add(rec.PowerW)
	case rec.GPUMem != nil:
		a.memUsed.add(rec.UsedMiB)
	case rec.GPUClock != nil:
		a.smClock.add(float64(rec.SMMHz))
	case rec.GPUTemp != nil:
		a.temp.add(float64(rec.TempC))
	case rec.GPUThrottle != nil:
		a.throttle |= rec.Reasons
	case rec.GPUGPM != nil:
		a.gpm++
		for _, m := range []struct {
			v *float64
			a *agg
		}{{rec.SMActivePct, &a.smActive}, {rec.SMOccupancyPct, &a.smOcc}, {rec.TensorActivePct, &a.tensor}, {rec.DRAMBWPct, &a.dram}} {
			if m.v != nil {
				m.a.add(*m.v)
			}
		}
	}
}

// summary turns an accumulator into the period record for gpu.
func (a *periodAcc) summary(gpu int, level string, repeat int, warmup bool, start, end int64) *bundle.GPURecord {
	return &bundle.GPURecord{GPUHead: bundle.GPUHead{TS: end, GPU: gpu, Kind: bundle.GPUKindPeriod}, GPUPeriod: &bundle.GPUPeriod{
		Level:            level,
		Repeat:           repeat,
		Warmup:           warmup,
		StartUnixNs:      start,
		EndUnixNs:        end,
		UtilMean:         a.util.meanPtr(),
		UtilMax:          a.util.maxPtr(),
		MemUsedMaxMiB:    a.memUsed.maxPtr(),
		PowerMeanW:       a.power.meanPtr(),
		PowerMaxW:        a.power.maxPtr(),
		SMActiveMean:     a.smActive.meanPtr(),
		SMOccupancyMean:  a.smOcc.meanPtr(),
		TensorActiveMean: a.tensor.meanPtr(),
		DRAMBWMean:       a.dram.meanPtr(),
		SMClockMeanMHz:   a.smClock.meanPtr(),
		TempMaxC:         a.temp.maxPtr(),
		ThrottleReasons:  a.throttle,
		ThrottleNames:    ThrottleNames(a.throttle),
		UtilSamples:      a.util.n,
		PowerSamples:     a.power.n,
		GPMSamples:       a.gpm,
	}}
}
