package audio

import (
	"fmt"
	"math"
	"slices"
)

// Mono returns a one-channel copy of p whose samples are the mean of p's
// channels. p is not modified; a mono p is copied too, so the result never
// aliases p.
func (p *PCM) Mono() *PCM {
	ch := max(p.Channels, 1)
	n := len(p.Samples) / ch
	out := make([]float32, n)
	if ch == 1 {
		copy(out, p.Samples)
	} else {
		for i := range n {
			var acc float64
			for _, v := range p.Samples[i*ch : (i+1)*ch] {
				acc += float64(v)
			}
			out[i] = float32(acc / float64(ch))
		}
	}
	return &PCM{SampleRate: p.SampleRate, Channels: 1, Samples: out}
}

// Resample returns a copy of p converted to rate Hz, channel by channel.
//
// It uses band-limited (windowed-sinc) interpolation: each output sample is a
// weighted sum of the input samples within resampleZeros zero-crossings of
// its position, with a Blackman-windowed sinc whose cut-off is the lower of
// the two Nyquist frequencies, so downsampling (44.1 kHz to 16 kHz, say)
// filters out what the new rate cannot hold instead of aliasing it into the
// speech band. Weights are normalised to sum to 1, so a constant signal
// stays constant; samples before the start and after the end are taken to
// equal the first and last sample. When the ratio of the rates reduces to a
// denominator of at most maxPhases the filter weights are computed once per
// phase (44.1 kHz to 16 kHz has 160 phases); otherwise per output sample.
//
// The output has round(Frames()*rate/SampleRate) frames. Resample panics if
// rate is not positive or p.SampleRate is not positive.
func (p *PCM) Resample(rate int) *PCM {
	if rate <= 0 || p.SampleRate <= 0 {
		panic(fmt.Sprintf("audio: Resample from %d Hz to %d Hz", p.SampleRate, rate))
	}
	ch := max(p.Channels, 1)
	if rate == p.SampleRate {
		return &PCM{SampleRate: rate, Channels: ch, Samples: slices.Clone(p.Samples[:len(p.Samples)/ch*ch])}
	}
	g := gcd(rate, p.SampleRate)
	up, down := int64(rate/g), int64(p.SampleRate/g) // output step is down/up input samples
	inFrames := int64(len(p.Samples) / ch)
	outFrames := (inFrames*up + down/2) / down
	out := make([]float32, outFrames*int64(ch))
	if inFrames == 0 {
		return &PCM{SampleRate: rate, Channels: ch, Samples: out}
	}

	cutoff := min(1, float64(up)/float64(down)) // relative to the input Nyquist
	half := int(math.Ceil(resampleZeros / cutoff))
	taps := 2 * half
	var table [][]float64
	if up <= maxPhases {
		table = make([][]float64, up)
		for ph := range table {
			table[ph] = sincWeights(float64(ph)/float64(up), half, cutoff)
		}
	}
	for j := range outFrames {
		base := j * down / up // input index at or before the output position
		ph := j * down % up
		var w []float64
		if table != nil {
			w = table[ph]
		} else {
			w = sincWeights(float64(ph)/float64(up), half, cutoff)
		}
		for c := range ch {
			var acc float64
			for k := range taps {
				i := min(max(base-int64(half)+1+int64(k), 0), inFrames-1)
				acc += w[k] * float64(p.Samples[i*int64(ch)+int64(c)])
			}
			out[j*int64(ch)+int64(c)] = float32(acc)
		}
	}
	return &PCM{SampleRate: rate, Channels: ch, Samples: out}
}

const (
	// resampleZeros is the half-width of the resampling filter in
	// zero-crossings of the sinc.
	resampleZeros = 16
	// maxPhases bounds the size of the precomputed filter table.
	maxPhases = 4096
)

// sincWeights returns the 2*half filter weights for an output sample lying
// frac (0 <= frac < 1) input samples after input sample base; weight k
// applies to input sample base-half+1+k.
func sincWeights(frac float64, half int, cutoff float64) []float64 {
	w := make([]float64, 2*half)
	var sum float64
	for k := range w {
		x := float64(k-half+1) - frac // distance from the output position
		v := cutoff * sinc(cutoff*x) * blackman(x/float64(half))
		w[k] = v
		sum += v
	}
	for k := range w {
		w[k] /= sum
	}
	return w
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	return math.Sin(math.Pi*x) / (math.Pi * x)
}

// blackman is the Blackman window on -1..1, zero outside.
func blackman(t float64) float64 {
	if t <= -1 || t >= 1 {
		return 0
	}
	a := math.Pi * (t + 1) // 0..2π across the window
	return 0.42 - 0.5*math.Cos(a) + 0.08*math.Cos(2*a)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// PCM16 returns the samples as interleaved little-endian signed 16-bit
// integers, scaled by 32768, rounded, and clipped to -32768..32767. A sample
// decoded from 16-bit PCM comes back as the same integer.
func (p *PCM) PCM16() []byte {
	b := make([]byte, 2*len(p.Samples))
	for i, v := range p.Samples {
		le.PutUint16(b[2*i:], uint16(toInt16(v)))
	}
	return b
}

func toInt16(v float32) int16 {
	x := math.Round(float64(v) * 32768)
	if math.IsNaN(x) {
		return 0
	}
	return int16(min(max(x, math.MinInt16), math.MaxInt16))
}
