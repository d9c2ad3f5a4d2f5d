package mcpgateway

import (
	"errors"
	"testing"
)

func TestUniqueMembers(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1,"b":{"c":[1,{"d":2}]}}`: "",
		`{"a":1,"a":2}`:                 `a JSON object names a member twice: "/a"`,
		`{"a":{"b":1,"b":1}}`:           `a JSON object names a member twice: "/a/b"`,
		`{"a":[{"x":1},{"x":1,"x":2}]}`: `a JSON object names a member twice: "/a/1/x"`,
		`{"a/b":{"~":1,"~":2}}`:         `a JSON object names a member twice: "/a~1b/~0"`,
		`[{"a":1},{"a":1}]`:             "",
		`{"a":"{\"b\":1,\"b\":2}"}`:     "",
		`{"\u0061":1,"a":2}`:            `a JSON object names a member twice: "/a"`,
	} {
		err := uniqueMembers([]byte(in))
		switch {
		case want == "" && err != nil:
			t.Errorf("uniqueMembers(%s) = %v, want nil", in, err)
		case want != "" && (err == nil || err.Error() != want || !errors.Is(err, errDuplicateMember)):
			t.Errorf("uniqueMembers(%s) = %v, want %q", in, err, want)
		}
	}
	if err := uniqueMembers([]byte(`{"a":`)); err == nil || errors.Is(err, errDuplicateMember) {
		t.Errorf("uniqueMembers of a cut object = %v, want a syntax error", err)
	}
}
