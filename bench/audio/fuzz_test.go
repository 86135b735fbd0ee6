package audio

import (
	"bytes"
	"testing"

	"github.com/asrprof/asrprof/internal/audiotest"
)

// FuzzProbeWAV feeds arbitrary bytes to probe and decode: neither may panic,
// and when probe accepts a file, decode must too, with the same shape.
func FuzzProbeWAV(f *testing.F) {
	f.Add(audiotest.WAV16(16000, 1, 1, 2, 3, -4))
	f.Add(audiotest.RIFF(audiotest.Chunk("fmt ", audiotest.FmtExtensible(3, 2, 8000, 32)), audiotest.Chunk("LIST", []byte("odd")), audiotest.ChunkSize("data", 0xffffffff, make([]byte, 16))))
	f.Add(audiotest.RIFF(audiotest.Chunk("fmt ", audiotest.Fmt(1, 1, 8000, 24)), audiotest.ChunkSize("data", 0, make([]byte, 9))))
	f.Add([]byte("RIFF\x00\x00\x00\x00WAVEfmt \x10\x00\x00"))
	f.Add([]byte("ID3\x04\x00\x00\x00\x00\x00\x00fLaC"))
	if b, err := audiotest.FLAC(audiotest.FLACSpec{Rate: 16000, BitsPerSample: 16, Channels: [][]int32{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}}); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, info, perr := decode("fuzz", bytes.NewReader(b), int64(len(b)), false)
		p, info2, derr := decode("fuzz", bytes.NewReader(b), int64(len(b)), true)
		if (perr == nil) != (derr == nil) {
			t.Fatalf("probe error %v, decode error %v", perr, derr)
		}
		if perr != nil {
			return
		}
		if info != info2 {
			t.Fatalf("probe %+v != decode %+v", info, info2)
		}
		if int64(p.Frames()) != info.Frames || len(p.Samples) != p.Frames()*p.Channels || p.Channels != info.Channels {
			t.Fatalf("decoded %d samples x %d channels, probe says %d frames x %d", len(p.Samples), p.Channels, info.Frames, info.Channels)
		}
	})
}
