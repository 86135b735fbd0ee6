package protocol

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// events reads every event of r, returning their data and the final error.
func events(r io.Reader) ([]string, error) {
	sr := newSSEReader(r)
	var out []string
	for {
		d, err := sr.Next()
		if err != nil {
			return out, err
		}
		out = append(out, string(d))
	}
}

func TestSSEReader(t *testing.T) {
	big := strings.Repeat("x", 3<<20)
	tests := []struct {
		name, in string
		want     []string
		wantErr  error
	}{
		{"simple", "data: a\n\ndata: b\n\n", []string{"a", "b"}, io.EOF},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []string{"a", "b"}, io.EOF},
		{"multi-line data", "data: a\ndata: b\ndata:c\n\n", []string{"a\nb\nc"}, io.EOF},
		{"comments and fields", ": keepalive\nevent: x\nid: 7\nretry: 10\ndata: a\n\n:\n\n", []string{"a"}, io.EOF},
		{"only one space stripped", "data:  a \n\n", []string{" a "}, io.EOF},
		{"colon in value", "data: {\"a\":1}\n\n", []string{`{"a":1}`}, io.EOF},
		{"empty data", "data:\n\ndata\n\n", []string{"", ""}, io.EOF},
		{"blank lines between", "\n\n\ndata: a\n\n\n\n", []string{"a"}, io.EOF},
		{"no trailing blank line", "data: a\n\ndata: [DONE]\n", []string{"a", "[DONE]"}, io.EOF},
		{"no trailing newline", "data: [DONE]", []string{"[DONE]"}, io.EOF},
		{"bom", "\uFEFFdata: a\n\n", []string{"a"}, io.EOF},
		{"field without data ignored", "event: x\n\n", nil, io.EOF},
		{"lone cr is not a line end", "data: a\rb\n\n", []string{"a\rb"}, io.EOF},
		{"3 MiB line", "data: " + big + "\n\n", []string{big}, io.EOF},
		{"too long line", "data: " + big + big + big + "\n\n", nil, errLineTooLong},
		{"too long event", strings.Repeat("data: "+big+"\n", 3), nil, errLineTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, rd := range []struct {
				name string
				r    io.Reader
			}{{"whole", strings.NewReader(tt.in)}, {"bytewise", iotest.OneByteReader(strings.NewReader(tt.in))}} {
				if len(tt.in) > 1<<20 && rd.name == "bytewise" {
					continue
				}
				got, err := events(rd.r)
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("%s: err %v, want %v", rd.name, err, tt.wantErr)
				}
				if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
					t.Errorf("%s: events %.80q, want %.80q", rd.name, got, tt.want)
				}
			}
		})
	}
}

func TestSSEReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	_, err := events(io.MultiReader(strings.NewReader("data: a\n\ndata: partial"), iotest.ErrReader(boom)))
	if !errors.Is(err, boom) {
		t.Errorf("err %v, want the read error", err)
	}
}

