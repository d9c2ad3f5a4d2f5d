package digest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
)

// Fuzz targets for the properties the digest contract rests on. Plain
// `go test` runs only their seeds (f.Add below and testdata/fuzz/<name>/);
// to search for new counterexamples run, for example:
//
//	go test ./pkg/digest/ -run '^$' -fuzz FuzzDigestStableUnderReencoding -fuzztime 120s
//	go test ./pkg/digest/ -run '^$' -fuzz FuzzCanonicalizeIdempotent -fuzztime 120s
//
// A counterexample is written to testdata/fuzz/<name>/; keep it there as a
// regression seed once the bug is fixed.

// fuzzSeeds are inputs worth starting from: every spelling trick the
// canonical form must see through, and inputs Canonicalize must reject.
var fuzzSeeds = []string{
	`{"amount":1000,"currency":"EUR","customer":"c-42","tags":["a","b"]}`,
	"{ \"b\" : [ 1 , 2 ] ,\n\t\"a\" : { } }\r\n",
	`[1, 1.0, 1e0, 10E-1, 0.1e+1, -0, -0.0, 0e10]`,
	`[1e21, 1e20, 999999999999999999999.0, 1e-7, 0.000001, 0.0000001, -1.5e-7]`,
	`[9007199254740992, -9007199254740992, 9007199254740993, 9007199254740992.0]`,
	`[5e-324, 1.7976931348623157e308, 2.2250738585072014e-308, 1e-400, 1e400]`,
	`[333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001]`,
	`"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"`,
	`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
	`"\uD83D\uDE00 😀 \ud800 \udc00 \ud83dx \ufffd"`,
	"\"\\u0000\\b\\f\\n\\r\\t\\u001f\u007f\u2028\u2029\"",
	`"<script>alert(\"x&y\")</script>\u003c\u003e\u0026"`,
	`{"z":[{"b":[],"a":{}},[[1,[2]]],null],"a":{"y":{"x":true,"w":false}}}`,
	`{"a":1,"\u0061":2}`,
	`{"Unnormalized Unicode":"A\u030a"}`,
	`{}`,
	`[]`,
	`""`,
	`null`,
	`true`,
	`-12.5e-3`,
}

func FuzzDigestStableUnderReencoding(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add([]byte(s), uint64(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		want, err := Canonicalize(data)
		if err != nil {
			return // the property only covers input Canonicalize accepts
		}
		wantDigest, err := Compute(fuzzRequest(data))
		if err != nil {
			t.Fatalf("Canonicalize accepts %q but Compute fails: %v", data, err)
		}
		check := func(how string, reencoded []byte) {
			t.Helper()
			got, err := Canonicalize(reencoded)
			if err != nil {
				t.Fatalf("%s of %q gave %q, which Canonicalize rejects: %v", how, data, reencoded, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s changed the canonical form\ninput:      %q\nre-encoded: %q\nwant: %q\ngot:  %q", how, data, reencoded, want, got)
			}
			gotDigest, err := Compute(fuzzRequest(reencoded))
			if err != nil {
				t.Fatalf("%s of %q gave %q, which Compute rejects: %v", how, data, reencoded, err)
			}
			if gotDigest != wantDigest {
				t.Fatalf("%s changed the digest of %q (re-encoded %q): %s, want %s", how, data, reencoded, gotDigest, wantDigest)
			}
		}

		// (a) encoding/json's own round trip: its key order, its escapes
		// (<, >, & and U+2028/2029 as \u00XX) and its number spelling.
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("Canonicalize accepts %q but encoding/json rejects it: %v", data, err)
		}
		marshaled, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json.Marshal(%#v): %v", v, err)
		}
		check("json.Marshal round trip", marshaled)

		// (b) Indentation only adds whitespace.
		var indented bytes.Buffer
		if err := json.Indent(&indented, data, "\t", "  "); err != nil {
			t.Fatalf("json.Indent(%q): %v", data, err)
		}
		check("json.Indent", indented.Bytes())

		// (c) Random re-encodings of the same value: escapes, member order,
		// number spellings and whitespace, seeded by the fuzzer.
		rng := rand.New(rand.NewPCG(seed, uint64(len(data))))
		for range 4 {
			check("random re-encoding", reencode(rng, v))
		}

		// Idempotence also belongs here: the canonical form is itself one
		// more spelling of the same value.
		check("canonical form", want)
	})
}

func FuzzCanonicalizeIdempotent(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		once, err := Canonicalize(data)
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("Canonicalize accepts %q, which is not valid JSON", data)
		}
		if !json.Valid(once) {
			t.Fatalf("Canonicalize(%q) = %q, which is not valid JSON", data, once)
		}
		// The canonical form means the same value as the input.
		var before, after any
		if err := json.Unmarshal(data, &before); err != nil {
			t.Fatalf("Canonicalize accepts %q but encoding/json rejects it: %v", data, err)
		}
		if err := json.Unmarshal(once, &after); err != nil || !reflect.DeepEqual(before, after) {
			t.Fatalf("Canonicalize(%q) = %q changed the value: %#v, now %#v (%v)", data, once, before, after, err)
		}
		twice, err := Canonicalize(once)
		if err != nil {
			t.Fatalf("Canonicalize(%q) = %q, which Canonicalize rejects: %v", data, once, err)
		}
		if !bytes.Equal(once, twice) {
			t.Fatalf("Canonicalize is not idempotent on %q:\nonce:  %q\ntwice: %q", data, once, twice)
		}
		d1, err1 := Compute(fuzzRequest(data))
		d2, err2 := Compute(fuzzRequest(once))
		if err1 != nil || err2 != nil || d1 != d2 {
			t.Fatalf("Compute differs between %q (%s, %v) and its canonical form %q (%s, %v)", data, d1, err1, once, d2, err2)
		}
	})
}

// maxExactInteger is 2^53: every integer up to it is exact in a double.
const maxExactInteger = 1 << 53

func fuzzRequest(params []byte) Request {
	return Request{Tenant: "shop", Tool: "charge", Operation: "payments.charge", Version: "v1", Parameters: params}
}

// reencode writes v (as decoded by encoding/json into any) as JSON text that
// means the same value, with randomly chosen escapes, member order, number
// spellings and whitespace. It never writes an integer literal beyond 2^53,
// which Canonicalize rejects by design.
func reencode(rng *rand.Rand, v any) []byte {
	var buf bytes.Buffer
	e := reencoder{rng: rng, buf: &buf}
	e.space()
	e.value(v)
	e.space()
	return buf.Bytes()
}

type reencoder struct {
	rng *rand.Rand
	buf *bytes.Buffer
}

func (e reencoder) space() {
	if e.rng.IntN(4) == 0 {
		e.buf.WriteString([]string{" ", "\t", "\n", "\r\n", "  \n\t "}[e.rng.IntN(5)])
	}
}

func (e reencoder) value(v any) {
	switch v := v.(type) {
	case map[string]any:
		names := make([]string, 0, len(v))
		for name := range v {
			names = append(names, name)
		}
		slices.Sort(names) // map order is not reproducible; the shuffle is
		e.rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		e.buf.WriteByte('{')
		for i, name := range names {
			if i > 0 {
				e.buf.WriteByte(',')
			}
			e.space()
			e.string(name)
			e.space()
			e.buf.WriteByte(':')
			e.space()
			e.value(v[name])
			e.space()
		}
		e.buf.WriteByte('}')
	case []any:
		e.buf.WriteByte('[')
		for i, elem := range v {
			if i > 0 {
				e.buf.WriteByte(',')
			}
			e.space()
			e.value(elem)
			e.space()
		}
		e.buf.WriteByte(']')
	case string:
		e.string(v)
	case float64:
		e.buf.WriteString(e.number(v))
	case bool:
		e.buf.WriteString(strconv.FormatBool(v))
	case nil:
		e.buf.WriteString("null")
	default:
		panic(fmt.Sprintf("unexpected %T from encoding/json", v))
	}
}

// string escapes each character at random in one of the ways JSON allows.
func (e reencoder) string(s string) {
	e.buf.WriteByte('"')
	for _, r := range s {
		short := shortEscape(r)
		mustEscape := r == '"' || r == '\\' || r < 0x20
		switch choice := e.rng.IntN(4); {
		case short != "" && choice == 0:
			e.buf.WriteString(short)
		case choice == 1 || (mustEscape && short == ""):
			e.escape(r)
		case mustEscape:
			e.buf.WriteString(short)
		default:
			e.buf.WriteRune(r)
		}
	}
	e.buf.WriteByte('"')
}

func shortEscape(r rune) string {
	switch r {
	case '"':
		return `\"`
	case '\\':
		return `\\`
	case '/':
		return `\/`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	}
	return ""
}

