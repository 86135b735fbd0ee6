package columns

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"golang.org/x/sync/errgroup"

	"github.com/asrprof/asrprof/model"
)

// requestRow is one row of requests.parquet: every field of a
// requests.jsonl line under its JSON name, request_index (the line's
// position among the requests, from 0: what spans and events point at,
// and r.index in Starlark), and errors flattened into errors_sub,
// errors_del, errors_ins and errors_ref_words (null without scoring).
// Realtime-only fields are null for file requests; every other field
// keeps requests.jsonl's zero when it is absent there.
type requestRow struct {
	RequestIndex     int32     `parquet:"request_index"`
	ID               string    `parquet:"id"`
	SampleID         string    `parquet:"sample_id,dict"`
	Level            string    `parquet:"level,dict"`
	Repeat           int32     `parquet:"repeat"`
	Warmup           bool      `parquet:"warmup"`
	TraceID          string    `parquet:"trace_id"`
	RequestID        string    `parquet:"request_id"`
	ServerRequestID  string    `parquet:"server_request_id"`
	IntendedUnixNs   int64     `parquet:"intended_unix_ns"`
	StartUnixNs      int64     `parquet:"start_unix_ns"`
	UploadDoneUnixNs int64     `parquet:"upload_done_unix_ns"`
	FirstByteUnixNs  int64     `parquet:"first_byte_unix_ns"`
	FirstTokenUnixNs int64     `parquet:"first_token_unix_ns"`
	EndUnixNs        int64     `parquet:"end_unix_ns"`
	LatencyS         float64   `parquet:"latency_s"`
	TTFTS            float64   `parquet:"ttft_s"`
	ChunkGapsS       []float64 `parquet:"chunk_gaps_s,list"`
	AudioDurationS   float64   `parquet:"audio_duration_s"`
	HTTPStatus       int32     `parquet:"http_status"`
	Status           string    `parquet:"status,dict"`
	ErrorKind        string    `parquet:"error_kind,dict"`
	Error            string    `parquet:"error,dict"`
	Hyp              string    `parquet:"hyp"`
	Ref              string    `parquet:"ref"`
	Lang             string    `parquet:"lang,dict"`
	Scored           bool      `parquet:"scored"`
	ErrorsSub        *int32    `parquet:"errors_sub,optional"`
	ErrorsDel        *int32    `parquet:"errors_del,optional"`
	ErrorsIns        *int32    `parquet:"errors_ins,optional"`
	ErrorsRefWords   *int32    `parquet:"errors_ref_words,optional"`
	FirstUpdateS     *float64  `parquet:"first_update_s,optional"`
	FinalAfterStopS  *float64  `parquet:"final_after_stop_s,optional"`
	LagP95S          *float64  `parquet:"lag_p95_s,optional"`
	LagMaxS          *float64  `parquet:"lag_max_s,optional"`
	LagGrowthS       *float64  `parquet:"lag_growth_s,optional"`
	LagSource        string    `parquet:"lag_source,dict"`
	Partials         int32     `parquet:"partials"`
	Finals           int32     `parquet:"finals"`
	ServerErrors     int32     `parquet:"server_errors"`
	AudioS           float64   `parquet:"audio_s"`
	SendLateMaxS     *float64  `parquet:"send_late_max_s,optional"`
}

