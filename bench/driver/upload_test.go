package driver_test

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bench/driver"
	"github.com/asrprof/asrprof/bench/protocol"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/model"
)

// preparing wraps the real openai client and records what the driver
// asks of it: the Prepare calls, and the Upload each request carried.
type preparing struct {
	protocol.Client
	mu       sync.Mutex
	prepared int
	sent     map[string][]*protocol.Upload // sample id -> uploads of its requests
}

func (p *preparing) Prepare(job *protocol.Job) *protocol.Upload {
	p.mu.Lock()
	p.prepared++
	p.mu.Unlock()
	return p.Client.(protocol.Preparer).Prepare(job)
}

func (p *preparing) Do(ctx context.Context, job *protocol.Job) protocol.Result {
	p.mu.Lock()
	p.sent[job.SampleID] = append(p.sent[job.SampleID], job.Upload)
	p.mu.Unlock()
	return p.Client.Do(ctx, job)
}

// TestUploadBuiltOncePerSample: over three passes, each sample's body is
// built once, every request of a sample carries that same body, and
// samples that share one audio file and language share one body; the
// server gets each sample's audio intact.
func TestUploadBuiltOncePerSample(t *testing.T) {
	s := fakeasr.NewServer(t, fakeasr.Config{})
	c, err := protocol.New("openai", protocol.Options{Target: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	pc := &preparing{Client: c, sent: map[string][]*protocol.Upload{}}
	shared := tone(0.5)
	items := []driver.Item{
		{SampleID: "a", FileName: "x.wav", ContentType: "audio/wav", Audio: shared, AudioS: 0.5, Ref: fakeasr.DefaultText},
		{SampleID: "b", FileName: "x.wav", ContentType: "audio/wav", Audio: shared, AudioS: 0.5, Ref: fakeasr.DefaultText},
		{SampleID: "c", FileName: "x.wav", ContentType: "audio/wav", Audio: shared, AudioS: 0.5, Ref: fakeasr.DefaultText, Lang: "zh"},
		{SampleID: "d", FileName: "y.wav", ContentType: "audio/wav", Audio: tone(0.7), AudioS: 0.7, Ref: fakeasr.DefaultText},
	}
	d := &driver.Driver{Client: pc, Items: items, Lang: "en", Timeout: 10 * time.Second}
	for repeat := 1; repeat <= 3; repeat++ {
		p := d.Run(context.Background(), context.Background(), driver.Level{Name: "c2", Concurrency: 2}, repeat, false)
		for _, r := range p.Records {
			if r.Status != model.StatusOK {
				t.Fatalf("request %s of %s: %s %s", r.ID, r.SampleID, r.Status, r.Error)
			}
		}
	}
	if pc.prepared != 3 {
		t.Errorf("Prepare called %d times, want 3 (a and b share x.wav in English; c is x.wav in Chinese; d is y.wav)", pc.prepared)
	}
	for id, ups := range pc.sent {
		if len(ups) != 3 {
			t.Fatalf("sample %s sent %d times, want 3", id, len(ups))
		}
		for i, u := range ups {
			if u == nil || u != ups[0] {
				t.Errorf("sample %s request %d carried upload %p, want the first request's %p", id, i, u, ups[0])
			}
		}
	}
	if pc.sent["a"][0] != pc.sent["b"][0] || pc.sent["a"][0] == pc.sent["c"][0] {
		t.Errorf("a and b (same file, language) must share an upload, c (another language) must not")
	}
	// The items' audio now lives in the uploads, with the same bytes.
	if &items[0].Audio[0] != &items[1].Audio[0] || string(items[0].Audio) != string(shared) {
		t.Errorf("item audio is not the shared upload's bytes")
	}
	reqs := s.Requests()
	if len(reqs) != 12 {
		t.Fatalf("server saw %d requests, want 12", len(reqs))
	}
	for _, r := range reqs {
		if r.ParseError != "" || r.FileSize == 0 {
			t.Errorf("server: %q, %d bytes", r.ParseError, r.FileSize)
		}
	}
}

// TestRequestIDs: ids are the driver's prefix and a six-digit sequence.
func TestRequestIDs(t *testing.T) {
	s := fakeasr.NewServer(t, fakeasr.Config{})
	c, err := protocol.New("openai", protocol.Options{Target: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	d := &driver.Driver{Client: c, Items: []driver.Item{{SampleID: "a", FileName: "a.wav", Audio: tone(0.2), Ref: fakeasr.DefaultText}}, Lang: "en", Timeout: 10 * time.Second}
	var ids []string
	for repeat := 1; repeat <= 2; repeat++ {
		for _, r := range d.Run(context.Background(), context.Background(), driver.Level{Name: "c1", Concurrency: 1}, repeat, false).Records {
			ids = append(ids, r.ID+" "+r.RequestID)
		}
	}
	re := regexp.MustCompile(`^asrprof-[0-9a-f]{8}-(\d{6})$`)
	for i, id := range ids {
		var n int
		var rid string
		fmt.Sscanf(id, "%d %s", &n, &rid)
		m := re.FindStringSubmatch(rid)
		if n != i+1 || m == nil || m[1] != fmt.Sprintf("%06d", i+1) {
			t.Errorf("request %d: id and request id %q, want %d and asrprof-<8 hex>-%06d", i, id, i+1, i+1)
		}
	}
}
