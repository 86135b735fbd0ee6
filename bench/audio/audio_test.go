package audio_test

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/bench/audio"
	"github.com/asrprof/asrprof/internal/audiotest"
)

// Shorthands for fixtures.
var (
	riff  = audiotest.RIFF
	chunk = audiotest.Chunk
	fmtc  = func(tag uint16, ch, rate, bits int) []byte { return chunk("fmt ", audiotest.Fmt(tag, ch, rate, bits)) }
	extc  = func(tag uint16, ch, rate, bits int) []byte {
		return chunk("fmt ", audiotest.FmtExtensible(tag, ch, rate, bits))
	}
	datac = func(b []byte) []byte { return chunk("data", b) }
)

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustFLAC(t *testing.T, s audiotest.FLACSpec) []byte {
	t.Helper()
	b, err := audiotest.FLAC(s)
	if err != nil {
		t.Fatalf("encoding FLAC fixture: %v", err)
	}
	return b
}

// ramp returns n samples counting up from start.
func ramp(start int32, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = start + int32(i)
	}
	return s
}

func TestProbe(t *testing.T) {
	zeros := func(n int) []byte { return make([]byte, n) }
	tests := []struct {
		name string
		file []byte
		want audio.Info
	}{
		{
			name: "pcm16 mono 16kHz",
			file: riff(fmtc(1, 1, 16000, 16), datac(zeros(2*16000))),
			want: audio.Info{Format: "wav", Encoding: "pcm16", SampleRate: 16000, Channels: 1, BitsPerSample: 16, Frames: 16000, DurationS: 1},
		},
		{
			name: "pcm16 mono 8kHz",
			file: riff(fmtc(1, 1, 8000, 16), datac(zeros(2*12000))),
			want: audio.Info{Format: "wav", Encoding: "pcm16", SampleRate: 8000, Channels: 1, BitsPerSample: 16, Frames: 12000, DurationS: 1.5},
		},
		{
			name: "pcm16 stereo 44.1kHz",
			file: riff(fmtc(1, 2, 44100, 16), datac(zeros(4*22050))),
			want: audio.Info{Format: "wav", Encoding: "pcm16", SampleRate: 44100, Channels: 2, BitsPerSample: 16, Frames: 22050, DurationS: 0.5},
		},
		{
			name: "pcm24 mono 16kHz",
			file: riff(fmtc(1, 1, 16000, 24), datac(zeros(3*4000))),
			want: audio.Info{Format: "wav", Encoding: "pcm24", SampleRate: 16000, Channels: 1, BitsPerSample: 24, Frames: 4000, DurationS: 0.25},
		},
		{
			name: "pcm32 stereo 8kHz",
			file: riff(fmtc(1, 2, 8000, 32), datac(zeros(8*2000))),
			want: audio.Info{Format: "wav", Encoding: "pcm32", SampleRate: 8000, Channels: 2, BitsPerSample: 32, Frames: 2000, DurationS: 0.25},
		},
		{
			name: "float32 mono 44.1kHz",
			file: riff(fmtc(3, 1, 44100, 32), datac(zeros(4*44100*2))),
			want: audio.Info{Format: "wav", Encoding: "float32", SampleRate: 44100, Channels: 1, BitsPerSample: 32, Frames: 88200, DurationS: 2},
		},
		{
			name: "extensible pcm24 stereo",
			file: riff(extc(1, 2, 48000, 24), datac(zeros(6*12000))),
			want: audio.Info{Format: "wav", Encoding: "pcm24", SampleRate: 48000, Channels: 2, BitsPerSample: 24, Frames: 12000, DurationS: 0.25},
		},
		{
			name: "extensible float32 mono",
			file: riff(extc(3, 1, 16000, 32), datac(zeros(4*8000))),
			want: audio.Info{Format: "wav", Encoding: "float32", SampleRate: 16000, Channels: 1, BitsPerSample: 32, Frames: 8000, DurationS: 0.5},
		},
		{
			name: "six channels",
			file: riff(fmtc(1, 6, 16000, 16), datac(zeros(12*1600))),
			want: audio.Info{Format: "wav", Encoding: "pcm16", SampleRate: 16000, Channels: 6, BitsPerSample: 16, Frames: 1600, DurationS: 0.1},
		},
		{
			name: "LIST and odd-sized chunks skipped with padding",
			file: riff(chunk("JUNK", zeros(3)), fmtc(1, 1, 16000, 16), chunk("LIST", []byte("INFOabcde")), datac(zeros(2*1600)), chunk("id3 ", zeros(7))),
			want: audio.Info{Format: "wav", Encoding: "pcm16", SampleRate: 16000, Channels: 1, BitsPerSample: 16, Frames: 1600, DurationS: 0.1},
		},
		{
			name: "data size 0 means rest of file",
			file: riff(fmtc(1, 1, 16000, 16), audiotest.ChunkSize("data", 0, zeros(2*800))),
			want: audio.Info{Format: "wav", Encoding: "pcm16", SampleRate: 16000, Channels: 1, BitsPerSample: 16, Frames: 800, DurationS: 0.05},
		},
		{
			name: "data size 0xFFFFFFFF means rest of file",
			file: riff(fmtc(1, 1, 16000, 16), audiotest.ChunkSize("data", 0xffffffff, zeros(2*800))),
			want: audio.Info{Format: "wav", Encoding: "pcm16", SampleRate: 16000, Channels: 1, BitsPerSample: 16, Frames: 800, DurationS: 0.05},
		},
		{
			name: "data chunk shorter than rest of file",
			file: riff(fmtc(1, 1, 16000, 16), audiotest.ChunkSize("data", 2*400, zeros(2*800))),
			want: audio.Info{Format: "wav", Encoding: "pcm16", SampleRate: 16000, Channels: 1, BitsPerSample: 16, Frames: 400, DurationS: 0.025},
		},
		{
			name: "trailing partial frame dropped",
			file: riff(fmtc(1, 2, 16000, 16), datac(zeros(4*10+3))),
			want: audio.Info{Format: "wav", Encoding: "pcm16", SampleRate: 16000, Channels: 2, BitsPerSample: 16, Frames: 10, DurationS: 10.0 / 16000},
		},
		{
			name: "empty data chunk",
			file: riff(fmtc(1, 1, 16000, 16), datac(nil)),
			want: audio.Info{Format: "wav", Encoding: "pcm16", SampleRate: 16000, Channels: 1, BitsPerSample: 16},
		},
		{
			name: "flac mono 16kHz without total in STREAMINFO",
			file: mustFLAC(t, audiotest.FLACSpec{Rate: 16000, BitsPerSample: 16, Channels: [][]int32{ramp(0, 8000)}, BlockSize: 1152}),
			want: audio.Info{Format: "flac", Encoding: "flac", SampleRate: 16000, Channels: 1, BitsPerSample: 16, Frames: 8000, DurationS: 0.5},
		},
		{
			name: "flac stereo 44.1kHz sealed",
			file: mustFLAC(t, audiotest.FLACSpec{Rate: 44100, BitsPerSample: 24, Channels: [][]int32{ramp(-500, 44100), ramp(100, 44100)}, Sealed: true}),
			want: audio.Info{Format: "flac", Encoding: "flac", SampleRate: 44100, Channels: 2, BitsPerSample: 24, Frames: 44100, DurationS: 1},
		},
		{
			name: "flac 8kHz 8-bit",
			file: mustFLAC(t, audiotest.FLACSpec{Rate: 8000, BitsPerSample: 8, Channels: [][]int32{ramp(-100, 200)}, Sealed: true}),
			want: audio.Info{Format: "flac", Encoding: "flac", SampleRate: 8000, Channels: 1, BitsPerSample: 8, Frames: 200, DurationS: 0.025},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "a.audio", tt.file)
			got, err := audio.Probe(path)
			if err != nil {
				t.Fatalf("Probe: %v", err)
			}
			if got != tt.want {
				t.Errorf("Probe =\n %+v\nwant\n %+v", got, tt.want)
			}
			// In memory (a dataset's inline audio) the same.
			if inMem, err := audio.ProbeBytes("row 1", tt.file); err != nil || inMem != tt.want {
				t.Errorf("ProbeBytes = %+v, %v, want %+v", inMem, err, tt.want)
			}
			// DecodeBytes must agree with Probe.
			p, err := audio.DecodeBytes(path, tt.file)
			if err != nil {
				t.Fatalf("DecodeBytes: %v", err)
			}
			frames := p.Frames()
			if durS := float64(frames) / float64(p.SampleRate); int64(frames) != tt.want.Frames || p.SampleRate != tt.want.SampleRate || p.Channels != tt.want.Channels || durS != tt.want.DurationS {
				t.Errorf("DecodeBytes: %d frames at %d Hz x %d channels (%gs), want %d at %d x %d (%gs)",
					frames, p.SampleRate, p.Channels, durS, tt.want.Frames, tt.want.SampleRate, tt.want.Channels, tt.want.DurationS)
			}
			if len(p.Samples) != frames*p.Channels {
				t.Errorf("DecodeBytes: %d samples for %d frames of %d channels", len(p.Samples), frames, p.Channels)
			}
		})
	}
}