// ReadRequestsJSONL reads requests.jsonl on every core. Like every bundle
// reader it drops a truncated last line; a bad line is an error that
// names the file, the line and the field. The file is read whole and
// each line decoded into its place in one slice (concatenating the
// chunks' records, ~400 bytes each, cost more than decoding them).
func ReadRequestsJSONL(path string) ([]model.Request, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n := bytes.Count(data, []byte{'\n'})
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	out := make([]model.Request, n)
	used := make([]bool, n) // false: a blank line, or a dropped truncated one
	workers := runtime.GOMAXPROCS(0)
	// Cut at newlines into about 4 parts a worker.
	type part struct {
		data  []byte
		first int // 0-based line
	}
	var parts []part
	per := max(len(data)/(4*workers), 1)
	for line, rest := 0, data; len(rest) > 0; {
		k := min(per, len(rest))
		if j := bytes.IndexByte(rest[k-1:], '\n'); j >= 0 {
			k += j
		} else {
			k = len(rest)
		}
		parts = append(parts, part{rest[:k], line})
		line += bytes.Count(rest[:k], []byte{'\n'})
		rest = rest[k:]
	}
	truncatedOK := len(data) > 0 && data[len(data)-1] != '\n'
	errs := make([]error, len(parts))
	var g errgroup.Group
	g.SetLimit(workers)
	for pi, p := range parts {
		g.Go(func() error {
			d, line := p.data, p.first
			for len(d) > 0 {
				k := bytes.IndexByte(d, '\n')
				var l []byte
				if k >= 0 {
					l, d = d[:k], d[k+1:]
				} else {
					l, d = d, nil
				}
				if len(bytes.TrimSpace(l)) > 0 {
					r := &out[line]
					err := scanObject(l, func(k []byte, v value) error { return fieldErr(k, setRequestField(r, k, v)) })
					switch {
					case err == nil:
						used[line] = true
					case line == n-1 && truncatedOK:
						*r = model.Request{} // a truncated last line
					default:
						errs[pi] = fmt.Errorf("%s:%d: %w", path, line+1, err)
						return nil
					}
				}
				line++
			}
			return nil
		})
	}
	g.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	k := 0
	for i := range out {
		if used[i] {
			if k != i {
				out[k] = out[i]
			}
			k++
		}
	}
	return out[:k:k], nil
}

// setRequestField sets the field of r that the JSON name k names, as
// encoding/json would (unknown names are ignored, null leaves the zero).
// TestRequestFieldsAll checks that it knows every field of model.Request.
func setRequestField(r *model.Request, k []byte, v value) (err error) {
	i32 := func(p *int) {
		var x int64
		x, err = v.int64()
		*p = int(x)
	}
	i64 := func(p *int64) { *p, err = v.int64() }
	f64 := func(p *float64) { *p, err = v.float64() }
	str := func(p *string) { *p, err = v.str() }
	opt := func(p **float64) {
		if v.isNull() {
			*p = nil
			return
		}
		var x float64
		x, err = v.float64()
		*p = &x
	}
	switch string(k) {
	case "id":
		str(&r.ID)
	case "sample_id":
		str(&r.SampleID)
	case "level":
		str(&r.Level)
	case "repeat":
		i32(&r.Repeat)
	case "warmup":
		r.Warmup, err = v.bool()
	case "trace_id":
		str(&r.TraceID)
	case "request_id":
		str(&r.RequestID)
	case "server_request_id":
		str(&r.ServerRequestID)
	case "intended_unix_ns":
		i64(&r.IntendedUnixNs)
	case "start_unix_ns":
		i64(&r.StartUnixNs)
	case "upload_done_unix_ns":
		i64(&r.UploadDoneUnixNs)
	case "first_byte_unix_ns":
		i64(&r.FirstByteUnixNs)
	case "first_token_unix_ns":
		i64(&r.FirstTokenUnixNs)
	case "end_unix_ns":
		i64(&r.EndUnixNs)
	case "latency_s":
		f64(&r.LatencyS)
	case "ttft_s":
		f64(&r.TTFTS)
	case "chunk_gaps_s":
		r.ChunkGapsS, err = floats(v)
	case "audio_duration_s":
		f64(&r.AudioDurationS)
	case "http_status":
		i32(&r.HTTPStatus)
	case "status":
		str(&r.Status)
	case "error_kind":
		str(&r.ErrorKind)
	case "error":
		str(&r.Error)
	case "hyp":
		str(&r.Hyp)
	case "ref":
		str(&r.Ref)
	case "lang":
		str(&r.Lang)
	case "scored":
		r.Scored, err = v.bool()
	case "errors":
		if v.isNull() {
			r.Errors = nil
			return nil
		}
		if v.kind != '{' {
			return fmt.Errorf("want an object, got %s", v.what())
		}
		e := &model.WordErrors{}
		err = scanObject(v.raw, func(k []byte, v value) error {
			var x int64
			var err error
			switch string(k) {
			case "sub", "del", "ins", "ref_words":
				x, err = v.int64()
			}
			switch string(k) {
			case "sub":
				e.Sub = int(x)
			case "del":
				e.Del = int(x)
			case "ins":
				e.Ins = int(x)
			case "ref_words":
				e.RefWords = int(x)
			}
			return fieldErr(k, err)
		})
		r.Errors = e
	case "first_update_s":
		opt(&r.FirstUpdateS)
	case "final_after_stop_s":
		opt(&r.FinalAfterStopS)
	case "lag_p95_s":
		opt(&r.LagP95S)
	case "lag_max_s":
		opt(&r.LagMaxS)
	case "lag_growth_s":
		opt(&r.LagGrowthS)
	case "lag_source":
		str(&r.LagSource)
	case "partials":
		i32(&r.Partials)
	case "finals":
		i32(&r.Finals)
	case "server_errors":
		i32(&r.ServerErrors)
	case "audio_s":
		f64(&r.AudioS)
	case "send_late_max_s":
		opt(&r.SendLateMaxS)
	}
	return err
}

