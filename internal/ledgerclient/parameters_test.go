package ledgerclient

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMarkParametersListsEveryLeafAndWhatEntersTheDigest(t *testing.T) {
	const params = `{"customer":{"id":"c-1","tags":["a/b","x~y"]},"amount":1e2,"note":"<b>hi</b>","empty":{},"a/b":{"c~d":true}}`
	all := func(inDigest ...bool) []Parameter {
		rows := []Parameter{
			{Path: "/a~1b/c~0d", Value: json.RawMessage(`true`)},
			{Path: "/amount", Value: json.RawMessage(`1e2`)},
			{Path: "/customer/id", Value: json.RawMessage(`"c-1"`)},
			{Path: "/customer/tags/0", Value: json.RawMessage(`"a/b"`)},
			{Path: "/customer/tags/1", Value: json.RawMessage(`"x~y"`)},
			{Path: "/empty", Value: json.RawMessage(`{}`)},
			{Path: "/note", Value: json.RawMessage(`"<b>hi</b>"`)},
		}
		for i := range rows {
			rows[i].InDigest = inDigest[i]
		}
		return rows
	}
	tests := []struct {
		name   string
		fields []string
		want   []Parameter
	}{
		{name: "no consequentialFields: all", want: all(true, true, true, true, true, true, true)},
		{name: "a field and an object", fields: []string{"/amount", "/customer"}, want: all(false, true, true, true, true, false, false)},
		{name: "a field within an object, an escaped name, an empty object", fields: []string{"/customer/tags/1", "/a~1b", "/empty"},
			want: all(true, false, false, false, true, true, false)},
		{name: "a field the parameters do not have", fields: []string{"/payee"}, want: all(false, false, false, false, false, false, false)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MarkParameters(json.RawMessage(params), tc.fields)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parameters (-want +got):\n%s", diff)
			}
		})
	}
	if got, err := MarkParameters(json.RawMessage(`{}`), nil); err != nil || len(got) != 0 {
		t.Errorf("MarkParameters({}) = %v, %v; want none", got, err)
	}
	if _, err := MarkParameters(json.RawMessage(`{"a":`), nil); err == nil {
		t.Error("MarkParameters of broken JSON succeeded")
	}
}
