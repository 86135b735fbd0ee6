package clientspan

import (
	"context"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/spans"
)

// TestResourceAttributes: the caller's attributes, $OTEL_RESOURCE_ATTRIBUTES
// for the rest (as the OpenTelemetry SDK reads it), and service.name
// always the client service, sorted by key as the SDK writes them.
func TestResourceAttributes(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=lab,host.name=env-host,service.name=env")
	tr := New(spans.NewWriter(discard{}), map[string]string{"host.name": "box", "asrprof.capture": "c1"})
	defer tr.Shutdown(context.Background())
	td := toTraces(tr.resource, nil)
	got := td.ResourceSpans().At(0).Resource().Attributes().AsRaw()
	want := map[string]any{"asrprof.capture": "c1", "deployment.environment": "lab", "host.name": "box", "service.name": spans.ClientService}
	if len(got) != len(want) {
		t.Errorf("resource %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("resource %s = %v, want %v", k, got[k], v)
		}
	}
	for i := 1; i < len(tr.resource); i++ {
		if tr.resource[i-1].Key >= tr.resource[i].Key {
			t.Errorf("resource not sorted by key: %v", tr.resource)
		}
	}
}

// blocking is a span store whose first write waits until released.
type blocking struct{ release chan struct{} }

func (b *blocking) AppendRaw(string, []byte) error {
	<-b.release
	return nil
}

// TestDropsCounted: when the store does not keep up, spans beyond the
// queue are dropped, never waited for, and Shutdown says how many.
func TestDropsCounted(t *testing.T) {
	b := &blocking{release: make(chan struct{})}
	tr := New(spans.NewWriter(b), nil)
	const requests = maxQueue // three spans each: more than the queue holds
	for range requests {
		rec := model.Request{Status: model.StatusOK, StartUnixNs: 1, UploadDoneUnixNs: 2, FirstByteUnixNs: 3, EndUnixNs: 4}
		_, end := tr.Start(context.Background(), &rec)
		end(&rec)
	}
	close(b.release)
	err := tr.Shutdown(context.Background())
	if err == nil || !strings.Contains(err.Error(), "client spans dropped") {
		t.Errorf("Shutdown = %v, want the dropped spans said", err)
	}
}
