// Package secret keeps credentials out of what asrprof records (runbook.json's
// provenance, whatif.json, a proxy capture's manifest): the values of
// flags, environment variables and headers whose names say they hold one.
// The records keep the names, so a reader still sees that a key was given.
package secret

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Hidden stands for a value that is not recorded.
const Hidden = "(hidden)"

// Name reports whether a flag, variable or header name says it holds a
// credential: a word token, secret, password, passwd, apikey or
// credentials, the words api and key together, or the headers
// Authorization, Proxy-Authorization and Cookie. "--max-num-batched-tokens"
// and "--tokenizer" hold none.
func Name(n string) bool {
	words := strings.FieldsFunc(strings.ToLower(strings.TrimLeft(n, "-")), func(r rune) bool { return r == '-' || r == '_' || r == '.' })
	for i, w := range words {
		switch w {
		case "token", "secret", "password", "passwd", "apikey", "credentials", "credential",
			"authorization", "cookie":
			return true
		case "api":
			if i+1 < len(words) && words[i+1] == "key" {
				return true
			}
		}
	}
	return false
}

var assignment = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=`)

// Args is argv with every credential's value hidden: the word after a
// flag that Name marks ("--api-key K"), the part after "=" of such a flag
// or of an environment assignment ("--api-key=K", "VLLM_API_KEY=K"), and
// the value of a header line that Name marks ("-H 'Authorization: Bearer
// K'" keeps "Authorization:"). argv itself is not changed.
func Args(argv []string) []string {
	if argv == nil {
		return nil
	}
	out := make([]string, len(argv))
	hideNext := false
	for i, a := range argv {
		out[i] = a
		switch {
		case hideNext:
			out[i], hideNext = Hidden, false
		case strings.HasPrefix(a, "-"):
			name, _, eq := strings.Cut(a, "=")
			if Name(name) {
				if eq {
					out[i] = name + "=" + Hidden
				} else {
					hideNext = true
				}
			}
		case assignment.MatchString(a):
			if m := assignment.FindStringSubmatch(a); Name(m[1]) {
				out[i] = m[0] + Hidden
			}
		default:
			if name, _, ok := strings.Cut(a, ":"); ok && !strings.ContainsAny(name, " /") && Name(name) {
				out[i] = name + ": " + Hidden
			}
		}
	}
	return out
}

// Env is value, or Hidden where the variable name holds a credential.
func Env(name, value string) string {
	if Name(name) {
		return Hidden
	}
	return value
}

// Values are the credentials that Args hides in argv and Env in env
// ("NAME=value" lines), the ones of 4 bytes or more, for Scrub.
func Values(argv, env []string) []string {
	var out []string
	add := func(v string) {
		if v = strings.TrimSpace(v); len(v) >= 4 && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	hidden := Args(argv)
	for i, a := range argv {
		if hidden[i] == a {
			continue
		}
		if h, ok := strings.CutSuffix(hidden[i], Hidden); ok && strings.HasPrefix(a, strings.TrimSuffix(h, " ")) {
			a = strings.TrimPrefix(strings.TrimPrefix(a, strings.TrimSuffix(h, " ")), " ")
		}
		add(a)
		if _, v, ok := strings.Cut(a, " "); ok { // "Bearer KEY": the key alone too
			add(v)
		}
	}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && Name(k) {
			add(v)
		}
	}
	return out
}

// Scrub is b with every one of values replaced by Hidden.
func Scrub(b []byte, values []string) []byte {
	for _, v := range values {
		b = bytes.ReplaceAll(b, []byte(v), []byte(Hidden))
	}
	return b
}

// ScrubFile hides values in the file at path (a server's log: a server
// that logs its arguments, as vLLM logs its non-default ones, logs its
// --api-key). A file that cannot be read or written stays as it is.
func ScrubFile(path string, values []string) {
	if len(values) == 0 {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if c := Scrub(bytes.Clone(b), values); !bytes.Equal(c, b) {
		_ = os.WriteFile(path, c, 0o644)
	}
}
