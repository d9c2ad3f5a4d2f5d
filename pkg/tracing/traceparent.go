package tracing

import "strings"

// ValidTraceparent returns value, trimmed, when it is a W3C traceparent,
// and "" otherwise. Of a version above 00 it returns the four fields that
// version 00 defines, as the specification has a parser of a later version
// do: whatever followed them (a field this parser cannot check, or a
// control character a tenant wrote) is never passed on, into a header or
// an event.
func ValidTraceparent(value string) string {
	value = strings.TrimSpace(value)
	if len(value) < traceparentLen || (len(value) > traceparentLen && value[:2] == "00") ||
		(len(value) > traceparentLen && value[traceparentLen] != '-') {
		return ""
	}
	value = value[:traceparentLen]
	version, traceID, parentID, flags := value[0:2], value[3:35], value[36:52], value[53:55]
	switch {
	case value[2] != '-' || value[35] != '-' || value[52] != '-',
		!lowerHex(version, 2) || version == "ff",
		!lowerHex(traceID, 32) || traceID == strings.Repeat("0", 32),
		!lowerHex(parentID, 16) || parentID == strings.Repeat("0", 16),
		!lowerHex(flags, 2):
		return ""
	}
	return value
}

// traceparentLen is the length of a version 00 traceparent:
// version-traceid-parentid-flags.
const traceparentLen = 2 + 1 + 32 + 1 + 16 + 1 + 2

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
