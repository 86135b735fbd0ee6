package spans

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"golang.org/x/sync/errgroup"
)

// ReadChunks reads a span store (uvarint-length-prefixed OTLP export
// requests), decoding records on every core, and returns the
// spans of each record in store order (not concatenated: copying a million
// spans in one goroutine cost a second). A truncated last record is
// dropped, as Read does.
func ReadChunks(path string) ([][]Span, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs [][]byte
	for off := 0; off < len(data); {
		size, n := binary.Uvarint(data[off:])
		if n <= 0 {
			if n == 0 {
				break // truncated length prefix
			}
			return nil, fmt.Errorf("%s: record %d at byte %d: bad length", path, len(recs), off)
		}
		if size > MaxRecordBytes {
			return nil, fmt.Errorf("%s: record %d at byte %d: length %d: not a span store", path, len(recs), off, size)
		}
		if uint64(len(data)-off-n) < size {
			break // truncated record
		}
		recs = append(recs, data[off+n:off+n+int(size)])
		off += n + int(size)
	}
	parts := make([][]Span, len(recs))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, rec := range recs {
		g.Go(func() error {
			req := ptraceotlp.NewExportRequest()
			if err := req.UnmarshalProto(rec); err != nil {
				return fmt.Errorf("%s: record %d: decoding: %w", path, i, err)
			}
			parts[i] = Flatten(req.Traces())
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return parts, nil
}
