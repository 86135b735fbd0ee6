package option

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// ParseHeader reads headers given as curl's -H takes them ("Name:
// value"). A line without a token before its colon, a value with a line
// break or a control character, or a header the client writes itself
// (Host, Content-Length, Content-Type, Transfer-Encoding, Connection,
// Upgrade) is an error; the error never quotes a value, which may be a
// secret. "@FILE" reads FILE's lines (blank ones skipped) as curl's -H
// @FILE does, which keeps a key out of the command line.
func ParseHeader(lines []string) (http.Header, error) {
	h := http.Header{}
	for i, l := range lines {
		if name, ok := strings.CutPrefix(l, "@"); ok {
			b, err := os.ReadFile(name)
			if err != nil {
				return nil, fmt.Errorf("header %d: %w", i+1, err)
			}
			fh, err := ParseHeader(slices.DeleteFunc(strings.Split(string(b), "\n"), func(s string) bool { return strings.TrimSpace(s) == "" }))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			for k, vs := range fh {
				h[k] = append(h[k], vs...)
			}
			continue
		}
		k, v, ok := strings.Cut(l, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok || !httpguts.ValidHeaderFieldName(k):
			return nil, fmt.Errorf("header %d: want \"Name: value\", such as \"Authorization: Bearer KEY\"", i+1)
		case !httpguts.ValidHeaderFieldValue(v):
			return nil, fmt.Errorf("header %s: its value has a line break or a control character", k)
		case slices.Contains([]string{"Host", "Content-Length", "Content-Type", "Transfer-Encoding", "Connection", "Upgrade"}, http.CanonicalHeaderKey(k)):
			return nil, fmt.Errorf("header %s: the client writes it itself", k)
		}
		h.Add(k, v)
	}
	return h, nil
}
