// Package argocd tests the Argo CD health check shipped for ToolAction
// (config/argocd) the way Argo CD runs it: in gopher-lua, with only the
// libraries Argo CD opens for a health check configured in argocd-cm, the
// object handed over as the global obj, and the returned table read as a
// health status.
package argocd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	"sigs.k8s.io/yaml"
)

// scriptDir follows Argo CD's resource_customizations layout: group/Kind.
var scriptDir = filepath.Join("..", "..", "config", "argocd", "toolledger.dev", "ToolAction")

// healthStatus is what Argo CD reads from the script's table.
type healthStatus struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// validStatuses are the statuses Argo CD accepts; any other becomes
// Unknown with "Lua returned an invalid health status".
var validStatuses = map[string]bool{"Healthy": true, "Progressing": true, "Suspended": true, "Degraded": true, "Missing": true, "Unknown": true}

// healthTests is health_test.yaml, in the format of Argo CD's own
// resource customization tests.
type healthTests struct {
	Tests []struct {
		HealthStatus healthStatus `json:"healthStatus"`
		InputPath    string       `json:"inputPath"`
	} `json:"tests"`
}

// installedScript is the script as argocd-cm carries it once patched with
// config/argocd/argocd-cm.yaml, which must be health.lua's copy.
func installedScript(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "argocd", "argocd-cm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var patch struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.UnmarshalStrict(raw, &patch); err != nil {
		t.Fatalf("argocd-cm.yaml: %v", err)
	}
	script, ok := patch.Data["resource.customizations.health.toolledger.dev_ToolAction"]
	if !ok {
		t.Fatalf("argocd-cm.yaml has no resource.customizations.health.toolledger.dev_ToolAction: %v", patch.Data)
	}
	source, err := os.ReadFile(filepath.Join(scriptDir, "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	if script != string(source) {
		t.Fatal("config/argocd/argocd-cm.yaml is stale: run 'make argocd'")
	}
	return script
}

func TestToolActionHealth(t *testing.T) {
	script := installedScript(t)
	raw, err := os.ReadFile(filepath.Join(scriptDir, "health_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cases healthTests
	if err := yaml.UnmarshalStrict(raw, &cases); err != nil {
		t.Fatalf("health_test.yaml: %v", err)
	}
	recorded, err := filepath.Glob(filepath.Join(scriptDir, "testdata", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tested := map[string]bool{}
	phases := map[string]bool{}
	for _, c := range cases.Tests {
		t.Run(c.InputPath, func(t *testing.T) {
			obj := readObject(t, filepath.Join(scriptDir, c.InputPath))
			got, err := runHealth(obj, script)
			if err != nil {
				t.Fatal(err)
			}
			if !validStatuses[got.Status] {
				t.Fatalf("status %q is not one Argo CD accepts", got.Status)
			}
			if got != c.HealthStatus {
				t.Errorf("health = %+v, want %+v", got, c.HealthStatus)
			}
			status, _ := obj["status"].(map[string]any)
			phase, _ := status["phase"].(string)
			phases[phase] = true
		})
		tested[filepath.Join(scriptDir, c.InputPath)] = true
	}
	for _, path := range recorded {
		if !tested[path] {
			t.Errorf("%s is recorded but health_test.yaml has no test of it", path)
		}
	}
	// Every phase the manager writes, and an action it has not yet seen
	// (""). Pending is in the API's enum but never written as a phase.
	for _, phase := range []string{"", "Accepted", "AwaitingApproval", "Executing", "RetryScheduled", "Succeeded", "Failed", "Unknown", "Escalated"} {
		if !phases[phase] {
			t.Errorf("no recorded ToolAction in phase %q", phase)
		}
	}
}

// TestToolActionHealthBeforeTheSpecIsObserved: a status written for an
// earlier generation says nothing of the current spec.
func TestToolActionHealthBeforeTheSpecIsObserved(t *testing.T) {
	obj := readObject(t, filepath.Join(scriptDir, "testdata", "succeeded.yaml"))
	obj["metadata"].(map[string]any)["generation"] = float64(2)
	got, err := runHealth(obj, installedScript(t))
	if err != nil {
		t.Fatal(err)
	}
	want := healthStatus{Status: "Progressing", Message: "Waiting for the toolledger manager to observe generation 2"}
	if got != want {
		t.Errorf("health = %+v, want %+v", got, want)
	}
}

// TestHealthScriptNeedsNoStandardLibrary guards what Argo CD allows a
// script from argocd-cm: without resource.customizations.useOpenLibs only
// base, table, package and a safe os are opened, so string.* or math.*
// would fail there although they pass with every library open.
func TestHealthScriptNeedsNoStandardLibrary(t *testing.T) {
	broken := "return { status = string.upper('x') }"
	if _, err := runHealth(map[string]any{"metadata": map[string]any{}}, broken); err == nil {
		t.Fatal("string.upper ran, so the harness opens more libraries than Argo CD does")
	}
}

func readObject(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var obj map[string]any
	if err := json.Unmarshal(js, &obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if obj["kind"] != "ToolAction" {
		t.Fatalf("%s holds a %v, not a ToolAction", path, obj["kind"])
	}
	return obj
}

// runHealth runs script as Argo CD runs a health check from argocd-cm.
func runHealth(obj map[string]any, script string) (healthStatus, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for name, open := range map[string]lua.LGFunction{lua.LoadLibName: lua.OpenPackage, lua.BaseLibName: lua.OpenBase, lua.TabLibName: lua.OpenTable} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(open), Protect: true}, lua.LString(name)); err != nil {
			return healthStatus{}, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		return healthStatus{}, err
	}
	table, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return healthStatus{}, fmt.Errorf("the script returned a %s, not a table", l.Get(-1).Type())
	}
	var out healthStatus
	table.ForEach(func(k, v lua.LValue) {
		switch k.String() {
		case "status":
			out.Status = v.String()
		case "message":
			out.Message = v.String()
		}
	})
	return out, nil
}

// toLua converts a decoded JSON value as Argo CD does: objects to tables
// by key, arrays to sequences, numbers to numbers.
func toLua(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case map[string]any:
		table := l.CreateTable(0, len(v))
		for key, item := range v {
			table.RawSetH(lua.LString(key), toLua(l, item))
		}
		return table
	case []any:
		table := l.CreateTable(len(v), 0)
		for _, item := range v {
			table.Append(toLua(l, item))
		}
		return table
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case bool:
		return lua.LBool(v)
	}
	return lua.LNil
}
