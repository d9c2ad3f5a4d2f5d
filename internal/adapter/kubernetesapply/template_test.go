package kubernetesapply

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/toolledger/toolledger/pkg/adapter"
)

const deploymentTemplate = `{
  "apiVersion": "apps/v1", "kind": "Deployment",
  "metadata": {"name": "{{app}}", "labels": {"tier": "{{tier}}"}},
  "spec": {"replicas": "{{replicas}}", "paused": "{{paused}}", "selector": "{{selector}}",
           "template": {"spec": {"containers": [{"name": "web", "image": "registry.example/{{app}}:{{version}}"}]}}}
}`

func mustParse(t *testing.T, raw string) *template {
	t.Helper()
	tmpl, err := parseTemplate([]byte(raw), "shop", nil)
	if err != nil {
		t.Fatalf("parseTemplate: %v", err)
	}
	return tmpl
}

func TestFillKeepsTheTypeOfAWholePlaceholder(t *testing.T) {
	filled, err := mustParse(t, deploymentTemplate).fill(json.RawMessage(
		`{"app": "web", "tier": "front", "replicas": 3, "paused": false, "selector": {"matchLabels": {"app": "web"}}, "version": 12345678901234567890}`))
	if err != nil {
		t.Fatal(err)
	}
	encoded, _ := json.Marshal(filled)
	var got map[string]any
	if err := json.Unmarshal(encoded, &got); err != nil {
		t.Fatal(err)
	}
	spec := got["spec"].(map[string]any)
	if spec["replicas"] != float64(3) {
		t.Errorf("replicas = %#v, want the number 3", spec["replicas"])
	}
	if spec["paused"] != false {
		t.Errorf("paused = %#v, want the boolean false", spec["paused"])
	}
	if want := map[string]any{"matchLabels": map[string]any{"app": "web"}}; !reflect.DeepEqual(spec["selector"], want) {
		t.Errorf("selector = %#v, want the parameter's object %#v", spec["selector"], want)
	}
	if name := got["metadata"].(map[string]any)["name"]; name != "web" {
		t.Errorf("metadata.name = %#v, want web", name)
	}
	// A number within a string keeps every digit: it is never rounded through float64.
	if !strings.Contains(string(encoded), `"image":"registry.example/web:12345678901234567890"`) {
		t.Errorf("the image is not filled with the parameters' text: %s", encoded)
	}
}

func TestFillDoesNotChangeTheTemplate(t *testing.T) {
	tmpl := mustParse(t, `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"mode": "{{mode}}"}}`)
	if _, err := tmpl.fill(json.RawMessage(`{"mode": "fast"}`)); err != nil {
		t.Fatal(err)
	}
	second, err := tmpl.fill(json.RawMessage(`{"mode": "safe"}`))
	if err != nil {
		t.Fatal(err)
	}
	if mode := second["data"].(map[string]any)["mode"]; mode != "safe" {
		t.Errorf("the second fill gave mode %#v: the first one changed the template", mode)
	}
}

func TestFillInsertsParametersAsIs(t *testing.T) {
	tmpl := mustParse(t, `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"note": "{{note}}", "{{key}}": "x"}}`)
	filled, err := tmpl.fill(json.RawMessage(`{"note": "{{secret}}", "secret": "s3cret", "key": "k"}`))
	if err != nil {
		t.Fatal(err)
	}
	data := filled["data"].(map[string]any)
	if data["note"] != "{{secret}}" {
		t.Errorf("note = %#v: a parameter's value was filled in turn", data["note"])
	}
	if _, ok := data["{{key}}"]; !ok {
		t.Errorf("data = %#v: an object key was filled", data)
	}
}

func TestFillRefusesAMissingParameter(t *testing.T) {
	_, err := mustParse(t, deploymentTemplate).fill(json.RawMessage(`{"app": "web", "tier": "front", "paused": false, "selector": {}, "version": "1"}`))
	var permanent *adapter.PermanentError
	if !errors.As(err, &permanent) || permanent.Kind != adapter.InvalidInput || permanent.Reason != "MissingParameter" {
		t.Fatalf("err = %v, want InvalidInput MissingParameter", err)
	}
	if !strings.Contains(err.Error(), `parameter "replicas" is required`) {
		t.Errorf("the message does not name the parameter: %v", err)
	}
}

