package ledgerclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/toolcontract"
)

// Parameter is one leaf of an action's parameters, all of which are sent
// downstream: its JSON Pointer, its value as JSON, and whether it enters the
// request digest, which is what an approval binds.
type Parameter struct {
	// Path is the leaf's JSON Pointer, such as "/customer/id".
	Path string `json:"path"`
	// Value is the leaf's JSON value; an empty object or array is a leaf.
	Value json.RawMessage `json:"value"`
	// InDigest says the leaf enters the request digest: the tool names it
	// (or an object above it) in consequentialFields, or names none.
	InDigest bool `json:"inDigest"`
}

// Parameters lists every parameter of the action, one leaf each in the
// order of their pointers, marked where they enter the request digest, so
// that an approver sees what is sent as well as what the approval binds.
func (l *Ledger) Parameters(ctx context.Context, action *v1alpha1.ToolAction) ([]Parameter, error) {
	return actionParameters(ctx, l, map[toolUse]*v1alpha1.ToolSpec{}, action)
}

// actionParameters are Parameters, with the tools read cached in tools.
// When the tool is gone every parameter is marked as in the digest, as it
// is for a tool that names no consequentialFields.
func actionParameters(ctx context.Context, l *Ledger, tools map[toolUse]*v1alpha1.ToolSpec, a *v1alpha1.ToolAction) ([]Parameter, error) {
	parameters, err := toolcontract.Parameters(a.Spec.Parameters)
	if err != nil {
		return nil, fmt.Errorf("ToolAction %q: %w", a.Name, err)
	}
	// Per namespace, a ClusterTool's too: whether it admits the namespace
	// decides whether it is the action's tool.
	key := useOf(a)
	spec, seen := tools[key]
	if !seen {
		if spec, err = l.findToolSpec(ctx, a.Namespace, a.Spec.ToolRef); err != nil {
			return nil, err
		}
		tools[key] = spec
	}
	var consequentialFields []string
	if spec != nil {
		consequentialFields = spec.ConsequentialFields
	}
	marked, err := MarkParameters(parameters, consequentialFields)
	if err != nil {
		return nil, fmt.Errorf("ToolAction %q: %w", a.Name, err)
	}
	return marked, nil
}

// MarkParameters lists the leaves of parameters, a JSON object, each marked
// where it enters the digest of a tool with these consequentialFields. The
// digest's own projection (toolcontract.Consequential) decides, so that the mark
// cannot disagree with the digest.
func MarkParameters(parameters json.RawMessage, consequentialFields []string) ([]Parameter, error) {
	all, err := leaves(parameters)
	if err != nil {
		return nil, err
	}
	consequential, err := toolcontract.Consequential(parameters, consequentialFields)
	if err != nil {
		return nil, fmt.Errorf("cannot read the parameters: %w", err)
	}
	digested, err := leaves(consequential)
	if err != nil {
		return nil, err
	}
	inDigest := map[string]bool{}
	for _, p := range digested {
		inDigest[p.Path] = true
	}
	for i := range all {
		all[i].InDigest = inDigest[all[i].Path]
	}
	return all, nil
}

// leaves lists the leaves of a JSON object in the order of their pointers
// (members sorted by name, items by index).
func leaves(raw json.RawMessage) ([]Parameter, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("cannot read the parameters: %w", err)
	}
	var out []Parameter
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch t := v.(type) {
		case map[string]any:
			if len(t) == 0 && path != "" {
				out = append(out, Parameter{Path: path, Value: json.RawMessage("{}")})
			}
			for _, k := range slices.Sorted(maps.Keys(t)) {
				walk(path+"/"+escapePointer(k), t[k])
			}
		case []any:
			if len(t) == 0 {
				out = append(out, Parameter{Path: path, Value: json.RawMessage("[]")})
			}
			for i, e := range t {
				walk(fmt.Sprintf("%s/%d", path, i), e)
			}
		default:
			// Front ends escape the value for where they show it; JSON
			// need not, so that a person reads "<" rather than "\u003c".
			var encoded bytes.Buffer
			enc := json.NewEncoder(&encoded)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(t) // a decoded scalar encodes
			out = append(out, Parameter{Path: path, Value: bytes.TrimSuffix(encoded.Bytes(), []byte("\n"))})
		}
	}
	walk("", v)
	return out, nil
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
