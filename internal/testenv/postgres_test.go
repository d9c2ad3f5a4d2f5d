package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// Run as root, PostgreSQL runs as nobody, whom a directory closed to other
// users stops however the directory below it is named: the check must say
// so for a relative name too, which nobody would otherwise enter from this
// process's directory (make run's bin/local, in a checkout of mktemp -d).
func TestPostgresCanEnterBelowAClosedDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root hands the server to another user; as anyone else there is nothing to check")
	}
	if _, err := PostgresBinDir(); err != nil {
		t.Skip(err) // make test installs PostgreSQL; go test alone may run without it
	}
	closed := t.TempDir() // 0700: nobody cannot enter it
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(closed, "checkout", "bin", "local")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := PostgresCanEnter(inner); err == nil {
		t.Errorf("PostgresCanEnter(%s) = nil below a 0700 directory", inner)
	}
	t.Chdir(filepath.Join(closed, "checkout"))
	if err := PostgresCanEnter(filepath.Join("bin", "local")); err == nil {
		t.Error("PostgresCanEnter(bin/local) = nil from a checkout below a 0700 directory")
	}
	open, err := os.MkdirTemp("", "open-") // t.TempDir's parent is closed
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(open) })
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := PostgresCanEnter(open); err != nil {
		t.Errorf("PostgresCanEnter(%s) in an open directory: %v", open, err)
	}
}
