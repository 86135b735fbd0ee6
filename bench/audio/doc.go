// Package audio reads the audio files of a benchmark dataset and converts
// them into the shapes that speech-to-text servers accept.
//
// Two container formats are understood, recognised by their leading bytes
// rather than by file extension:
//
//   - WAV (RIFF/WAVE): 16-, 24- and 32-bit integer PCM and 32-bit IEEE float,
//     either as plain format tags or as WAVE_FORMAT_EXTENSIBLE, any sample
//     rate and channel count.
//   - FLAC, decoded with github.com/mewkiz/flac.
//
// Everything else (MP3, Ogg, 8-bit PCM, A-law, ...) is reported with an error
// that wraps [ErrUnsupported]; files that claim a supported format but are
// damaged wrap [ErrCorrupt]. Callers tell the two apart with errors.Is, so a
// preflight can say "convert this file" rather than "this file is broken".
//
// [Probe] checks a file without keeping its samples; [DecodeBytes] returns
// a [PCM] of float32 samples, which [PCM.Mono], [PCM.Resample] and
// [PCM.PCM16] turn into the 16-bit mono streams most servers want.
package audio
