package digest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Canonicalize returns the RFC 8785 (JSON Canonicalization Scheme) form of a
// JSON text: object members sorted by the UTF-16 code units of their names,
// no insignificant whitespace, numbers in their shortest ECMAScript spelling
// and strings with only the escapes the RFC requires.
//
// Beyond the RFC it refuses input whose meaning would be lost silently:
// duplicate member names; escapes of unpaired UTF-16 surrogates such as
// "\ud800", which are not Unicode (so not I-JSON) and would decode as U+FFFD;
// and integer literals beyond 2^53 that are not the canonical spelling of a
// double, such as 9007199254740993, which reads as 9007199254740992 (two ids
// or amounts could canonicalize alike). Send those as strings. Other numbers
// are read as doubles, as the RFC says. The output is always accepted again
// and canonicalizes to itself.
func Canonicalize(data []byte) ([]byte, error) {
	if err := validUTF8(data); err != nil {
		return nil, err
	}
	if err := pairedSurrogates(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var buf bytes.Buffer
	if err := writeValue(&buf, dec); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the top-level JSON value")
	}
	return buf.Bytes(), nil
}

func writeValue(buf *bytes.Buffer, dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			return writeObject(buf, dec)
		}
		return writeArray(buf, dec)
	case string:
		writeString(buf, t)
	case json.Number:
		s, err := formatNumber(t)
		if err != nil {
			return err
		}
		buf.WriteString(s)
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case nil:
		buf.WriteString("null")
	}
	return nil
}

type member struct {
	name  string
	value []byte
}

func writeObject(buf *bytes.Buffer, dec *json.Decoder) error {
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("invalid JSON: %w", err)
		}
		name := tok.(string) // the decoder only yields strings in name position
		if seen[name] {
			return fmt.Errorf("duplicate object member %q", name)
		}
		seen[name] = true
		var value bytes.Buffer
		if err := writeValue(&value, dec); err != nil {
			return err
		}
		members = append(members, member{name: name, value: value.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	slices.SortFunc(members, func(a, b member) int { return compareUTF16(a.name, b.name) })
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeString(buf, m.name)
		buf.WriteByte(':')
		buf.Write(m.value)
	}
	buf.WriteByte('}')
	return nil
}

func writeArray(buf *bytes.Buffer, dec *json.Decoder) error {
	buf.WriteByte('[')
	for i := 0; dec.More(); i++ {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := writeValue(buf, dec); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	buf.WriteByte(']')
	return nil
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785 §3.2.3 requires.
func compareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

// StringWriter is where WriteString writes: a bytes.Buffer or a
// bufio.Writer in front of a hash.
type StringWriter interface {
	WriteByte(c byte) error
	WriteString(s string) (int, error)
	WriteRune(r rune) (int, error)
}

// WriteString writes s as a string of RFC 8785 canonical JSON, as
// Canonicalize spells it, without copying it first: so that a large
// document is hashed as it is written.
func WriteString(w StringWriter, s string) { writeString(w, s) }

// writeString escapes only '"', '\\' and control characters (RFC 8785 §3.2.2.2).
// Its writes' errors are left to the writer: a bytes.Buffer never fails,
// and a bufio.Writer keeps its first error for Flush.
func writeString(buf StringWriter, s string) {
	const hex = "0123456789abcdef"
	_ = buf.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			_, _ = buf.WriteString(`\"`)
		case '\\':
			_, _ = buf.WriteString(`\\`)
		case '\b':
			_, _ = buf.WriteString(`\b`)
		case '\f':
			_, _ = buf.WriteString(`\f`)
		case '\n':
			_, _ = buf.WriteString(`\n`)
		case '\r':
			_, _ = buf.WriteString(`\r`)
		case '\t':
			_, _ = buf.WriteString(`\t`)
		default:
			if r < 0x20 {
				_, _ = buf.WriteString(`\u00`)
				_ = buf.WriteByte(hex[r>>4])
				_ = buf.WriteByte(hex[r&0xf])
			} else {
				_, _ = buf.WriteRune(r)
			}
		}
	}
	_ = buf.WriteByte('"')
}

// formatNumber spells a number as ECMAScript's Number.prototype.toString does
// (RFC 8785 §3.2.2.3).
func formatNumber(n json.Number) (string, error) {
	if exponentTooLarge(string(n)) {
		return "", fmt.Errorf("number %s is out of the range of an IEEE-754 double", n)
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("number %s is out of the range of an IEEE-754 double", n)
	}
	s := esNumber(f)
	// Up to 2^53 every integer literal is its own canonical spelling (or
	// -0). Beyond, a double holds only some integers and several literals
	// read as the same one: 9007199254740993 as 9007199254740992. Comparing
	// the literal, not the double, catches those and still accepts the
	// canonical spelling of large doubles such as 1e20.
	if isIntegerLiteral(string(n)) && s != string(n) && string(n) != "-0" {
		return "", fmt.Errorf("integer %s is beyond 2^53 and would read as %s as an IEEE-754 double; send it as a string", n, s)
	}
	return s, nil
}

func isIntegerLiteral(n string) bool {
	return !strings.ContainsAny(n, ".eE")
}

func esNumber(f float64) string {
	if f == 0 {
		return "0" // also for -0
	}
	if abs := math.Abs(f); abs < 1e21 && abs >= 1e-6 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	// Exponent form: Go writes "1.5e-07", ECMAScript "1.5e-7".
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mantissa, exp, _ := strings.Cut(s, "e")
	sign, digits := exp[:1], strings.TrimLeft(exp[1:], "0")
	return mantissa + "e" + sign + digits
}

// exponentTooLarge rejects exponents that no double reaches before parsing.
func exponentTooLarge(n string) bool {
	i := strings.IndexAny(n, "eE")
	if i < 0 {
		return false
	}
	exp, err := strconv.Atoi(n[i+1:])
	return err != nil || exp > 400 || exp < -400
}

// pairedSurrogates rejects \u escapes of UTF-16 surrogates that do not form
// a high-low pair. encoding/json would decode each as U+FFFD, so "\ud800"
// and "\ufffd" would canonicalize alike. In valid JSON a backslash only
// starts an escape inside a string, so scanning escapes from the start stays
// aligned with them; invalid JSON is left to the decoder to report.
func pairedSurrogates(data []byte) error {
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		r, ok := unicodeEscape(data[i:])
		switch {
		case !ok:
			i++ // skip the escaped character, which may be a backslash
		case utf16.IsSurrogate(r) && r < 0xdc00:
			if low, ok := unicodeEscape(data[i+6:]); ok && low >= 0xdc00 && low <= 0xdfff {
				i += 11
				continue
			}
			return fmt.Errorf("string escape %s is an unpaired UTF-16 surrogate, not Unicode", data[i:i+6])
		case utf16.IsSurrogate(r):
			return fmt.Errorf("string escape %s is an unpaired UTF-16 surrogate, not Unicode", data[i:i+6])
		default:
			i += 5
		}
	}
	return nil
}

// unicodeEscape decodes a \uXXXX escape at the start of b.
func unicodeEscape(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	r, err := strconv.ParseUint(string(b[2:6]), 16, 16)
	if err != nil {
		return 0, false
	}
	return rune(r), true
}

// validUTF8 is checked up front so that invalid bytes are reported rather
// than replaced with U+FFFD by the decoder, which would merge distinct inputs.
func validUTF8(data []byte) error {
	if !utf8.Valid(data) {
		return errors.New("JSON text is not valid UTF-8")
	}
	return nil
}