func ptr32(x int) *int32 { v := int32(x); return &v }

func toRequestRow(i int, r *model.Request) requestRow {
	row := requestRow{
		RequestIndex: int32(i), ID: r.ID, SampleID: r.SampleID, Level: r.Level, Repeat: int32(r.Repeat),
		Warmup: r.Warmup, TraceID: r.TraceID, RequestID: r.RequestID, ServerRequestID: r.ServerRequestID,
		IntendedUnixNs: r.IntendedUnixNs, StartUnixNs: r.StartUnixNs, UploadDoneUnixNs: r.UploadDoneUnixNs,
		FirstByteUnixNs: r.FirstByteUnixNs, FirstTokenUnixNs: r.FirstTokenUnixNs, EndUnixNs: r.EndUnixNs,
		LatencyS: r.LatencyS, TTFTS: r.TTFTS, ChunkGapsS: r.ChunkGapsS, AudioDurationS: r.AudioDurationS,
		HTTPStatus: int32(r.HTTPStatus), Status: r.Status, ErrorKind: r.ErrorKind, Error: r.Error,
		Hyp: r.Hyp, Ref: r.Ref, Lang: r.Lang, Scored: r.Scored,
		FirstUpdateS: r.FirstUpdateS, FinalAfterStopS: r.FinalAfterStopS, LagP95S: r.LagP95S,
		LagMaxS: r.LagMaxS, LagGrowthS: r.LagGrowthS, LagSource: r.LagSource, Partials: int32(r.Partials),
		Finals: int32(r.Finals), ServerErrors: int32(r.ServerErrors), AudioS: r.AudioS, SendLateMaxS: r.SendLateMaxS,
	}
	if e := r.Errors; e != nil {
		row.ErrorsSub, row.ErrorsDel, row.ErrorsIns, row.ErrorsRefWords = ptr32(e.Sub), ptr32(e.Del), ptr32(e.Ins), ptr32(e.RefWords)
	}
	return row
}

// writeRequests writes requests.parquet.
func writeRequests(path string, reqs []model.Request, meta map[string]string) error {
	return writeRows(path, meta, len(reqs), func(i int) requestRow { return toRequestRow(i, &reqs[i]) })
}

// requestColumns are requests.parquet's columns in the order ReadRequests
// reads them.
var requestColumns = []string{"id", "sample_id", "level", "repeat", "warmup", "trace_id", "request_id",
	"server_request_id", "intended_unix_ns", "start_unix_ns", "upload_done_unix_ns", "first_byte_unix_ns",
	"first_token_unix_ns", "end_unix_ns", "latency_s", "ttft_s", "chunk_gaps_s.list.element", "audio_duration_s",
	"http_status", "status", "error_kind", "error", "hyp", "ref", "lang", "scored",
	"errors_sub", "errors_del", "errors_ins", "errors_ref_words",
	"first_update_s", "final_after_stop_s", "lag_p95_s", "lag_max_s", "lag_growth_s", "lag_source",
	"partials", "finals", "server_errors", "audio_s", "send_late_max_s"}