func TestFillRefusesAnObjectWithinAString(t *testing.T) {
	tmpl := mustParse(t, `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings-{{suffix}}"}}`)
	for _, value := range []string{`{"a": 1}`, `[1]`, `null`} {
		_, err := tmpl.fill(json.RawMessage(`{"suffix": ` + value + `}`))
		var permanent *adapter.PermanentError
		if !errors.As(err, &permanent) || permanent.Kind != adapter.InvalidInput || permanent.Reason != "InvalidParameter" {
			t.Errorf("suffix %s: err = %v, want InvalidInput InvalidParameter", value, err)
		}
	}
	filled, err := tmpl.fill(json.RawMessage(`{"suffix": true}`))
	if err != nil || filled["metadata"].(map[string]any)["name"] != "settings-true" {
		t.Errorf("a boolean within a string: %#v, %v", filled["metadata"], err)
	}
}

func TestParseTemplateRefuses(t *testing.T) {
	for _, c := range []struct {
		name, template, reason, message string
	}{
		{"another namespace", `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "payments"}}`,
			ReasonForeignNamespace, `metadata.namespace payments is not the Tool's namespace "shop"`},
		{"a namespace from a parameter", `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "{{ns}}"}}`,
			ReasonForeignNamespace, "is not the Tool's namespace"},
		{"a kind from a parameter", `{"apiVersion": "v1", "kind": "{{kind}}", "metadata": {"name": "a"}}`,
			ReasonInvalidTemplate, `kind "{{kind}}" is fixed`},
		{"no apiVersion", `{"kind": "ConfigMap", "metadata": {"name": "a"}}`,
			ReasonInvalidTemplate, "apiVersion must be a non-empty string"},
		{"no name", `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "a-"}}`,
			ReasonInvalidTemplate, "metadata.name must be a non-empty string"},
		{"no metadata", `{"apiVersion": "v1", "kind": "ConfigMap"}`,
			ReasonInvalidTemplate, "metadata must be an object"},
		{"not an object", `["v1"]`, ReasonInvalidTemplate, "not a JSON object"},
	} {
		_, err := parseTemplate([]byte(c.template), "shop", nil)
		var config *adapter.ConfigError
		if !errors.As(err, &config) || config.Reason != c.reason || !strings.Contains(config.Message, c.message) {
			t.Errorf("%s: err = %v, want a %s ConfigError saying %q", c.name, err, c.reason, c.message)
		}
	}
	if _, err := parseTemplate([]byte(`{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "shop"}}`), "shop", nil); err != nil {
		t.Errorf("the Tool's own namespace is refused: %v", err)
	}
}

// TestPlaceholdersMustEnterTheDigest: a parameter that fills the template
// shapes the object applied, so it must be consequential: an approval binds
// the request digest, and a placeholder outside it would be applied
// unapproved. The Tool is refused, naming the placeholder, where it is and
// the field to add.
func TestPlaceholdersMustEnterTheDigest(t *testing.T) {
	const job = `{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "export-{{customer}}"},
	  "spec": {"template": {"spec": {"containers": [{"name": "export", "image": "registry.example/export", "args": ["--to", "{{bucket}}"]}]}}}}`
	for _, c := range []struct {
		name          string
		consequential []string
		want          string
	}{
		{name: "no consequentialFields: every parameter enters the digest"},
		{name: "every placeholder is consequential", consequential: []string{"/bucket", "/customer"}},
		{name: "the bucket is not in the digest", consequential: []string{"/customer"},
			want: `spec.kubernetesApply.template: placeholder {{bucket}} at /spec/template/spec/containers/0/args/1 names the parameter "bucket", ` +
				`which is not one of spec.consequentialFields: it would be applied without entering the request digest, so an approval would not cover it; add "/bucket" to spec.consequentialFields`},
		{name: "a field within the parameter is not the parameter", consequential: []string{"/bucket/name", "/customer"},
			want: `spec.kubernetesApply.template: placeholder {{bucket}} at /spec/template/spec/containers/0/args/1 names the parameter "bucket", ` +
				`which is not one of spec.consequentialFields: it would be applied without entering the request digest, so an approval would not cover it; add "/bucket" to spec.consequentialFields`},
		{name: "the name is not in the digest", consequential: []string{"/bucket"},
			want: `spec.kubernetesApply.template: placeholder {{customer}} at /metadata/name names the parameter "customer", ` +
				`which is not one of spec.consequentialFields: it would be applied without entering the request digest, so an approval would not cover it; add "/customer" to spec.consequentialFields`},
	} {
		_, err := parseTemplate([]byte(job), "shop", c.consequential)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: parseTemplate = %v, want nil", c.name, err)
			}
			continue
		}
		var config *adapter.ConfigError
		if !errors.As(err, &config) || config.Reason != ReasonNonConsequentialPlaceholder || config.Message != c.want {
			t.Errorf("%s: parseTemplate = %v\nwant a %s ConfigError: %s", c.name, err, ReasonNonConsequentialPlaceholder, c.want)
		}
	}
}
