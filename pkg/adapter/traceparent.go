package adapter

import (
	"strings"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// TraceparentHeader is the W3C Trace Context header an adapter forwards, so
// that one trace joins the agent's run, the ledger's record and the
// downstream's effect.
const TraceparentHeader = "traceparent"

// Traceparent returns the provenance's traceID when it is a W3C traceparent
// (version-traceid-parentid-flags, https://www.w3.org/TR/trace-context/),
// and "" otherwise: a bare trace id names no parent span to continue.
func Traceparent(p *v1alpha1.Provenance) string {
	if p == nil {
		return ""
	}
	return ValidTraceparent(p.TraceID)
}

// ValidTraceparent returns value, trimmed, when it is a W3C traceparent,
// and "" otherwise.
func ValidTraceparent(value string) string {
	value = strings.TrimSpace(value)
	fields := strings.Split(value, "-")
	if len(fields) < 4 {
		return ""
	}
	version, traceID, parentID, flags := fields[0], fields[1], fields[2], fields[3]
	switch {
	case !lowerHex(version, 2) || version == "ff",
		version == "00" && len(fields) != 4,
		!lowerHex(traceID, 32) || traceID == strings.Repeat("0", 32),
		!lowerHex(parentID, 16) || parentID == strings.Repeat("0", 16),
		!lowerHex(flags, 2):
		return ""
	}
	return value
}

func lowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
