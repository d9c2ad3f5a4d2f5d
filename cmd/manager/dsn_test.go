package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A DSN with a password is never taken from a command line, which the
// process list, a pod's spec and the API server's audit log of a kubectl
// exec keep: it comes from a file, standard input or the environment.
func TestTheArchiveDSNTakesNoPasswordOnTheCommandLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "owner.dsn")
	if err := os.WriteFile(file, []byte("postgres://owner:s3cret@db:5432/ledger\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TOOLLEDGER_ARCHIVE_DSN", "postgres://env:from-env@db/ledger")
	for _, tc := range []struct {
		name, stdin string
		args        []string
		want, err   string
	}{
		{name: "a URL with a password", args: []string{"--archive-dsn=postgres://owner:s3cret@db/ledger"}, err: "--archive-dsn holds a password"},
		{name: "a URL's password parameter", args: []string{"--archive-dsn=postgres://owner@db/ledger?password=s3cret"}, err: "--archive-dsn holds a password"},
		{name: "a key=value password", args: []string{"--archive-dsn=host=db user=owner password=s3cret"}, err: "--archive-dsn holds a password"},
		{name: "a DSN without one", args: []string{"--archive-dsn=postgres://owner@db/ledger?sslmode=verify-full"}, want: "postgres://owner@db/ledger?sslmode=verify-full"},
		{name: "from a file", args: []string{"--archive-dsn-file=" + file}, want: "postgres://owner:s3cret@db:5432/ledger"},
		{name: "from standard input", args: []string{"--archive-dsn-file=-"}, stdin: "host=db user=owner password=s3cret\n", want: "host=db user=owner password=s3cret"},
		{name: "from the environment", want: "postgres://env:from-env@db/ledger"},
		{name: "both flags", args: []string{"--archive-dsn=postgres://db", "--archive-dsn-file=-"}, err: "not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flags := flag.NewFlagSet("test", flag.ContinueOnError)
			var d archiveDSN
			d.bind(flags, "The archive")
			if err := flags.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := d.resolve(strings.NewReader(tc.stdin))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("resolve = %q, %v; want an error saying %q, without the password", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("resolve = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
