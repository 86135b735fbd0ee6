package spans

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/asrprof/asrprof/bundle"
)

// FileName is the span store's file name inside a bundle (bundle.SpansFile).
const FileName = bundle.SpansFile

// MaxRecordBytes bounds one record; a longer length prefix means the file is
// not a span store (or is corrupt), not that the record is merely long.
const MaxRecordBytes = 1 << 30

// Appender is what Writer writes to: *bundle.Writer satisfies it. AppendRaw
// must write b to the named file in one write and be safe for concurrent use.
type Appender interface {
	AppendRaw(name string, b []byte) error
}

// Writer appends records to a bundle's span store. It is safe for
// concurrent use; records from concurrent writers never interleave.
type Writer struct {
	a Appender

	mu  sync.Mutex
	buf []byte
}

// NewWriter returns a Writer appending to FileName through a.
func NewWriter(a Appender) *Writer { return &Writer{a: a} }

// Write appends td as one record. Traces without spans write nothing.
func (w *Writer) Write(td ptrace.Traces) error {
	if td.SpanCount() == 0 {
		return nil
	}
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		return fmt.Errorf("encoding spans record: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = binary.AppendUvarint(w.buf[:0], uint64(len(body)))
	w.buf = append(w.buf, body...)
	if err := w.a.AppendRaw(FileName, w.buf); err != nil {
		return err
	}
	if cap(w.buf) > 4<<20 { // don't pin a one-off huge batch
		w.buf = nil
	}
	return nil
}

// Read calls fn with the traces of every record of the span store at path,
// in file order. A last record cut short (a capture killed mid-write) is
// dropped and reported through truncated; a record that is whole but does
// not decode is an error naming its index and offset. An error from fn stops
// the read and is returned wrapped.
func Read(path string, fn func(ptrace.Traces) error) (truncated bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	return read(bufio.NewReaderSize(f, 1<<16), path, fn)
}

func read(r *bufio.Reader, path string, fn func(ptrace.Traces) error) (bool, error) {
	var buf []byte
	var off int64
	var prefix [binary.MaxVarintLen64]byte // to measure a length prefix
	for rec := 0; ; rec++ {
		if _, err := r.Peek(1); err == io.EOF {
			return false, nil
		}
		size, err := binary.ReadUvarint(r)
		if err == nil {
			if size > MaxRecordBytes {
				return false, fmt.Errorf("%s: record %d at byte %d: length %d exceeds %d: not a span store", path, rec, off, size, MaxRecordBytes)
			}
			buf = slices.Grow(buf[:0], int(size))[:size]
			_, err = io.ReadFull(r, buf)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) { // the length or the record cut short
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("%s: record %d at byte %d: %w", path, rec, off, err)
		}
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(buf); err != nil {
			return false, fmt.Errorf("%s: record %d at byte %d: decoding: %w", path, rec, off, err)
		}
		if err := fn(req.Traces()); err != nil {
			return false, fmt.Errorf("%s: record %d: %w", path, rec, err)
		}
		off += int64(binary.PutUvarint(prefix[:], size)) + int64(size)
	}
}
