package audio

import (
	"crypto/md5"
	"fmt"
	"hash"
	"io"

	"github.com/mewkiz/flac"
	"github.com/mewkiz/flac/frame"
)

// readFLAC decodes every frame of the FLAC stream in r, so that the frame
// count is what the file holds rather than what STREAMINFO claims (which may
// be 0, "unknown"). When STREAMINFO does give a total, or an MD5 signature of
// the samples, the decoded stream must match them. Samples are returned only
// when keep is set.
//
// The decoder is third-party code fed untrusted bytes; a panic inside it is
// reported as a corrupt file rather than taking the process down.
func readFLAC(r io.Reader, keep bool) (info Info, pcm *PCM, err error) {
	defer func() {
		if v := recover(); v != nil {
			info, pcm, err = Info{}, nil, corruptf("decoder failed: %v", v)
		}
	}()
	s, err := flac.New(r)
	if err != nil {
		return Info{}, nil, corruptf("reading stream header: %v", err)
	}
	si := s.Info
	rate, channels, bps := int(si.SampleRate), int(si.NChannels), int(si.BitsPerSample)
	switch {
	case rate == 0:
		return Info{}, nil, corruptf("STREAMINFO has sample rate 0")
	case channels < 1 || channels > 8:
		return Info{}, nil, corruptf("STREAMINFO has %d channels", channels)
	case bps < 4 || bps > 32:
		return Info{}, nil, corruptf("STREAMINFO has %d bits per sample", bps)
	}
	var sum hash.Hash
	if si.MD5sum != [md5.Size]byte{} {
		sum = md5.New()
	}
	scale := 1 / float64(int64(1)<<(bps-1))
	var (
		frames  int64
		samples = []float32{} // not nil: a PCM of no samples has an empty slice
		buf     []byte
	)
	for {
		f, err := s.ParseNext()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Info{}, nil, corruptf("frame at sample %d: %v", frames, err)
		}
		if err := checkFrame(f, rate, channels, bps); err != nil {
			return Info{}, nil, corruptf("frame at sample %d: %v", frames, err)
		}
		n := f.Subframes[0].NSamples
		if keep {
			for i := range n {
				for _, sub := range f.Subframes {
					samples = append(samples, float32(float64(sub.Samples[i])*scale))
				}
			}
		}
		if sum != nil {
			buf = hashFrame(sum, f, bps, buf)
		}
		frames += int64(n)
	}
	if si.NSamples != 0 && si.NSamples != uint64(frames) {
		return Info{}, nil, corruptf("STREAMINFO declares %d samples per channel, stream holds %d (truncated?)", si.NSamples, frames)
	}
	if sum != nil && [md5.Size]byte(sum.Sum(nil)) != si.MD5sum {
		return Info{}, nil, corruptf("MD5 signature of decoded samples does not match STREAMINFO")
	}
	info = newInfo("flac", "flac", rate, channels, bps, frames)
	if keep {
		pcm = &PCM{SampleRate: rate, Channels: channels, Samples: samples}
	}
	return info, pcm, nil
}

// checkFrame rejects frames that disagree with STREAMINFO; a frame header
// field of 0 means "as in STREAMINFO".
func checkFrame(f *frame.Frame, rate, channels, bps int) error {
	switch {
	case len(f.Subframes) != channels:
		return fmt.Errorf("%d channels, STREAMINFO says %d", len(f.Subframes), channels)
	case f.SampleRate != 0 && int(f.SampleRate) != rate:
		return fmt.Errorf("sample rate %d, STREAMINFO says %d", f.SampleRate, rate)
	case f.BitsPerSample != 0 && int(f.BitsPerSample) != bps:
		return fmt.Errorf("%d bits per sample, STREAMINFO says %d", f.BitsPerSample, bps)
	}
	n := f.Subframes[0].NSamples
	for _, sub := range f.Subframes {
		if sub.NSamples != n || len(sub.Samples) < n {
			return fmt.Errorf("subframes of unequal length")
		}
	}
	return nil
}

// hashFrame adds the frame's samples to the running MD5 the way the FLAC
// format defines it: interleaved, signed little-endian, in the fewest whole
// bytes that hold bps bits. buf is scratch space, returned for reuse.
func hashFrame(sum hash.Hash, f *frame.Frame, bps int, buf []byte) []byte {
	width := (bps + 7) / 8
	n := f.Subframes[0].NSamples
	buf = buf[:0]
	for i := range n {
		for _, sub := range f.Subframes {
			v := uint32(sub.Samples[i])
			for b := range width {
				buf = append(buf, byte(v>>(8*b)))
			}
		}
	}
	sum.Write(buf)
	return buf
}