func TestProbeErrors(t *testing.T) {
	valid := riff(fmtc(1, 1, 16000, 16), datac(make([]byte, 3200)))
	flacOK := mustFLAC(t, audiotest.FLACSpec{Rate: 16000, BitsPerSample: 16, Channels: [][]int32{ramp(0, 3000)}, BlockSize: 1024, Sealed: true})
	flacFlipped := bytes.Clone(flacOK)
	flacFlipped[len(flacFlipped)-100] ^= 0x40 // a sample bit in the last frame: CRC-16 fails
	random := make([]byte, 512)
	for i := range random {
		random[i] = byte(i*131 + 7) // deterministic "random" bytes without a known signature
	}
	badGUID := audiotest.FmtExtensible(1, 1, 16000, 16)
	badGUID[30] ^= 0xff

	tests := []struct {
		name   string
		file   []byte // nil: the file does not exist
		target error
		reason string // substring of the error
	}{
		{"missing file", nil, fs.ErrNotExist, "no such file"},
		{"empty file", []byte{}, audio.ErrCorrupt, "empty file"},
		{"truncated RIFF header", valid[:10], audio.ErrCorrupt, "truncated RIFF header"},
		{"truncated inside fmt chunk", valid[:30], audio.ErrCorrupt, "fmt chunk truncated"},
		{"header without chunks", valid[:12], audio.ErrCorrupt, "no fmt chunk"},
		{"three bytes of RIFF", []byte("RIF"), audio.ErrCorrupt, "truncated header"},
		{"no data chunk", riff(fmtc(1, 1, 16000, 16), chunk("LIST", []byte("INFO"))), audio.ErrCorrupt, "no data chunk"},
		{"data chunk truncated", valid[:len(valid)-100], audio.ErrCorrupt, "data chunk truncated"},
		{"short fmt chunk", riff(chunk("fmt ", make([]byte, 14)), datac(nil)), audio.ErrCorrupt, "fmt chunk too short"},
		{"block align mismatch", riff(chunk("fmt ", append(audiotest.Fmt(1, 2, 16000, 16)[:12], 3, 0, 16, 0)), datac(nil)), audio.ErrCorrupt, "block align"},
		{"zero channels", riff(fmtc(1, 0, 16000, 16), datac(nil)), audio.ErrCorrupt, "0 channels"},
		{"zero sample rate", riff(fmtc(1, 1, 0, 16), datac(nil)), audio.ErrCorrupt, "sample rate 0"},
		{"8-bit PCM", riff(fmtc(1, 1, 8000, 8), datac(make([]byte, 80))), audio.ErrUnsupported, "8-bit PCM"},
		{"12-bit PCM", riff(fmtc(1, 1, 8000, 12), datac(nil)), audio.ErrUnsupported, "12-bit PCM"},
		{"64-bit float", riff(fmtc(3, 1, 8000, 64), datac(nil)), audio.ErrUnsupported, "64-bit IEEE float"},
		{"A-law", riff(fmtc(audiotest.TagALaw, 1, 8000, 8), datac(make([]byte, 80))), audio.ErrUnsupported, "A-law"},
		{"extensible with unknown GUID", riff(chunk("fmt ", badGUID), datac(nil)), audio.ErrUnsupported, "sub-format GUID"},
		{"MP3 with ID3 tag", append([]byte("ID3\x04\x00\x00\x00\x00\x00\x10"), make([]byte, 40)...), audio.ErrUnsupported, "MP3"},
		{"bare MP3 frames", append([]byte{0xff, 0xfb, 0x90, 0x64}, make([]byte, 400)...), audio.ErrUnsupported, "MPEG audio"},
		{"Ogg", append([]byte("OggS\x00\x02"), make([]byte, 60)...), audio.ErrUnsupported, "Ogg"},
		{"AVI", append([]byte("RIFF\x00\x01\x00\x00AVI "), make([]byte, 60)...), audio.ErrUnsupported, "not WAVE"},
		{"random bytes", random, audio.ErrUnsupported, "unrecognised file signature"},
		{"text file", []byte("hello world\n"), audio.ErrUnsupported, "unrecognised file signature"},
		{"flac bit flip", flacFlipped, audio.ErrCorrupt, "CRC"},
		{"flac truncated mid-frame", flacOK[:len(flacOK)-50], audio.ErrCorrupt, "frame at sample 2048"},
		{"flac header only", flacOK[:20], audio.ErrCorrupt, "reading stream header"},
		{"flac total exceeds stream", mustFLAC(t, audiotest.FLACSpec{Rate: 16000, BitsPerSample: 16, Channels: [][]int32{ramp(0, 3000)}, DeclaredSamples: 4000}), audio.ErrCorrupt, "declares 4000 samples per channel, stream holds 3000"},
		{"flac wrong MD5", mustFLAC(t, audiotest.FLACSpec{Rate: 16000, BitsPerSample: 16, Channels: [][]int32{ramp(0, 3000)}, MD5: [16]byte{1, 2, 3}}), audio.ErrCorrupt, "MD5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.wav")
			if tt.file != nil {
				if err := os.WriteFile(path, tt.file, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			info, err := audio.Probe(path)
			if err == nil {
				t.Fatalf("Probe succeeded with %+v, want error", info)
			}
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, tt.target) {
					t.Errorf("%s error %q does not wrap %v", op, err, tt.target)
				}
				if !strings.HasPrefix(err.Error(), path+": ") {
					t.Errorf("%s error %q does not start with the path", op, err)
				}
				if !strings.Contains(err.Error(), tt.reason) {
					t.Errorf("%s error %q does not contain %q", op, err, tt.reason)
				}
			}
			check("Probe", err)
			if tt.file != nil {
				_, err := audio.ProbeBytes(path, tt.file)
				check("ProbeBytes", err)
			}
			if tt.file != nil {
				_, err = audio.DecodeBytes(path, tt.file)
				check("DecodeBytes", err)
			}
			// Unsupported and corrupt must stay apart.
			if errors.Is(err, audio.ErrUnsupported) && errors.Is(err, audio.ErrCorrupt) {
				t.Errorf("error %q is both unsupported and corrupt", err)
			}
		})
	}
	// The uncorrupted FLAC fixture decodes, so the failures above are due to
	// the damage.
	if _, err := audio.DecodeBytes("ok.flac", flacOK); err != nil {
		t.Errorf("undamaged FLAC: %v", err)
	}
}

