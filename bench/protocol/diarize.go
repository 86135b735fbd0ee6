package protocol

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
)

// MOSS-Transcribe-Diarize, as SGLang-Omni's benchmark client
// (benchmarks/eval/benchmark_asr_transcribe_diarize.py) sends it.
const (
	// DiarizeModel is the multipart model its client sends by default.
	DiarizeModel = "OpenMOSS-Team/MOSS-Transcribe-Diarize"
	// DiarizeMaxNewTokens is the max_new_tokens its client always sends
	// (so the server's duration-scaled default never applies).
	DiarizeMaxNewTokens = 65536
	// StreamRouteHeader is the header its streaming client adds.
	StreamRouteHeader = "X-Sglang-Omni-Route-Stream"
)

// NewDiarize returns the client of the transcribe-diarize task: the
// OpenAI-compatible multipart POST {target}/v1/audio/transcriptions with
// the fields model, file, max_new_tokens=65536 and
// response_format=verbose_json; with opts.Stream, response_format=json,
// stream=true and the header x-sglang-omni-route-stream: true, answered by
// SGLang-Omni's SSE (transcript.text.delta, transcript.text.done, [DONE]).
// Job.Language is not sent (noLanguage). The prediction is the top-level text (plain) or the done event's text
// (streaming); the markup's times are in it, not in the segments.
func NewDiarize(opts Options) (Client, error) {
	opts.ResponseFormat = "verbose_json"
	if opts.Stream {
		opts.ResponseFormat = "json"
		opts.Header = opts.Header.Clone()
		if opts.Header == nil {
			opts.Header = http.Header{}
		}
		opts.Header[StreamRouteHeader] = []string{"true"}
	}
	cl, err := NewOpenAI(opts)
	if err != nil {
		return nil, err
	}
	c, ok := cl.(*openAI)
	if !ok {
		return nil, fmt.Errorf("transcribe-diarize: unexpected client %T", cl)
	}
	c.fixedFields = c.appendField(c.fixedFields, "max_new_tokens", strconv.Itoa(DiarizeMaxNewTokens))
	return noLanguage{c}, nil
}

// noLanguage sends each job without its language: SGLang-Omni's
// transcribe-diarize client sends one only when given --language, and its
// CI run (tests/test_model/test_asr_ci_multi_speaker.py) passes
// language=None. asrprof's --lang still picks results.json's normalizer.
type noLanguage struct{ c Client }

func (n noLanguage) Do(ctx context.Context, job *Job) Result {
	if job == nil || job.Language == "" {
		return n.c.Do(ctx, job)
	}
	j := *job
	j.Language = ""
	return n.c.Do(ctx, &j)
}
