package servermetrics

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Label is one label of a sample, as exposed.
type Label struct {
	Name, Value string
}

// Sample is one line of an exposition: a series and its value.
type Sample struct {
	Name   string
	Labels []Label // in the order exposed
	Value  float64
	// TimestampMs is the sample's own timestamp (ms since the epoch) when
	// the line carries one (HasTimestamp); servers rarely send it.
	TimestampMs  int64
	HasTimestamp bool
}

// Exposition is a parsed /metrics answer: its samples in order, and the
// type each family was declared with (# TYPE lines).
type Exposition struct {
	Samples []Sample
	Types   map[string]string // family name → counter, gauge, histogram, summary, untyped, …
}

// Metric types a # TYPE line may name: the text format's five and
// OpenMetrics' others.
var knownTypes = map[string]bool{
	"counter": true, "gauge": true, "histogram": true, "summary": true, "untyped": true,
	"gaugehistogram": true, "info": true, "stateset": true, "unknown": true,
}

// Parse parses the Prometheus text exposition format (version 0.0.4, the
// format /metrics of vLLM, SGLang and prometheus_client serve): # HELP and
// # TYPE lines, other comments, samples with optional labels (escaped
// values; quoted UTF-8 names too) and an optional timestamp; values may be
// NaN, +Inf or -Inf. OpenMetrics' "# EOF" ends the input and exemplars
// ("... # {…} 1") are skipped. The first malformed line is an error
// naming it; the order of TYPE lines and samples is not checked.
func Parse(text string) (*Exposition, error) {
	e := &Exposition{Types: map[string]string{}}
	for n := 1; text != ""; n++ {
		var line string
		line, text, _ = strings.Cut(text, "\n")
		line = strings.TrimRight(strings.TrimLeft(line, " \t"), " \t\r")
		if line == "" {
			continue
		}
		if line[0] == '#' {
			done, err := e.comment(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			if done {
				break
			}
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		e.Samples = append(e.Samples, s)
	}
	return e, nil
}

// comment handles a line starting with '#'; it reports whether the line
// ends the exposition (# EOF).
func (e *Exposition) comment(line string) (eof bool, err error) {
	f := strings.Fields(line[1:])
	if len(f) == 0 {
		return false, nil
	}
	switch f[0] {
	case "EOF":
		return len(f) == 1, nil
	case "HELP":
		if len(f) < 2 {
			return false, fmt.Errorf("HELP line without a metric name: %q", line)
		}
		if _, ok := familyName(f[1]); !ok {
			return false, fmt.Errorf("HELP line: invalid metric name %q", f[1])
		}
	case "TYPE":
		if len(f) != 3 {
			return false, fmt.Errorf("malformed TYPE line %q (want # TYPE name type)", line)
		}
		name, ok := familyName(f[1])
		if !ok {
			return false, fmt.Errorf("TYPE line: invalid metric name %q", f[1])
		}
		if !knownTypes[f[2]] {
			return false, fmt.Errorf("TYPE line for %s: unknown type %q", name, f[2])
		}
		e.Types[name] = f[2]
	}
	return false, nil // any other comment
}

// familyName reads the metric name of a HELP or TYPE line: a classic name
// ([a-zA-Z_:][a-zA-Z0-9_:]*) or a quoted UTF-8 one ("a.b" → a.b).
func familyName(tok string) (string, bool) {
	p := &sampleParser{s: tok}
	if len(tok) >= 2 && tok[0] == '"' {
		u, err := p.quoted()
		return u, err == nil && u != "" && p.i == len(tok)
	}
	n, ok := p.ident(isNameStart, isNameChar)
	return n, ok && p.i == len(tok)
}

func isNameStart(c byte) bool {
	return c == '_' || c == ':' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isNameChar(c byte) bool { return isNameStart(c) || ('0' <= c && c <= '9') }

func isLabelStart(c byte) bool { return c != ':' && isNameStart(c) }

func isLabelChar(c byte) bool { return c != ':' && isNameChar(c) }

// sampleParser walks one sample line.
type sampleParser struct {
	s string
	i int
}

func (p *sampleParser) blanks() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sampleParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

// ident reads a classic name whose first and later characters satisfy
// start and char.
func (p *sampleParser) ident(start, char func(byte) bool) (string, bool) {
	if p.i >= len(p.s) || !start(p.s[p.i]) {
		return "", false
	}
	j := p.i + 1
	for j < len(p.s) && char(p.s[j]) {
		j++
	}
	name := p.s[p.i:j]
	p.i = j
	return name, true
}

// quoted reads a double-quoted string with the text format's escapes:
// \\, \" and \n.
func (p *sampleParser) quoted() (string, error) {
	if p.peek() != '"' {
		return "", fmt.Errorf("expected '\"' at column %d", p.i+1)
	}
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch c {
		case '"':
			return b.String(), nil
		case '\\':
			if p.i >= len(p.s) {
				return "", fmt.Errorf("unterminated escape at column %d", p.i)
			}
			e := p.s[p.i]
			p.i++
			switch e {
			case '\\', '"':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			default:
				return "", fmt.Errorf("invalid escape \\%c at column %d", e, p.i-1)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("unterminated quoted string")
}

func parseSample(line string) (Sample, error) {
	p := &sampleParser{s: line}
	var s Sample
	if p.peek() != '{' {
		name, ok := p.ident(isNameStart, isNameChar)
		if !ok {
			return s, fmt.Errorf("invalid metric name at the start of %q", line)
		}
		s.Name = name
		switch c := p.peek(); c {
		case '{':
		case ' ', '\t':
			p.blanks()
		case 0:
			return s, fmt.Errorf("sample %s without a value", s.Name)
		default:
			return s, fmt.Errorf("invalid character %q in metric name of %q", c, line)
		}
	}
	if p.peek() == '{' {
		p.i++
		if err := p.labels(&s); err != nil {
			return s, fmt.Errorf("%w in %q", err, line)
		}
	}
	if s.Name == "" {
		return s, fmt.Errorf("sample without a metric name: %q", line)
	}
	p.blanks()
	val := p.token()
	if val == "" {
		return s, fmt.Errorf("sample %s without a value", s.Name)
	}
	// A Go float without hex or underscores (as Prometheus reads it), NaN, +Inf, -Inf.
	v, err := strconv.ParseFloat(val, 64)
	if err != nil || strings.ContainsAny(val, "pPxX_") {
		return s, fmt.Errorf("sample %s: invalid value %q", s.Name, val)
	}
	s.Value = v
	p.blanks()
	if p.peek() != 0 && p.peek() != '#' {
		ts := p.token()
		ms, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			return s, fmt.Errorf("sample %s: invalid timestamp %q", s.Name, ts)
		}
		s.TimestampMs, s.HasTimestamp = ms, true
		p.blanks()
	}
	if c := p.peek(); c != 0 && c != '#' { // '#': an OpenMetrics exemplar, skipped
		return s, fmt.Errorf("sample %s: unexpected text %q after the value", s.Name, p.s[p.i:])
	}
	return s, nil
}

// token reads up to the next blank.
func (p *sampleParser) token() string {
	j := p.i
	for j < len(p.s) && p.s[j] != ' ' && p.s[j] != '\t' {
		j++
	}
	t := p.s[p.i:j]
	p.i = j
	return t
}

// labels reads the inside of {…} after the '{': name="value" pairs
// separated by commas (a trailing comma allowed), and in the UTF-8 syntax a
// quoted metric name as the first or any element without '='.
func (p *sampleParser) labels(s *Sample) error {
	for {
		p.blanks()
		if p.peek() == '}' {
			p.i++
			return nil
		}
		quotedName := p.peek() == '"'
		name, ok := p.ident(isLabelStart, isLabelChar) // fails, reading nothing, at a quote
		if quotedName {
			var err error
			if name, err = p.quoted(); err != nil {
				return err
			}
		} else if !ok {
			return fmt.Errorf("invalid label name at column %d", p.i+1)
		}
		p.blanks()
		if quotedName && (p.peek() == ',' || p.peek() == '}') {
			// {"metric.name", ...}: the metric's name.
			if s.Name != "" {
				return fmt.Errorf("second metric name %q", name)
			}
			s.Name = name
		} else {
			if p.peek() != '=' {
				return fmt.Errorf("expected '=' after label %s at column %d", name, p.i+1)
			}
			p.i++
			p.blanks()
			v, err := p.quoted()
			if err != nil {
				return fmt.Errorf("label %s: %w", name, err)
			}
			s.Labels = append(s.Labels, Label{Name: name, Value: v})
			p.blanks()
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return fmt.Errorf("expected ',' or '}' at column %d", p.i+1)
		}
	}
}

// histogram and summary suffixes, and which family types they belong to.
var suffixTypes = []struct {
	suffix string
	types  []string
}{
	{"_bucket", []string{"histogram", "gaugehistogram"}},
	{"_sum", []string{"histogram", "summary"}},
	{"_count", []string{"histogram", "summary"}},
	{"_gsum", []string{"gaugehistogram"}},
	{"_gcount", []string{"gaugehistogram"}},
	{"_total", []string{"counter"}},
	{"_info", []string{"info"}},
}

// TypeOf returns the declared type of the family a sample called name
// belongs to: its own # TYPE line, or that of the family it is a part of
// (x_bucket, x_sum and x_count of histogram x; x_total of a counter typed
// as x), else "untyped".
func (e *Exposition) TypeOf(name string) string {
	if t, ok := e.Types[name]; ok {
		return t
	}
	for _, st := range suffixTypes {
		if fam, ok := strings.CutSuffix(name, st.suffix); ok {
			if t, ok := e.Types[fam]; ok && slices.Contains(st.types, t) {
				return t
			}
		}
	}
	return "untyped"
}

// Cumulative says whether a sample of a family of type typ called name
// only grows (a counter: the _bucket, _sum and _count of a histogram, the
// _sum and _count of a summary, a counter's samples but its _created
// timestamp). A period's summary of a cumulative series is its increase;
// of any other (gauges, quantiles, untyped), its mean, min, max and last.
func Cumulative(typ, name string) bool {
	switch typ {
	case "counter":
		return !strings.HasSuffix(name, "_created")
	case "histogram":
		return strings.HasSuffix(name, "_bucket") || strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_count")
	case "summary":
		return strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_count")
	}
	return false
}
