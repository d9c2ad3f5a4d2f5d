package printable

import "testing"

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