// escape writes r as \uXXXX, as a surrogate pair beyond the BMP, with hex
// digits in random case.
func (e reencoder) escape(r rune) {
	units := []rune{r}
	if r > 0xffff {
		hi, lo := utf16.EncodeRune(r)
		units = []rune{hi, lo}
	}
	for _, u := range units {
		hex := fmt.Sprintf("%04x", u)
		if e.rng.IntN(2) == 0 {
			hex = strings.ToUpper(hex)
		}
		e.buf.WriteString(`\u` + hex)
	}
}

// number spells f in a random way that parses back to exactly f.
func (e reencoder) number(f float64) string {
	sign := ""
	if math.Signbit(f) {
		sign, f = "-", -f
	}
	if f == 0 {
		// -0 and 0 are the same number to the canonical form.
		sign = []string{"", "-"}[e.rng.IntN(2)]
		return sign + []string{"0", "0.0", "0e0", "0E+5", "0.000e-3", "0e-0"}[e.rng.IntN(6)]
	}
	s := sign + e.spell(f)
	if f > maxExactInteger && !strings.ContainsAny(s, ".eE") {
		s += ".0" // an integer literal this large is rejected by design
	}
	return s
}

func (e reencoder) spell(f float64) string {
	switch e.rng.IntN(4) {
	case 0:
		// Go's shortest spellings.
		format := []byte{'e', 'E', 'g', 'G', 'f'}[e.rng.IntN(5)]
		return strconv.FormatFloat(f, format, -1, 64)
	case 1:
		// The exact decimal value of the double, up to 767 significant digits.
		exact := strconv.FormatFloat(f, 'e', 800, 64)
		mantissa, exp, _ := strings.Cut(exact, "e")
		return strings.TrimRight(strings.TrimRight(mantissa, "0"), ".") + "e" + exp
	default:
		return e.shifted(f)
	}
}

