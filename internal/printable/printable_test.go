package printable

import (
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"ch_123":                          "ch_123",
		"café — ok":                       "café — ok",
		"\x1b[31mred\x1b[0m":              `\x1b[31mred\x1b[0m`,
		"\x1b]0;owned\x07":                `\x1b]0;owned\a`,
		"line\nbreak\r\tand tab":          `line\nbreak\r\tand tab`,
		"evil\u202etxt.exe":               `evil\u202etxt.exe`,
		"bad \xff byte":                   `bad \ufffd byte`,
		"\u009b31m C1 control introducer": `\u009b31m C1 control introducer`,
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

// A cut string stays within its bound, ends in "…", and splits no rune.
func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven chars", 10, "eleven …"},
		{"ab€€€€", 9, "ab€…"}, // the second € would be split: it goes whole
	} {
		got := Truncate(tc.in, tc.n)
		if got != tc.want || len(got) > tc.n || !utf8.ValidString(got) {
			t.Errorf("Truncate(%q, %d) = %q (%d bytes), want %q", tc.in, tc.n, got, len(got), tc.want)
		}
	}
}
