package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"
)

// archiveDSN is the archive's DSN as a command takes it: from a file
// (--archive-dsn-file, "-" for standard input), from $TOOLLEDGER_ARCHIVE_DSN,
// or from --archive-dsn, which may not hold a password: a command line is
// kept where a secret must not be (the process list, a pod's spec, the API
// server's audit log of a kubectl exec).
type archiveDSN struct {
	value, file string
}

// bind adds the flags to flags; what names the database in their help.
func (d *archiveDSN) bind(flags *flag.FlagSet, what string) {
	flags.StringVar(&d.value, "archive-dsn", "", what+", as a URL or key=value string, without a password (use --archive-dsn-file or $TOOLLEDGER_ARCHIVE_DSN for one); $TOOLLEDGER_ARCHIVE_DSN when unset.")
	flags.StringVar(&d.file, "archive-dsn-file", "", what+", read from this file, or from standard input when -: a DSN with a password (kubectl exec -i … --archive-dsn-file=- < owner.dsn).")
}

// resolve returns the DSN; "" when none is given.
func (d *archiveDSN) resolve(stdin io.Reader) (string, error) {
	switch {
	case d.value != "" && d.file != "":
		return "", errors.New("give --archive-dsn or --archive-dsn-file, not both")
	case d.value != "":
		if dsnHasPassword(d.value) {
			return "", errors.New("--archive-dsn holds a password, which a command line keeps where anyone may read it (the process list, a pod's spec, the API server's audit log): " +
				"give it with --archive-dsn-file (- for standard input) or $TOOLLEDGER_ARCHIVE_DSN")
		}
		return d.value, nil
	case d.file == "-":
		raw, err := io.ReadAll(io.LimitReader(stdin, 64<<10))
		if err != nil {
			return "", fmt.Errorf("cannot read the archive's DSN from standard input: %w", err)
		}
		return strings.TrimSpace(string(raw)), nil
	case d.file != "":
		raw, err := os.ReadFile(d.file)
		if err != nil {
			return "", fmt.Errorf("cannot read the archive's DSN: %w", err)
		}
		return strings.TrimSpace(string(raw)), nil
	}
	return os.Getenv("TOOLLEDGER_ARCHIVE_DSN"), nil
}

// passwordParameter finds a password in a key=value DSN.
var passwordParameter = regexp.MustCompile(`(^|\s)password\s*=`)

// dsnHasPassword reports whether a DSN holds a password: a URL's
// user:password or password parameter, or a key=value string's password.
func dsnHasPassword(dsn string) bool {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return strings.Contains(dsn, "password")
		}
		_, set := u.User.Password()
		return set || u.Query().Has("password")
	}
	return passwordParameter.MatchString(dsn)
}
