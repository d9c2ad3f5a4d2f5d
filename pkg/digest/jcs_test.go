package digest

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCanonicalize(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "RFC 8785 section 3.2.2 example",
			in:   `{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			name: "members sorted by UTF-16 code units, not by UTF-8 bytes",
			in:   `{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{name: "whitespace removed", in: " { \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } } ", want: `{"a":[1,2],"b":{}}`},
		{name: "nested objects sorted", in: `{"z":{"b":1,"a":2},"a":[{"y":1,"x":2}]}`, want: `{"a":[{"x":2,"y":1}],"z":{"a":2,"b":1}}`},
		{name: "integer spelled as float", in: `[1.0, 1e0, 10E-1, 100e-2]`, want: `[1,1,1,1]`},
		{name: "negative zero", in: `[-0, -0.0, 0e10]`, want: `[0,0,0]`},
		{name: "exponent boundaries", in: `[1e21, 1e20, 0.000001, 0.0000001, -1.5e-7]`, want: `[1e+21,100000000000000000000,0.000001,1e-7,-1.5e-7]`},
		{name: "largest exact integer", in: `9007199254740992`, want: `9007199254740992`},
		{name: "no HTML escaping", in: `"<a href=\"x\">&</a>"`, want: `"<a href=\"x\">&</a>"`},
		{name: "short escapes and lowercase hex", in: `"\b\f\n\r\t\u001f\u007f"`, want: "\"\\b\\f\\n\\r\\t\\u001f\u007f\""},
		{name: "solidus and unicode escapes unescaped", in: `"\/\u00e9\u2028"`, want: "\"/é\u2028\""},
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
