// Package audiotest builds audio files in memory for tests: WAV files chunk
// by chunk (so tests can damage any field) and FLAC files through
// github.com/mewkiz/flac's encoder. Nothing here is meant for production
// paths; tests generate their fixtures instead of committing binaries.
package audiotest

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"os"

	"github.com/mewkiz/flac"
	"github.com/mewkiz/flac/frame"
	"github.com/mewkiz/flac/meta"
)

var le = binary.LittleEndian

// WAVE format tags.
const (
	TagPCM  = 0x0001
	TagALaw = 0x0006
)

// Fmt returns a 16-byte fmt chunk body with a consistent byte rate and block
// align.
func Fmt(tag uint16, channels, rate, bits int) []byte {
	b := make([]byte, 16)
	le.PutUint16(b[0:], tag)
	le.PutUint16(b[2:], uint16(channels))
	le.PutUint32(b[4:], uint32(rate))
	le.PutUint32(b[8:], uint32(rate*channels*bits/8))
	le.PutUint16(b[12:], uint16(channels*bits/8))
	le.PutUint16(b[14:], uint16(bits))
	return b
}

// FmtExtensible returns a 40-byte WAVE_FORMAT_EXTENSIBLE fmt chunk body whose
// sub-format GUID carries subTag.
func FmtExtensible(subTag uint16, channels, rate, bits int) []byte {
	b := append(Fmt(0xfffe, channels, rate, bits), make([]byte, 24)...)
	le.PutUint16(b[16:], 22)           // cbSize
	le.PutUint16(b[18:], uint16(bits)) // valid bits
	le.PutUint32(b[20:], 0)            // channel mask: unspecified
	le.PutUint16(b[24:], subTag)
	copy(b[26:], "\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71")
	return b
}

// Chunk returns a RIFF chunk: id, little-endian size, body, and a pad byte
// when the body length is odd.
func Chunk(id string, body []byte) []byte {
	return ChunkSize(id, uint32(len(body)), body)
}

// ChunkSize is Chunk with a declared size that need not match the body, for
// streamed or damaged files. The pad byte follows the body's real length.
func ChunkSize(id string, size uint32, body []byte) []byte {
	if len(id) != 4 {
		panic(fmt.Sprintf("audiotest: chunk id %q is not 4 bytes", id))
	}
	b := append([]byte(id), 0, 0, 0, 0)
	le.PutUint32(b[4:], size)
	b = append(b, body...)
	if len(body)%2 == 1 {
		b = append(b, 0)
	}
	return b
}

// RIFF returns a RIFF/WAVE file holding chunks in order.
func RIFF(chunks ...[]byte) []byte {
	b := []byte("RIFF\x00\x00\x00\x00WAVE")
	for _, c := range chunks {
		b = append(b, c...)
	}
	le.PutUint32(b[4:], uint32(len(b)-8))
	return b
}

// WAV16 returns a plain 16-bit PCM WAV file of interleaved samples.
func WAV16(rate, channels int, samples ...int16) []byte {
	return RIFF(Chunk("fmt ", Fmt(TagPCM, channels, rate, 16)), Chunk("data", PCM16(samples...)))
}

// PCM16 encodes samples as little-endian 16-bit integers.
func PCM16(samples ...int16) []byte { return encode(samples) }

// PCM24 encodes the low 24 bits of samples as little-endian 3-byte integers.
func PCM24(samples ...int32) []byte {
	b := make([]byte, 0, 3*len(samples))
	for _, v := range samples {
		b = append(b, byte(v), byte(v>>8), byte(v>>16))
	}
	return b
}

// PCM32 encodes samples as little-endian 32-bit integers.
func PCM32(samples ...int32) []byte { return encode(samples) }

// Float32 encodes samples as little-endian IEEE floats.
func Float32(samples ...float32) []byte { return encode(samples) }

// encode writes samples in little-endian order; a slice of a fixed-size
// type never makes binary.Append fail.
func encode[T int16 | int32 | float32](samples []T) []byte {
	b, _ := binary.Append([]byte{}, le, samples)
	return b
}

// FLACSpec describes a FLAC file for [FLAC].
type FLACSpec struct {
	Rate          int
	BitsPerSample int // 8, 12, 16, 20 or 24
	// Channels holds one slice of samples per channel, all the same length.
	Channels [][]int32
	// BlockSize is the number of samples per channel in each frame (the
	// last frame may be shorter); 0 means 4096.
	BlockSize int
	// Sealed makes the encoder write the total sample count and the MD5
	// signature into STREAMINFO, as it does for seekable output. Otherwise
	// the total is DeclaredSamples and the signature is MD5.
	Sealed          bool
	DeclaredSamples uint64
	MD5             [16]byte
}

// FLAC encodes s as a FLAC file using verbatim subframes.
func FLAC(s FLACSpec) ([]byte, error) {
	nch := len(s.Channels)
	if nch < 1 || nch > 8 {
		return nil, fmt.Errorf("audiotest: %d channels", nch)
	}
	block := cmp.Or(s.BlockSize, 4096)
	n := len(s.Channels[0])
	info := &meta.StreamInfo{
		BlockSizeMin:  uint16(min(block, max(n, 16))),
		BlockSizeMax:  uint16(block),
		SampleRate:    uint32(s.Rate),
		NChannels:     uint8(nch),
		BitsPerSample: uint8(s.BitsPerSample),
		NSamples:      s.DeclaredSamples,
		MD5sum:        s.MD5,
	}
	var (
		buf  bytes.Buffer
		file *os.File
		enc  *flac.Encoder
		err  error
	)
	if s.Sealed {
		if file, err = os.CreateTemp("", "audiotest-*.flac"); err != nil {
			return nil, err
		}
		defer os.Remove(file.Name())
		defer file.Close()
		enc, err = flac.NewEncoder(file, info)
	} else {
		enc, err = flac.NewEncoder(&buf, info)
	}
	if err != nil {
		return nil, err
	}
	enc.EnablePredictionAnalysis(false)
	for start := 0; start < n; start += block {
		end := min(start+block, n)
		f := &frame.Frame{
			Header: frame.Header{
				HasFixedBlockSize: true,
				BlockSize:         uint16(end - start),
				SampleRate:        uint32(s.Rate),
				Channels:          frame.Channels(nch - 1), // independent channels
				BitsPerSample:     uint8(s.BitsPerSample),
			},
		}
		for _, ch := range s.Channels {
			f.Subframes = append(f.Subframes, &frame.Subframe{
				SubHeader: frame.SubHeader{Pred: frame.PredVerbatim},
				Samples:   append([]int32(nil), ch[start:end]...),
				NSamples:  end - start,
			})
		}
		if err := enc.WriteFrame(f); err != nil {
			return nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	if s.Sealed {
		return os.ReadFile(file.Name())
	}
	return buf.Bytes(), nil
}
