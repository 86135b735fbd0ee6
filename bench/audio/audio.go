package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

var (
	// ErrUnsupported reports a readable file in a format or encoding this
	// package does not decode (MP3, Ogg, 8-bit PCM, A-law, ...).
	ErrUnsupported = errors.New("unsupported audio format")

	// ErrCorrupt reports a file that claims a supported format but whose
	// header or data is damaged or truncated, including empty files.
	ErrCorrupt = errors.New("corrupt audio file")
)

// Info describes an audio file as measured by [Probe].
type Info struct {
	// Format is the container: "wav" or "flac".
	Format string
	// Encoding is the sample encoding: "pcm16", "pcm24", "pcm32", "float32"
	// for WAV, and "flac" for FLAC.
	Encoding string
	// SampleRate is in Hz.
	SampleRate int
	// Channels is the number of interleaved channels.
	Channels int
	// BitsPerSample is the stored sample width (the container width for
	// WAV, the stream's sample size for FLAC).
	BitsPerSample int
	// Frames is the number of samples per channel actually present in the
	// file, not the number a header claims.
	Frames int64
	// DurationS is Frames divided by SampleRate.
	DurationS float64
}

// newInfo is the Info of frames frames of audio in the given format.
func newInfo(format, encoding string, rate, channels, bits int, frames int64) Info {
	return Info{Format: format, Encoding: encoding, SampleRate: rate, Channels: channels,
		BitsPerSample: bits, Frames: frames, DurationS: float64(frames) / float64(rate)}
}

// PCM is decoded audio: interleaved float32 samples, nominally in -1..1.
type PCM struct {
	SampleRate int
	Channels   int
	// Samples holds Frames()*Channels values, channel-interleaved.
	Samples []float32
}

// Frames returns the number of samples per channel.
func (p *PCM) Frames() int {
	if p.Channels <= 0 {
		return 0
	}
	return len(p.Samples) / p.Channels
}

// ContentType returns the MIME type for a format name as found in
// [Info.Format]: "audio/wav" or "audio/flac", and
// "application/octet-stream" for anything else.
func ContentType(format string) string {
	if format == "wav" || format == "flac" {
		return "audio/" + format
	}
	return "application/octet-stream"
}

// Probe reads the header of the audio file at path and verifies its data: for
// WAV it checks that the data chunk is as long as the header says, for FLAC it
// decodes every frame (and checks the MD5 signature when the stream carries
// one). The returned Info's duration comes from the data actually present.
// A file with a valid header and no samples is not an error; Info.Frames is 0.
//
// Errors name the path and wrap [ErrUnsupported], [ErrCorrupt], or, for a
// missing file, fs.ErrNotExist.
func Probe(path string) (Info, error) {
	f, err := os.Open(path)
	if err != nil {
		// os errors carry the path: the *PathError is unwrapped to name it once
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			return Info{}, fmt.Errorf("%s: %s: %w", path, pe.Op, pe.Err)
		}
		return Info{}, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Info{}, fmt.Errorf("%s: stat: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return Info{}, fmt.Errorf("%s: not a regular file (%s)", path, st.Mode().Type())
	}
	_, info, err := decode(path, f, st.Size(), false)
	return info, err
}

// ProbeBytes is [Probe] for an audio file held in memory (a dataset's
// inline audio column, an upload the proxy saw); name is used only in error messages. It checks the
// data as Probe does and copies nothing.
func ProbeBytes(name string, b []byte) (Info, error) {
	_, info, err := decode(name, bytes.NewReader(b), int64(len(b)), false)
	return info, err
}

// DecodeBytes decodes an audio file held in memory; name is used only in
// error messages.
func DecodeBytes(name string, b []byte) (*PCM, error) {
	p, _, err := decode(name, bytes.NewReader(b), int64(len(b)), true)
	return p, err
}

// decode reads the stream in r: its Info, and with keep its samples (nil
// without). Its errors are prefixed by name, then by the format.
func decode(name string, r io.ReaderAt, size int64, keep bool) (*PCM, Info, error) {
	format, err := sniff(r, size)
	var p *PCM
	var info Info
	switch {
	case err != nil:
	case format == "flac":
		info, p, err = readFLAC(io.NewSectionReader(r, 0, size), keep)
	default:
		var h wavHeader
		if h, err = parseWAV(r, size); err == nil && keep {
			p, err = h.decode(r)
		}
		if err == nil {
			info = newInfo("wav", h.encoding, h.rate, h.channels, h.bits, h.frames())
		}
	}
	if err != nil {
		if format != "" {
			err = fmt.Errorf("%s: %w", format, err)
		}
		return nil, Info{}, fmt.Errorf("%s: %w", name, err)
	}
	return p, info, nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrCorrupt)
}

func unsupportedf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrUnsupported)
}

// sniff identifies the container from the leading bytes of r: "wav" or
// "flac", or an error that names what the file looks like instead.
func sniff(r io.ReaderAt, size int64) (string, error) {
	if size == 0 {
		return "", corruptf("empty file")
	}
	head := make([]byte, min(size, 12))
	if err := readAt(r, head, 0); err != nil {
		return "", fmt.Errorf("reading header: %w", err)
	}
	has := func(prefix string) bool { return bytes.HasPrefix(head, []byte(prefix)) }
	switch {
	case has("RIFF"):
		if len(head) < 12 {
			return "", corruptf("truncated RIFF header (%d bytes)", len(head))
		}
		if string(head[8:12]) != "WAVE" {
			return "", unsupportedf("RIFF file of type %q, not WAVE", head[8:12])
		}
		return "wav", nil
	case has("fLaC"):
		return "flac", nil
	case has("RIFX"):
		return "", unsupportedf("big-endian RIFX WAV")
	case has("RF64"), has("BW64"):
		return "", unsupportedf("RF64/BW64 WAV")
	case has("ID3"):
		// An ID3v2 tag usually precedes MP3 audio, occasionally FLAC.
		if len(head) >= 10 {
			tag := int64(head[6]&0x7f)<<21 | int64(head[7]&0x7f)<<14 | int64(head[8]&0x7f)<<7 | int64(head[9]&0x7f)
			end := 10 + tag
			if head[5]&0x10 != 0 {
				end += 10 // footer
			}
			var sig [4]byte
			if n, _ := r.ReadAt(sig[:], end); n == 4 && string(sig[:]) == "fLaC" {
				return "flac", nil
			}
		}
		return "", unsupportedf("MP3 (ID3 tag)")
	case has("OggS"):
		return "", unsupportedf("Ogg container (Vorbis/Opus)")
	case has("FORM"):
		return "", unsupportedf("AIFF")
	case has("caff"):
		return "", unsupportedf("Core Audio (CAF)")
	case has("\x1a\x45\xdf\xa3"):
		return "", unsupportedf("Matroska/WebM")
	case len(head) >= 8 && string(head[4:8]) == "ftyp":
		return "", unsupportedf("MP4/M4A")
	case len(head) >= 2 && head[0] == 0xff && head[1]&0xe0 == 0xe0:
		return "", unsupportedf("MPEG audio (MP3/AAC) frame")
	}
	if len(head) < 4 && (bytes.HasPrefix([]byte("RIFF"), head) || bytes.HasPrefix([]byte("fLaC"), head)) {
		return "", corruptf("truncated header (%d bytes)", len(head))
	}
	return "", unsupportedf("unrecognised file signature % x", head[:min(len(head), 4)])
}

var le = binary.LittleEndian