func TestProbeDirectory(t *testing.T) {
	if _, err := audio.Probe(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Probe(dir) = %v, want not a regular file", err)
	}
}

func TestDecodeWAVSamples(t *testing.T) {
	const q15, q23 = 1 << 15, 1 << 23
	tests := []struct {
		name     string
		file     []byte
		channels int
		want     []float32
	}{
		{
			name:     "pcm16",
			file:     riff(fmtc(1, 1, 16000, 16), datac(audiotest.PCM16(-32768, -1, 0, 16384, 32767))),
			channels: 1,
			want:     []float32{-1, -1.0 / q15, 0, 0.5, 32767.0 / q15},
		},
		{
			name:     "pcm24 sign extension",
			file:     riff(fmtc(1, 1, 16000, 24), datac(audiotest.PCM24(-1<<23, -1, 0, 1<<22, 1<<23-1))),
			channels: 1,
			want:     []float32{-1, -1.0 / q23, 0, 0.5, (q23 - 1.0) / q23},
		},
		{
			name:     "pcm32",
			file:     riff(fmtc(1, 1, 16000, 32), datac(audiotest.PCM32(math.MinInt32, 0, 1<<30, -1<<29))),
			channels: 1,
			want:     []float32{-1, 0, 0.5, -0.25},
		},
		{
			name:     "float32 with NaN and Inf zeroed",
			file:     riff(fmtc(3, 1, 16000, 32), datac(audiotest.Float32(0.25, -0.75, float32(math.NaN()), float32(math.Inf(1)), 1.5))),
			channels: 1,
			want:     []float32{0.25, -0.75, 0, 0, 1.5},
		},
		{
			name:     "stereo stays interleaved",
			file:     riff(fmtc(1, 2, 8000, 16), datac(audiotest.PCM16(16384, -16384, 8192, -8192))),
			channels: 2,
			want:     []float32{0.5, -0.5, 0.25, -0.25},
		},
		{
			name:     "extensible pcm16 after odd LIST chunk",
			file:     riff(extc(1, 1, 16000, 16), chunk("LIST", []byte("odd")), datac(audiotest.PCM16(8192, -8192))),
			channels: 1,
			want:     []float32{0.25, -0.25},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := audio.DecodeBytes("t.wav", tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if p.Channels != tt.channels {
				t.Errorf("channels = %d, want %d", p.Channels, tt.channels)
			}
			if !equalFloats(p.Samples, tt.want, 0) {
				t.Errorf("samples = %v, want %v", p.Samples, tt.want)
			}
		})
	}
}