// shifted writes the shortest decimal digits of f with the decimal point
// moved, zeros added before or after and the exponent adjusted to match:
// 1 → 1.0, 10 → 1e1, 0.5 → 50E-2, 1234.5 → 0.0012345e+6.
func (e reencoder) shifted(f float64) string {
	mantissa, expText, _ := strings.Cut(strconv.FormatFloat(f, 'e', -1, 64), "e")
	digits := strings.Replace(mantissa, ".", "", 1)
	exp, _ := strconv.Atoi(expText) // f = 0.digits × 10^(exp+1)
	digits += strings.Repeat("0", e.rng.IntN(3))
	point := e.rng.IntN(len(digits) + 1) // digits before the decimal point
	intPart, fracPart := digits[:point], digits[point:]
	exp10 := exp + 1 - point // f = intPart.fracPart × 10^exp10
	if intPart == "" {
		lead := e.rng.IntN(3)
		intPart, fracPart = "0", strings.Repeat("0", lead)+fracPart
		exp10 += lead
	}
	if fracPart == "" && e.rng.IntN(2) == 0 {
		fracPart = strings.Repeat("0", 1+e.rng.IntN(2))
	}
	s := intPart
	if fracPart != "" {
		s += "." + fracPart
	}
	integerLiteral := fracPart == ""
	if exp10 == 0 && (!integerLiteral || f <= maxExactInteger) && e.rng.IntN(2) == 0 {
		return s
	}
	plus := ""
	if exp10 >= 0 && e.rng.IntN(2) == 0 {
		plus = "+"
	}
	return s + []string{"e", "E"}[e.rng.IntN(2)] + plus + strconv.Itoa(exp10)
}
