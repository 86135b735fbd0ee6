package capture

import (
	"reflect"
	"testing"

	"github.com/asrprof/asrprof/bench/driver"
	"github.com/asrprof/asrprof/model"
)

func TestRawRecords(t *testing.T) {
	items := []driver.Item{{SampleID: "a", Ref: "你好，世界", Lang: "zh"}, {SampleID: "b", Ref: "x"}, {SampleID: "c", Ref: "y"}}
	recs := []model.Request{
		// Completion order, not dataset order.
		{SampleID: "b", Status: model.StatusFailed, Error: "HTTP 503: busy", LatencyS: 2, AudioDurationS: 3},
		{SampleID: "a", Status: model.StatusOK, Hyp: "你好世界", Ref: "你好，世界", Lang: "zh", LatencyS: 0.5, AudioDurationS: 2,
			Scored: true, Errors: &model.WordErrors{Sub: 1, RefWords: 4}, FirstTokenUnixNs: 1, TTFTS: 0.1, ChunkGapsS: []float64{0.02, 0.03}},
	}
	wer, ttft := 0.25, 0.1
	want := []RawRecord{
		{ID: "a", IsSuccess: true, WER: &wer, RefText: "你好，世界", HypText: "你好世界", RefNorm: "你 好 世 界", HypNorm: "你 好 世 界",
			AudioDurationS: 2, LatencyS: 0.5, TextTTFTS: &ttft, InterChunkS: []float64{0.02, 0.03}},
		{ID: "b", RefText: "x", InterChunkS: []float64{}, Error: "HTTP 503: busy"},
		{ID: "c", RefText: "y", InterChunkS: []float64{}, Error: "No transcription"},
	}
	if got := RawRecords(items, recs); !reflect.DeepEqual(got, want) {
		t.Errorf("raw records\n%+v\nwant\n%+v", got, want)
	}
	for _, tc := range []struct {
		lv   SweepPoint
		want string
	}{{SweepPoint{Concurrency: 32}, "conc32_rep2.jsonl"}, {SweepPoint{Rate: 2.5}, "rate2.5_rep2.jsonl"}} {
		if got := RawFileName(tc.lv, 2); got != tc.want {
			t.Errorf("RawFileName(%+v) = %q, want %q", tc.lv, got, tc.want)
		}
	}
}
