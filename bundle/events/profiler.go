package events

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Profiler starts and stops SGLang-Omni's request profiler.
type Profiler struct {
	URL string // the server's base URL, e.g. http://127.0.0.1:8000
}

// Start asks the server to write events for run runID into eventDir (a
// directory on the server's machine).
func (p *Profiler) Start(ctx context.Context, runID, eventDir string) error {
	body, err := json.Marshal(map[string]string{"run_id": runID, "event_dir": eventDir})
	if err != nil {
		return err
	}
	return p.post(ctx, "/start_request_profile", body)
}

// Stop asks the server to stop writing events.
func (p *Profiler) Stop(ctx context.Context) error {
	return p.post(ctx, "/stop_request_profile", []byte("{}"))
}

func (p *Profiler) post(ctx context.Context, path string, body []byte) error {
	url := strings.TrimRight(p.URL, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("request profiler: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("request profiler: POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("request profiler: POST %s: %s: %s", url, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
