package analysis

import (
	"testing"

	"go.starlark.net/starlark"
)

// TestSprintfNumberKinds: a Starlark int given to a float verb, or an
// integral float to %d, prints as the number, never as "%!f(int64=…)"
// (a busy-thread line once printed "GPU util %!f(int64=) %").
func TestSprintfNumberKinds(t *testing.T) {
	for _, tc := range []struct {
		format string
		args   []starlark.Value
		want   string
	}{
		{"GPU util %s %%", []starlark.Value{starlark.String("12")}, "GPU util 12 %"},
		{"%.0f", []starlark.Value{starlark.MakeInt(37)}, "37"},
		{"%.1f %%", []starlark.Value{starlark.MakeInt(0)}, "0.0 %"},
		{"%d of %.2f", []starlark.Value{starlark.Float(4), starlark.MakeInt(2)}, "4 of 2.00"},
		{"%*d|%.1f", []starlark.Value{starlark.MakeInt(3), starlark.MakeInt(7), starlark.MakeInt(1)}, "  7|1.0"},
		{"%d", []starlark.Value{starlark.Float(2.5)}, "%!d(float64=2.5)"}, // not integral: left to fmt, as before
	} {
		b := starlark.NewBuiltin("sprintf", sprintf)
		got, err := starlark.Call(&starlark.Thread{}, b, append(starlark.Tuple{starlark.String(tc.format)}, tc.args...), nil)
		if err != nil {
			t.Fatalf("%q: %v", tc.format, err)
		}
		if s, _ := starlark.AsString(got); s != tc.want {
			t.Errorf("sprintf(%q, %v) = %q, want %q", tc.format, tc.args, s, tc.want)
		}
	}
}