// ReadRequests reads requests.parquet back into the records of
// requests.jsonl, in their order, column by column (a row reader took
// 2.5 µs a request).
func ReadRequests(path string) ([]model.Request, error) {
	plain := map[string]bool{"id": true, "trace_id": true, "request_id": true, "server_request_id": true, "hyp": true, "ref": true}
	cols, err := readColumnsPlain(path, requestColumns, plain)
	if err != nil {
		return nil, err
	}
	c := map[string]*column{}
	for _, col := range cols {
		c[col.name] = col
	}
	n := c["id"].n
	for _, col := range cols {
		if col.n != n {
			return nil, fmt.Errorf("%s: column %s has %d rows, id %d", path, col.name, col.n, n)
		}
	}
	str := func(name string) func(i int) string { s := c[name].strings(); return s.At }
	i64 := func(name string) []int64 { return c[name].int64s() }
	i32 := func(name string) []int32 { return c[name].int32s(0) }
	f64 := func(name string) []float64 { v, _ := c[name].float64s(); return v }
	opt := func(name string) func(i int) *float64 {
		v, ok := c[name].float64s()
		return func(i int) *float64 {
			if ok != nil && !ok[i] {
				return nil
			}
			x := v[i]
			return &x
		}
	}
	var (
		id, sample, level, traceID, reqID, srvID = str("id"), str("sample_id"), str("level"), str("trace_id"), str("request_id"), str("server_request_id")
		status, errKind, errText, hyp, ref, lang = str("status"), str("error_kind"), str("error"), str("hyp"), str("ref"), str("lang")
		lagSource                                = str("lag_source")
		repeat, httpStatus                       = i32("repeat"), i32("http_status")
		partials, finals, srvErrors              = i32("partials"), i32("finals"), i32("server_errors")
		intended, start, upload, firstByte       = i64("intended_unix_ns"), i64("start_unix_ns"), i64("upload_done_unix_ns"), i64("first_byte_unix_ns")
		firstToken, end                          = i64("first_token_unix_ns"), i64("end_unix_ns")
		latency, ttft, audioDur, audioS          = f64("latency_s"), f64("ttft_s"), f64("audio_duration_s"), f64("audio_s")
		warmup, scored                           = c["warmup"].bools(), c["scored"].bools()
		gaps                                     = c["chunk_gaps_s"].lists
		firstUpdate, finalAfter, lagP95          = opt("first_update_s"), opt("final_after_stop_s"), opt("lag_p95_s")
		lagMax, lagGrowth, sendLate              = opt("lag_max_s"), opt("lag_growth_s"), opt("send_late_max_s")
		eSub, eDel, eIns, eRef                   = i32("errors_sub"), i32("errors_del"), i32("errors_ins"), i32("errors_ref_words")
		eValid                                   = c["errors_ref_words"].valid
	)
	out := make([]model.Request, n)
	for i := range out {
		r := &out[i]
		*r = model.Request{
			ID: id(i), SampleID: sample(i), Level: level(i), Repeat: int(repeat[i]), Warmup: warmup[i],
			TraceID: traceID(i), RequestID: reqID(i), ServerRequestID: srvID(i),
			IntendedUnixNs: intended[i], StartUnixNs: start[i], UploadDoneUnixNs: upload[i],
			FirstByteUnixNs: firstByte[i], FirstTokenUnixNs: firstToken[i], EndUnixNs: end[i],
			LatencyS: latency[i], TTFTS: ttft[i], AudioDurationS: audioDur[i], HTTPStatus: int(httpStatus[i]),
			Status: status(i), ErrorKind: errKind(i), Error: errText(i), Hyp: hyp(i), Ref: ref(i), Lang: lang(i),
			Scored: scored[i], FirstUpdateS: firstUpdate(i), FinalAfterStopS: finalAfter(i), LagP95S: lagP95(i),
			LagMaxS: lagMax(i), LagGrowthS: lagGrowth(i), LagSource: lagSource(i), Partials: int(partials[i]),
			Finals: int(finals[i]), ServerErrors: int(srvErrors[i]), AudioS: audioS[i], SendLateMaxS: sendLate(i),
		}
		if i < len(gaps) && len(gaps[i]) > 0 {
			r.ChunkGapsS = gaps[i]
		}
		if eValid == nil || eValid[i] {
			r.Errors = &model.WordErrors{Sub: int(eSub[i]), Del: int(eDel[i]), Ins: int(eIns[i]), RefWords: int(eRef[i])}
		}
	}
	return out, nil
}