func TestDecodeFLACSamples(t *testing.T) {
	left := append([]int32{-32768, -1, 0, 1, 16384, 32767, 100, -100, 7}, ramp(1000, 39)...)
	right := ramp(-20, len(left))
	file := mustFLAC(t, audiotest.FLACSpec{Rate: 16000, BitsPerSample: 16, Channels: [][]int32{left, right}, BlockSize: 16, Sealed: true})
	p, err := audio.DecodeBytes("t.flac", file)
	if err != nil {
		t.Fatal(err)
	}
	var want []float32
	for i := range left {
		want = append(want, float32(left[i])/32768, float32(right[i])/32768)
	}
	if p.SampleRate != 16000 || p.Channels != 2 || !equalFloats(p.Samples, want, 0) {
		t.Errorf("got %d Hz x %d: %v\nwant 16000 Hz x 2: %v", p.SampleRate, p.Channels, p.Samples, want)
	}

	// 24-bit, several frames with a short last one, scaled by 2^23.
	long := ramp(-1<<23, 5000)
	file = mustFLAC(t, audiotest.FLACSpec{Rate: 44100, BitsPerSample: 24, Channels: [][]int32{long}, BlockSize: 1152})
	p, err = audio.DecodeBytes("t24.flac", file)
	if err != nil {
		t.Fatal(err)
	}
	if p.Frames() != len(long) {
		t.Fatalf("frames = %d, want %d", p.Frames(), len(long))
	}
	for i, v := range long {
		if w := float32(float64(v) / (1 << 23)); p.Samples[i] != w {
			t.Fatalf("sample %d = %v, want %v", i, p.Samples[i], w)
		}
	}
}

func TestDecodeBytes(t *testing.T) {
	file := riff(fmtc(1, 1, 16000, 16), datac(audiotest.PCM16(1, 2, 3, -4)))
	b, err := audio.DecodeBytes("a.wav", file)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{1.0 / 32768, 2.0 / 32768, 3.0 / 32768, -4.0 / 32768}; !equalFloats(b.Samples, want, 0) {
		t.Errorf("DecodeBytes = %v, want %v", b.Samples, want)
	}
	if _, err := audio.DecodeBytes("named.wav", []byte("nope")); err == nil || !strings.HasPrefix(err.Error(), "named.wav: ") {
		t.Errorf("DecodeBytes error %v does not name the input", err)
	}
}

func TestContentType(t *testing.T) {
	for format, want := range map[string]string{"wav": "audio/wav", "flac": "audio/flac", "mp3": "application/octet-stream"} {
		if got := audio.ContentType(format); got != want {
			t.Errorf("ContentType(%q) = %q, want %q", format, got, want)
		}
	}
}

func equalFloats(a, b []float32, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i])-float64(b[i])) > tol {
			return false
		}
	}
	return true
}
