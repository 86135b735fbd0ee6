package audio_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/asrprof/asrprof/bench/audio"
	"github.com/asrprof/asrprof/internal/audiotest"
)

func sine(rate int, hz, amp float64, frames int) []float32 {
	s := make([]float32, frames)
	for i := range s {
		s[i] = float32(amp * math.Sin(2*math.Pi*hz*float64(i)/float64(rate)))
	}
	return s
}

func rms(s []float32) float64 {
	var acc float64
	for _, v := range s {
		acc += float64(v) * float64(v)
	}
	return math.Sqrt(acc / float64(len(s)))
}

func TestResampleLength(t *testing.T) {
	tests := []struct {
		from, to, frames, want int
	}{
		{44100, 16000, 44100, 16000},
		{48000, 16000, 48000, 16000},
		{8000, 16000, 8000, 16000},
		{22050, 16000, 11025, 8000},
		{16000, 16000, 1234, 1234},
		{44100, 16000, 100, 36}, // 36.28 rounds down
		{16000, 44100, 1, 3},    // 2.76 rounds up
		{16000, 8000, 0, 0},
	}
	for _, tt := range tests {
		in := &audio.PCM{SampleRate: tt.from, Channels: 1, Samples: make([]float32, tt.frames)}
		out := in.Resample(tt.to)
		if out.Frames() != tt.want || out.SampleRate != tt.to || out.Channels != 1 {
			t.Errorf("%d frames %d->%d Hz: got %d frames at %d Hz x %d, want %d", tt.frames, tt.from, tt.to, out.Frames(), out.SampleRate, out.Channels, tt.want)
		}
	}
}

func TestResampleSignal(t *testing.T) {
	tests := []struct {
		name     string
		from, to int
		hz       float64
	}{
		{"44.1k to 16k", 44100, 16000, 440},
		{"48k to 16k", 48000, 16000, 1000},
		{"8k to 16k", 8000, 16000, 300},
		{"16k to 44.1k", 16000, 44100, 3000},
		{"odd ratio", 16000, 11111, 500}, // 11111/16000 has no small common factor: weights per sample
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &audio.PCM{SampleRate: tt.from, Channels: 1, Samples: sine(tt.from, tt.hz, 0.5, tt.from/2)}
			out := in.Resample(tt.to)
			want := sine(tt.to, tt.hz, 0.5, out.Frames())
			// Compare away from the edges, where the filter sees clamped input.
			var worst float64
			for i := 100; i < len(want)-100; i++ {
				worst = max(worst, math.Abs(float64(out.Samples[i]-want[i])))
			}
			if worst > 2e-3 {
				t.Errorf("largest deviation from the ideal sine = %g", worst)
			}
		})
	}
}

func TestResampleRemovesAliases(t *testing.T) {
	// A 7 kHz tone cannot exist at 8 kHz (Nyquist 4 kHz): a band-limited
	// resampler removes it, naive interpolation folds it to 1 kHz.
	in := &audio.PCM{SampleRate: 44100, Channels: 1, Samples: sine(44100, 7000, 0.5, 44100)}
	out := in.Resample(8000)
	if r := rms(out.Samples[200 : len(out.Samples)-200]); r > 0.01 {
		t.Errorf("RMS of a 7 kHz tone after resampling to 8 kHz = %g, want < 0.01 (input RMS 0.35)", r)
	}
	// A 1 kHz tone survives at full strength.
	in = &audio.PCM{SampleRate: 44100, Channels: 1, Samples: sine(44100, 1000, 0.5, 44100)}
	out = in.Resample(8000)
	if r := rms(out.Samples[200 : len(out.Samples)-200]); math.Abs(r-0.5/math.Sqrt2) > 0.01 {
		t.Errorf("RMS of a 1 kHz tone after resampling = %g, want %g", r, 0.5/math.Sqrt2)
	}
}

