package digest

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The RFC 8785 examples of sections 3.2.2 (values), 3.2.3 (sorting by UTF-16
// code units) and 3.2.4 (no Unicode normalization) are golden vectors in
// testdata/vectors.json, checked by TestGoldenVectors with their digests.
func TestCanonicalize(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "whitespace removed", in: " { \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } } ", want: `{"a":[1,2],"b":{}}`},
		{name: "nested objects sorted", in: `{"z":{"b":1,"a":2},"a":[{"y":1,"x":2}]}`, want: `{"a":[{"x":2,"y":1}],"z":{"a":2,"b":1}}`},
		{name: "integer spelled as float", in: `[1.0, 1e0, 10E-1, 100e-2]`, want: `[1,1,1,1]`},
		{name: "negative zero", in: `[-0, -0.0, 0e10]`, want: `[0,0,0]`},
		{name: "exponent boundaries", in: `[1e21, 1e20, 0.000001, 0.0000001, -1.5e-7]`, want: `[1e+21,100000000000000000000,0.000001,1e-7,-1.5e-7]`},
		{name: "largest exact integer", in: `9007199254740992`, want: `9007199254740992`},
		{name: "integer literal -0", in: `-0`, want: `0`},
		// Beyond 2^53 a double's own spelling is accepted, so that the output
		// of Canonicalize is always accepted again.
		{name: "large double spelled as an integer", in: `[1e16, 10000000000000000, 1e20, 100000000000000000000]`, want: `[10000000000000000,10000000000000000,100000000000000000000,100000000000000000000]`},
		{name: "large non-integer literal", in: `[9007199254740993.0, 1.5e17]`, want: `[9007199254740992,150000000000000000]`},
		{name: "no HTML escaping", in: `"<a href=\"x\">&</a>"`, want: `"<a href=\"x\">&</a>"`},
		{name: "short escapes and lowercase hex", in: `"\b\f\n\r\t\u001f\u007f"`, want: "\"\\b\\f\\n\\r\\t\\u001f\u007f\""},
		{name: "solidus and unicode escapes unescaped", in: `"\/\u00e9\u2028"`, want: "\"/é\u2028\""},
		{name: "surrogate pair escape", in: `"\ud83d\ude00\uD83D\uDE00"`, want: `"😀😀"`},
		{name: "highest code point as a surrogate pair", in: `"\udbff\udfff"`, want: "\"\U0010ffff\""},
		{name: "escaped backslash before u is no escape", in: `"\\ud800"`, want: `"\\ud800"`},
		{name: "replacement character is kept", in: `"\ufffd"`, want: "\"\ufffd\""},
		{name: "literals", in: `[true,false,null]`, want: `[true,false,null]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonicalize(%s): %v", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("Canonicalize(%s) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestCanonicalizeRejects(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{name: "duplicate member", in: `{"a":1,"a":2}`, wantErr: `duplicate object member "a"`},
		{name: "integer beyond 2^53", in: `{"id":12345678901234567891}`, wantErr: "integer 12345678901234567891 is beyond 2^53"},
		{name: "number out of range", in: `1e999`, wantErr: "number 1e999 is out of the range"},
		{name: "trailing data", in: `{} {}`, wantErr: "unexpected data after the top-level JSON value"},
		{name: "truncated", in: `{"a":`, wantErr: "invalid JSON"},
		{name: "invalid UTF-8", in: "\"\xff\"", wantErr: "not valid UTF-8"},
		{name: "UTF-8 encoded surrogate", in: "\"\xed\xa0\x80\"", wantErr: "not valid UTF-8"},
		// encoding/json would decode each of these as U+FFFD, so they would
		// canonicalize, and digest, like "\ufffd".
		{name: "lone high surrogate", in: `"\ud800"`, wantErr: `string escape \ud800 is an unpaired UTF-16 surrogate`},
		{name: "lone low surrogate", in: `"\uDC00"`, wantErr: `string escape \uDC00 is an unpaired UTF-16 surrogate`},
		{name: "surrogates in the wrong order", in: `"\ude00\ud83d"`, wantErr: `string escape \ude00 is an unpaired`},
		{name: "high surrogate before a letter", in: `"\ud83dx"`, wantErr: `string escape \ud83d is an unpaired`},
		{name: "high surrogate at the end", in: `"a\ud83d"`, wantErr: `string escape \ud83d is an unpaired`},
		{name: "two high surrogates", in: `"\ud83d\ud83d\ude00"`, wantErr: `string escape \ud83d is an unpaired`},
		{name: "high surrogate before an escaped letter", in: `"\ud83d\u0041"`, wantErr: `string escape \ud83d is an unpaired`},
		{name: "lone surrogate after an escaped backslash", in: `"\\\ud800"`, wantErr: `string escape \ud800 is an unpaired`},
		{name: "lone surrogate in a member name", in: `{"\ud800":1}`, wantErr: `string escape \ud800 is an unpaired`},
		{name: "integer 2^53+1", in: `9007199254740993`, wantErr: "integer 9007199254740993 is beyond 2^53 and would read as 9007199254740992"},
		{name: "integer -(2^53+1)", in: `-9007199254740993`, wantErr: "integer -9007199254740993 is beyond 2^53"},
		{name: "integer beyond 2^53 not spelled as its double", in: `10000000000000001`, wantErr: "integer 10000000000000001 is beyond 2^53"},
		{name: "exact 2^60 not spelled as its canonical form", in: `1152921504606846976`, wantErr: "would read as 1152921504606847000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tt.in))
			if err == nil {
				t.Fatalf("Canonicalize(%q) = %s, want an error containing %q", tt.in, got, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Canonicalize(%q) error = %q, want it to contain %q", tt.in, err, tt.wantErr)
			}
		})
	}
}

// TestCanonicalizeNumberSamples checks the number serialization samples of
// RFC 8785 Appendix B: IEEE-754 bit patterns and their canonical spelling.
// The two samples that are not finite (NaN, Infinity) cannot be written in
// JSON; 1e999 is rejected in TestCanonicalizeRejects.
func TestCanonicalizeNumberSamples(t *testing.T) {
	samples := []struct{ bits, want string }{
		{"0000000000000000", "0"},
		{"8000000000000000", "0"}, // minus zero
		{"0000000000000001", "5e-324"},
		{"8000000000000001", "-5e-324"},
		{"7fefffffffffffff", "1.7976931348623157e+308"},
		{"ffefffffffffffff", "-1.7976931348623157e+308"},
		{"4340000000000000", "9007199254740992"},
		{"c340000000000000", "-9007199254740992"},
		{"4430000000000000", "295147905179352830000"},
		{"44b52d02c7e14af5", "9.999999999999997e+22"},
		{"44b52d02c7e14af6", "1e+23"},
		{"44b52d02c7e14af7", "1.0000000000000001e+23"},
		{"444b1ae4d6e2ef4e", "999999999999999700000"},
		{"444b1ae4d6e2ef4f", "999999999999999900000"},
		{"444b1ae4d6e2ef50", "1e+21"},
		{"3eb0c6f7a0b5ed8c", "9.999999999999997e-7"},
		{"3eb0c6f7a0b5ed8d", "0.000001"},
		{"41b3de4355555553", "333333333.3333332"},
		{"41b3de4355555554", "333333333.33333325"},
		{"41b3de4355555555", "333333333.3333333"},
		{"41b3de4355555556", "333333333.3333334"},
		{"41b3de4355555557", "333333333.33333343"},
		{"becbf647612f3696", "-0.0000033333333333333333"},
		{"43143ff3c1cb0959", "1424953923781206.2"},
	}
	for _, s := range samples {
		t.Run(s.bits, func(t *testing.T) {
			bits, err := strconv.ParseUint(s.bits, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			// Exponent form, so that the input is no integer literal and
			// reads as exactly this double.
			in := strconv.FormatFloat(math.Float64frombits(bits), 'e', -1, 64)
			got, err := Canonicalize([]byte(in))
			if err != nil {
				t.Fatalf("Canonicalize(%s): %v", in, err)
			}
			if string(got) != s.want {
				t.Errorf("Canonicalize(%s) = %s, want %s", in, got, s.want)
			}
			// The canonical spelling is accepted again, including the
			// integer spellings beyond 2^53.
			again, err := Canonicalize(got)
			if err != nil || string(again) != s.want {
				t.Errorf("Canonicalize(%s) = %s, %v; want it unchanged", got, again, err)
			}
		})
	}
}
