package dataset

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// jsonlEntry is one manifest line. Pointers tell a missing field from an
// empty one (a missing, null or empty lang is the default); unknown fields
// (duration, speaker, ...) are ignored.
type jsonlEntry struct {
	ID    *string `json:"id"`
	Audio *string `json:"audio"`
	Text  *string `json:"text"`
	Lang  string  `json:"lang"`
}

// loadJSONL reads a manifest of one JSON object per line. Audio paths are
// relative to the manifest's directory unless absolute. Errors name the file
// and line.
func loadJSONL(path, defaultLang string) (*Dataset, error) {
	return loadLines(path, "jsonl", func(ds *Dataset, dir string, seen idLines, n int, line string) error {
		if strings.TrimSpace(line) == "" {
			return nil
		}
		var e jsonlEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return fmt.Errorf("%s:%d: %s", path, n, describeJSONError(err))
		}
		for _, f := range []struct {
			name     string
			v        *string
			nonEmpty bool
		}{{"id", e.ID, true}, {"audio", e.Audio, true}, {"text", e.Text, false}} {
			switch {
			case f.v == nil:
				return fmt.Errorf("%s:%d: missing required field %q", path, n, f.name)
			case f.nonEmpty && strings.TrimSpace(*f.v) == "":
				return fmt.Errorf("%s:%d: field %q is empty", path, n, f.name)
			}
		}
		id := *e.ID
		if err := seen.add(path, n, id); err != nil {
			return err
		}
		ds.Samples = append(ds.Samples, Sample{
			ID:    id,
			Audio: resolve(dir, *e.Audio),
			Text:  strings.TrimSpace(*e.Text),
			Lang:  cmp.Or(e.Lang, defaultLang),
		})
		return nil
	})
}

// describeJSONError turns a decoding error into a reason a user can act on.
func describeJSONError(err error) string {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if te.Field == "" {
			return fmt.Sprintf("line is a JSON %s, not an object", te.Value)
		}
		return fmt.Sprintf("field %q: want a string, got a JSON %s", te.Field, te.Value)
	}
	return "invalid JSON: " + err.Error()
}
