package tracing_test

import (
	"testing"

	"github.com/toolledger/toolledger/pkg/tracing"
)

func TestValidTraceparent(t *testing.T) {
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		name, traceID, want string
	}{
		{"a traceparent is forwarded", valid, valid},
		{"surrounding spaces are dropped", " " + valid + " ", valid},
		{"a later version keeps its four known fields", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"a later version's unknown fields never pass, whatever they hold", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-a\nb", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"a later version's flags end the value or meet a dash", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", ""},
		{"a control character inside a field is invalid", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\n", ""},
		{"a control character at the end of version 00 is invalid", valid + "\r\nX-Injected: 1", ""},
		{"a bare trace id names no parent", "4bf92f3577b34da6a3ce929d0e0e4736", ""},
		{"version 00 has exactly four fields", valid + "-extra", ""},
		{"version ff is invalid", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"upper-case hex is invalid", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""},
		{"an all-zero trace id is invalid", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"an all-zero parent id is invalid", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", ""},
		{"a short parent id is invalid", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902-01", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := tracing.ValidTraceparent(c.traceID); got != c.want {
				t.Errorf("ValidTraceparent(%q) = %q, want %q", c.traceID, got, c.want)
			}
		})
	}
}
