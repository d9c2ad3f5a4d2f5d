// Package layout holds the README's layout table to the packages the
// module builds.
package layout

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// suiteTags are the build tags of the suites that build only when asked
// for (test/e2e's harness, test/node): their packages belong in the table
// too, as Linux builds them.
const suiteTags = "e2e,node"

// Every package go list reports is named in the README's layout table, or
// lies under a folder the table names; and every path the table names is
// a folder, and one that holds Go code of this module is a package go list
// reports: a package renamed or removed leaves no row behind.
func TestTheReadmesLayoutTableNamesEveryPackage(t *testing.T) {
	root := moduleRoot(t)
	packages := listPackages(t, root)
	rows := layoutRows(t, filepath.Join(root, "README.md"))
	var named []string
	for _, row := range rows {
		named = append(named, row.paths...)
	}
	for _, pkg := range packages {
		if !slices.ContainsFunc(named, func(path string) bool { return pkg == path || strings.HasPrefix(pkg, path+"/") }) {
			t.Errorf("package %s is missing from the README's layout table", pkg)
		}
	}
	for _, row := range rows {
		for _, path := range row.paths {
			if problem := namesNoPackage(root, path, packages); problem != "" {
				t.Errorf("the README's layout row %q names %s, %s", row.cell, path, problem)
			}
		}
	}
}

// namesNoPackage says what is wrong with a path of the table, "" when
// nothing: a folder that holds no Go code (config/, docs/) or that is a
// module of its own (hack/tools) is named for what else it holds.
func namesNoPackage(root, path string, packages []string) string {
	dir := filepath.Join(root, filepath.FromSlash(path))
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return "which is no folder"
	}
	if slices.Contains(packages, path) {
		return ""
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
		return ""
	}
	if goFiles, _ := filepath.Glob(filepath.Join(dir, "*.go")); len(goFiles) > 0 {
		return "which holds Go code but no package go list ./... reports"
	}
	return ""
}

// moduleRoot is the folder of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	goMod := strings.TrimSpace(string(out))
	if goMod == "" || goMod == os.DevNull {
		t.Fatal("go env GOMOD names no go.mod")
	}
	return filepath.Dir(goMod)
}

// listPackages is go list ./... from root, with the suites' tags, as
// folders relative to root.
func listPackages(t *testing.T, root string) []string {
	t.Helper()
	list := exec.CommandContext(t.Context(), "go", "list", "-tags", suiteTags, "-f", "{{.Dir}}", "./...")
	list.Dir = root
	list.Env = append(os.Environ(), "GOOS=linux")
	var stderr bytes.Buffer
	list.Stderr = &stderr
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, stderr.Bytes())
	}
	var packages []string
	for dir := range strings.FieldsSeq(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		packages = append(packages, filepath.ToSlash(rel))
	}
	if len(packages) == 0 {
		t.Fatal("go list ./... reports no package")
	}
	return packages
}

type layoutRow struct {
	// cell is the row's first cell; paths the paths it names.
	cell  string
	paths []string
}

var quoted = regexp.MustCompile("`([^`]+)`")

// layoutRows reads the table under the README's "## Layout" heading.
func layoutRows(t *testing.T, readme string) []layoutRow {
	t.Helper()
	f, err := os.Open(readme)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		rows            []layoutRow
		inLayout, table bool
	)
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		line := lines.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			inLayout = line == "## Layout"
		case !inLayout:
		case strings.HasPrefix(line, "|"):
			table = true
			cell := strings.TrimSpace(strings.Split(line, "|")[1])
			if cell == "path" || strings.Trim(cell, "-") == "" {
				continue
			}
			row := layoutRow{cell: cell}
			for _, m := range quoted.FindAllStringSubmatch(cell, -1) {
				row.paths = append(row.paths, strings.TrimSuffix(m[1], "/"))
			}
			if len(row.paths) == 0 {
				t.Errorf("the README's layout row %q names no path in backquotes", cell)
			}
			rows = append(rows, row)
		case table:
			inLayout = false
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal(`the README has no table under "## Layout"`)
	}
	return rows
}