func TestResampleStereoAndConstant(t *testing.T) {
	const n = 4410
	s := make([]float32, 2*n)
	for i := range n {
		s[2*i], s[2*i+1] = 0.5, -0.25
	}
	in := &audio.PCM{SampleRate: 44100, Channels: 2, Samples: s}
	out := in.Resample(16000)
	if out.Channels != 2 || out.Frames() != 1600 {
		t.Fatalf("got %d frames x %d channels, want 1600 x 2", out.Frames(), out.Channels)
	}
	for i := range out.Frames() {
		l, r := out.Samples[2*i], out.Samples[2*i+1]
		if math.Abs(float64(l)-0.5) > 1e-5 || math.Abs(float64(r)+0.25) > 1e-5 {
			t.Fatalf("frame %d = (%g, %g), want (0.5, -0.25): channels mixed or DC gain not 1", i, l, r)
		}
	}
	if in.Samples[0] != 0.5 || len(in.Samples) != 2*n {
		t.Error("Resample modified its input")
	}
}

func TestResampleRoundTrip(t *testing.T) {
	orig := &audio.PCM{SampleRate: 16000, Channels: 1, Samples: sine(16000, 440, 0.8, 16000)}
	back := orig.Resample(48000).Resample(16000)
	if back.Frames() != orig.Frames() {
		t.Fatalf("round trip changed length %d -> %d", orig.Frames(), back.Frames())
	}
	var worst float64
	for i := 50; i < orig.Frames()-50; i++ {
		worst = max(worst, math.Abs(float64(back.Samples[i]-orig.Samples[i])))
	}
	if worst > 1e-3 {
		t.Errorf("16k->48k->16k deviates by up to %g", worst)
	}
}

func TestResamplePanicsOnBadRate(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Resample(0) did not panic")
		}
	}()
	(&audio.PCM{SampleRate: 16000, Channels: 1, Samples: []float32{0}}).Resample(0)
}

func TestMono(t *testing.T) {
	tests := []struct {
		name     string
		channels int
		in, want []float32
	}{
		{"stereo", 2, []float32{0.5, -0.5, 1, 0, -1, -0.5}, []float32{0, 0.5, -0.75}},
		{"three channels", 3, []float32{0.3, 0.6, 0.9}, []float32{0.6}},
		{"mono copy", 1, []float32{0.1, 0.2}, []float32{0.1, 0.2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &audio.PCM{SampleRate: 8000, Channels: tt.channels, Samples: tt.in}
			out := in.Mono()
			if out.Channels != 1 || out.SampleRate != 8000 || !equalFloats(out.Samples, tt.want, 1e-7) {
				t.Fatalf("Mono = %d Hz x %d %v, want 8000 x 1 %v", out.SampleRate, out.Channels, out.Samples, tt.want)
			}
			out.Samples[0] = 42
			if in.Samples[0] == 42 {
				t.Error("Mono result aliases its input")
			}
		})
	}
}

func TestPCM16(t *testing.T) {
	p := &audio.PCM{SampleRate: 16000, Channels: 1, Samples: []float32{0, 0.5, -0.5, 1, -1, 1.5, -2, 1.0 / 32768, 0.49999 / 32768}}
	want := audiotest.PCM16(0, 16384, -16384, 32767, -32768, 32767, -32768, 1, 0)
	if got := p.PCM16(); !bytes.Equal(got, want) {
		t.Errorf("PCM16 = % x\nwant    % x", got, want)
	}
}

func TestPCM16RoundTrip(t *testing.T) {
	// Every 16-bit value survives decode -> PCM16 unchanged.
	vals := make([]int16, 0, 65536)
	for v := math.MinInt16; v <= math.MaxInt16; v++ {
		vals = append(vals, int16(v))
	}
	data := audiotest.PCM16(vals...)
	p, err := audio.DecodeBytes("all.wav", audiotest.WAV16(16000, 2, vals...))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.PCM16(); !bytes.Equal(got, data) {
		for i := range vals {
			if got[2*i] != data[2*i] || got[2*i+1] != data[2*i+1] {
				t.Fatalf("value %d came back as % x", vals[i], got[2*i:2*i+2])
			}
		}
		t.Fatalf("PCM16 length %d, want %d", len(got), len(data))
	}
}
