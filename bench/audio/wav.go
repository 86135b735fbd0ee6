package audio

import (
	"fmt"
	"io"
	"math"
)

// WAVE format tags (the first field of the fmt chunk).
const (
	tagPCM        = 0x0001
	tagFloat      = 0x0003
	tagExtensible = 0xfffe
)

// otherTags names the WAVE format tags this package recognises but does not
// decode.
var otherTags = map[uint16]string{
	0x0002: "Microsoft ADPCM", 0x0006: "A-law", 0x0007: "mu-law", 0x0011: "IMA ADPCM",
	0x0031: "GSM 6.10", 0x0050: "MPEG audio in WAV", 0x0055: "MPEG audio in WAV",
}

// extensibleGUIDTail is the common suffix of the KSDATAFORMAT_SUBTYPE GUIDs;
// the first two bytes of the sub-format GUID hold the plain format tag.
const extensibleGUIDTail = "\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"

// wavHeader is what parseWAV learns from the chunks of a WAV file.
type wavHeader struct {
	encoding string // "pcm16", "pcm24", "pcm32" or "float32"
	channels int
	rate     int
	bits     int
	dataOff  int64 // offset of the first sample byte
	dataLen  int64 // bytes of sample data present in the file
}

func (h wavHeader) frameBytes() int64 { return int64(h.channels * h.bits / 8) }

func (h wavHeader) frames() int64 { return h.dataLen / h.frameBytes() }

// parseWAV walks the chunks of the RIFF/WAVE file in r (whose first 12 bytes
// sniff has checked) and returns its format and where its samples are.
//
// The RIFF size field is ignored (writers get it wrong often, and the file
// size is known). Unknown chunks are skipped, honouring the pad byte after an
// odd-sized chunk. A data chunk size of 0 or 0xFFFFFFFF, as written by
// streaming encoders, means "the rest of the file". A data chunk claiming
// more bytes than the file holds is corrupt: its duration would be a guess.
func parseWAV(r io.ReaderAt, size int64) (wavHeader, error) {
	var (
		h        wavHeader
		haveFmt  bool
		haveData bool
		hdr      [8]byte
	)
	for off := int64(12); off < size && !(haveFmt && haveData); {
		if size-off < 8 {
			return h, corruptf("truncated chunk header at offset %d", off)
		}
		if err := readAt(r, hdr[:], off); err != nil {
			return h, fmt.Errorf("reading chunk header at offset %d: %w", off, err)
		}
		id := string(hdr[:4])
		n := int64(le.Uint32(hdr[4:]))
		body := off + 8
		avail := size - body
		switch id {
		case "fmt ":
			if haveFmt {
				return h, corruptf("second fmt chunk at offset %d", off)
			}
			if n < 16 {
				return h, corruptf("fmt chunk too short (%d bytes)", n)
			}
			if n > avail {
				return h, corruptf("fmt chunk truncated (%d of %d bytes present)", avail, n)
			}
			b := make([]byte, min(n, 40))
			if err := readAt(r, b, body); err != nil {
				return h, fmt.Errorf("reading fmt chunk: %w", err)
			}
			if err := h.parseFmt(b); err != nil {
				return h, err
			}
			haveFmt = true
		case "data":
			if haveData {
				return h, corruptf("second data chunk at offset %d", off)
			}
			switch {
			case n == 0 || n == 0xffffffff:
				n = avail // streamed WAV: the size was never filled in
			case n > avail:
				return h, corruptf("data chunk truncated: header declares %d bytes, file holds %d", n, avail)
			}
			h.dataOff, h.dataLen = body, n
			haveData = true
		default:
			if n > avail && !haveData {
				return h, corruptf("%q chunk truncated (%d of %d bytes present) before any data chunk", id, avail, n)
			}
		}
		off = body + n + n&1
	}
	switch {
	case !haveFmt:
		return h, corruptf("no fmt chunk (header truncated?)")
	case !haveData:
		return h, corruptf("no data chunk")
	}
	return h, nil
}

// parseFmt reads the fields of a fmt chunk body of at least 16 bytes.
func (h *wavHeader) parseFmt(b []byte) error {
	tag := le.Uint16(b[0:])
	channels := int(le.Uint16(b[2:]))
	rate := int(le.Uint32(b[4:]))
	align := int(le.Uint16(b[12:]))
	bits := int(le.Uint16(b[14:]))
	if tag == tagExtensible {
		if len(b) < 40 {
			return corruptf("WAVE_FORMAT_EXTENSIBLE fmt chunk too short (%d bytes)", len(b))
		}
		if string(b[26:40]) != extensibleGUIDTail {
			return unsupportedf("WAVE_FORMAT_EXTENSIBLE sub-format GUID % x", b[24:40])
		}
		tag = le.Uint16(b[24:])
	}
	switch tag {
	case tagPCM:
		switch bits {
		case 16, 24, 32:
			h.encoding = fmt.Sprintf("pcm%d", bits)
		case 8:
			return unsupportedf("8-bit PCM (unsigned)")
		default:
			return unsupportedf("%d-bit PCM", bits)
		}
	case tagFloat:
		if bits != 32 {
			return unsupportedf("%d-bit IEEE float", bits)
		}
		h.encoding = "float32"
	default:
		if name, ok := otherTags[tag]; ok {
			return unsupportedf("%s", name)
		}
		return unsupportedf("WAV format tag 0x%04x", tag)
	}
	if channels == 0 {
		return corruptf("fmt chunk has 0 channels")
	}
	if rate == 0 {
		return corruptf("fmt chunk has sample rate 0")
	}
	if align != channels*bits/8 {
		return corruptf("block align %d does not match %d channels of %d bits", align, channels, bits)
	}
	h.channels, h.rate, h.bits = channels, rate, bits
	return nil
}

// decode reads the whole frames of the data chunk and converts them to
// float32. A trailing partial frame is dropped.
func (h wavHeader) decode(r io.ReaderAt) (*PCM, error) {
	fb := h.frameBytes()
	n := h.frames()
	b := make([]byte, n*fb)
	if err := readAt(r, b, h.dataOff); err != nil {
		return nil, fmt.Errorf("reading data chunk: %w", err)
	}
	out := make([]float32, n*int64(h.channels))
	switch h.encoding {
	case "pcm16":
		for i := range out {
			out[i] = float32(int16(le.Uint16(b[2*i:]))) / (1 << 15)
		}
	case "pcm24":
		for i := range out {
			v := int32(uint32(b[3*i])<<8|uint32(b[3*i+1])<<16|uint32(b[3*i+2])<<24) >> 8
			out[i] = float32(v) / (1 << 23)
		}
	case "pcm32":
		for i := range out {
			out[i] = float32(float64(int32(le.Uint32(b[4*i:]))) / (1 << 31))
		}
	case "float32":
		for i := range out {
			v := math.Float32frombits(le.Uint32(b[4*i:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				v = 0 // NaN and infinities would poison resampling and mixing
			}
			out[i] = v
		}
	}
	return &PCM{SampleRate: h.rate, Channels: h.channels, Samples: out}, nil
}

// readAt fills b from offset off; unlike a bare ReadAt it accepts io.EOF
// alongside a full read, as the io.ReaderAt contract allows.
func readAt(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
