package sdk_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxAgentGoModLines is the length of an agent's go.mod that imports only
// the SDK, after go mod tidy: 43 when this test was written, and five more
// for the OpenTelemetry API its spans need (otel, trace, metric, auto/sdk,
// go-logr/stdr).
const maxAgentGoModLines = 48

// An agent that imports only the SDK needs nothing of the operator, its
// front ends, or the test, benchmark and browser stacks: a program that
// imports pkg/sdk is tidied against this repository, offline, and its
// go.mod is read.
func TestAgentModuleNeedsOnlyTheSDK(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command: %v", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/agent\n\ngo 1.26\n\nrequire github.com/toolledger/toolledger v0.0.0\n\nreplace github.com/toolledger/toolledger => "+root+"\n")
	write("main.go", `package main

import (
	"fmt"

	"github.com/toolledger/toolledger/pkg/sdk"
)

func main() { fmt.Println(sdk.DefaultFieldManager) }
`)
	tidy := exec.CommandContext(t.Context(), goBin, "mod", "tidy")
	tidy.Dir = dir
	// Offline: the module cache holds what the repository builds with, and
	// nothing is looked up in a proxy or a checksum database, nor a
	// toolchain downloaded.
	tidy.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := tidy.CombinedOutput(); err != nil {
		t.Fatalf("go mod tidy: %v\n%s", err, out)
	}
	goMod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, module := range []string{
		"github.com/onsi/ginkgo", "github.com/onsi/gomega", "github.com/chromedp/", "gonum.org/", // tests, browser tests, benchmark plots
		"go.opentelemetry.io/otel/sdk ", "go.opentelemetry.io/otel/exporters/", // tracing: the agent installs its own provider, the SDK needs the API alone
		"sigs.k8s.io/controller-runtime", "github.com/modelcontextprotocol/", "github.com/spf13/cobra", "go.uber.org/zap", "k8s.io/cli-runtime", // the operator and its front ends
	} {
		if strings.Contains(string(goMod), module) {
			t.Errorf("an agent that imports only the SDK requires %s:\n%s", module, goMod)
		}
	}
	if lines := strings.Count(string(goMod), "\n"); lines > maxAgentGoModLines {
		t.Errorf("an agent's go.mod has %d lines, more than %d: something new reaches pkg/sdk\n%s", lines, maxAgentGoModLines, goMod)
	}
}
