// Package printable makes text from downstreams safe to show: such text
// reaches status messages, events and the operator's terminal, where a
// control character or an escape sequence would act instead of being read.
package printable

import (
	"strconv"
	"strings"
	"unicode"
)

// Escape writes every rune that is neither graphic nor a space as a Go
// escape (\x1b, \n, \u202e), so that the text shows as what it is.
// Invalid UTF-8 shows as \ufffd.
func Escape(s string) string {
	if isPrintable(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if shows(r) {
			b.WriteRune(r)
			continue
		}
		quoted := strconv.QuoteRuneToASCII(r)
		b.WriteString(quoted[1 : len(quoted)-1])
	}
	return b.String()
}

func isPrintable(s string) bool {
	for _, r := range s {
		if !shows(r) {
			return false
		}
	}
	return true
}

// shows reports whether r is shown as itself: a graphic rune or a space,
// not the mark of invalid UTF-8.
func shows(r rune) bool {
	return r != unicode.ReplacementChar && (unicode.IsGraphic(r) || r == ' ')
}

// Truncate bounds s to n bytes for a field the API limits (a condition's
// message, an event's note): a longer s is cut, at a whole rune, to end in
// "…" within n.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-len("…")], "") + "…"
}