func TestDecodeStream(t *testing.T) {
	tests := []struct {
		name, in   string
		wantText   string
		wantChunks int
		wantKind   string
	}{
		{"sglang", `data: {"type":"transcript.text.delta","delta":"a"}` + "\n\n" +
			`data: {"type":"transcript.text.delta","delta":""}` + "\n\n" +
			`data: {"type":"transcript.text.delta","delta":" b"}` + "\n\n" +
			`data: {"type":"transcript.text.done","text":"a b","usage":{"type":"duration","seconds":2}}` + "\n\n" +
			"data: [DONE]\n\n", "a b", 2, ""},
		{"sglang done without [DONE]", `data: {"type":"transcript.text.delta","delta":"a"}` + "\n\n" +
			`data: {"type":"transcript.text.done","text":"A"}` + "\n\n", "A", 1, ""},
		{"vllm", `data: {"object":"transcription.chunk","choices":[{"delta":{"content":"x"}}]}` + "\r\n\r\n" +
			`data: {"object":"transcription.chunk","choices":[{"delta":{"content":"y"}}]}` + "\r\n\r\n" +
			`data: {"object":"transcription.chunk","choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}` + "\r\n\r\n" +
			"data: [DONE]\r\n\r\n", "xy", 2, ""},
		{"unknown events ignored", `data: {"type":"transcript.text.segment","text":"zzz"}` + "\n\n" + "data: [DONE]\n\n", "", 0, ""},
		{"empty stream", "", "", 0, KindMalformed},
		{"no [DONE]", `data: {"type":"transcript.text.delta","delta":"a"}` + "\n\n", "a", 1, KindMalformed},
		{"bad json", "data: {\"type\": \n\n", "", 0, KindMalformed},
		{"json not an object", "data: 42\n\n", "", 0, KindMalformed},
		{"sglang error", `data: {"type":"transcript.text.delta","delta":"a"}` + "\n\n" +
			`data: {"type":"error","error":{"message":"out of memory"}}` + "\n\ndata: [DONE]\n\n", "a", 1, KindServerError},
		{"vllm error", `data: {"error":{"message":"bad audio","code":400}}` + "\n\n", "", 0, KindServerError},
		{"object error", `data: {"object":"error","message":"bad"}` + "\n\n", "", 0, KindServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := time.Now()
			var n int
			tick := func() time.Time { n++; return base.Add(time.Duration(n) * time.Second) }
			out := decodeStream(strings.NewReader(tt.in), tick)
			if out.text != tt.wantText || len(out.chunks) != tt.wantChunks || out.kind != tt.wantKind {
				t.Errorf("text %q chunks %d kind %q err %v, want %q %d %q", out.text, len(out.chunks), out.kind, out.err, tt.wantText, tt.wantChunks, tt.wantKind)
			}
			if (out.err != nil) != (tt.wantKind != "") {
				t.Errorf("err %v with kind %q", out.err, out.kind)
			}
			if tt.wantChunks > 0 && !out.firstToken.Equal(base.Add(time.Second)) {
				t.Errorf("first token %v, want the first stamp", out.firstToken)
			}
			if tt.wantChunks == 0 && !out.firstToken.IsZero() {
				t.Errorf("first token %v without a delta", out.firstToken)
			}
		})
	}
}

func TestDecodeStreamServerMessage(t *testing.T) {
	out := decodeStream(strings.NewReader(`data: {"type":"error","error":{"message":"CUDA out of memory"}}`+"\n\n"), time.Now)
	if out.err == nil || !strings.Contains(out.err.Error(), "CUDA out of memory") {
		t.Errorf("err %v does not carry the server's message", out.err)
	}
}

// FuzzSSE feeds arbitrary bytes to the SSE reader and the stream decoder.
// Neither may panic, and reading the input in one-byte pieces must give
// the same events as reading it whole.
func FuzzSSE(f *testing.F) {
	for _, s := range []string{
		"data: a\n\n",
		"data: a\r\ndata: b\r\n\r\n: c\n\n",
		`data: {"type":"transcript.text.delta","delta":"a"}` + "\n\n" + `data: {"type":"transcript.text.done","text":"a"}` + "\n\ndata: [DONE]\n\n",
		`data: {"object":"transcription.chunk","choices":[{"delta":{"content":"x"}}]}` + "\n\ndata: [DONE]\n\n",
		`data: {"type":"error","error":{"message":"x"}}` + "\n\n",
		`data: {"error":"x"}` + "\n\n",
		"\uFEFFdata:\r\r\n\n",
		"data: {\"choices\":null,\"text\":null}\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		whole, errWhole := events(bytes.NewReader(in))
		piecewise, errPiece := events(iotest.OneByteReader(bytes.NewReader(in)))
		if !errors.Is(errWhole, io.EOF) || !errors.Is(errPiece, io.EOF) {
			t.Fatalf("errors %v / %v, want EOF for an in-memory input this small", errWhole, errPiece)
		}
		if strings.Join(whole, "\x00|") != strings.Join(piecewise, "\x00|") || len(whole) != len(piecewise) {
			t.Fatalf("whole read %q, bytewise read %q", whole, piecewise)
		}
		out := decodeStream(bytes.NewReader(in), time.Now)
		if out.err != nil && out.kind != KindMalformed && out.kind != KindServerError {
			t.Fatalf("in-memory stream gave err %v with kind %q", out.err, out.kind)
		}
		if out.err == nil && out.kind != "" {
			t.Fatalf("kind %q without error", out.kind)
		}
		if len(out.chunks) > 0 && !out.firstToken.Equal(out.chunks[0]) {
			t.Fatal("first token is not the first chunk")
		}
	})
}
