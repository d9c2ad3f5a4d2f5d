// Package digest computes the request digest of a ToolAction: SHA-256 over
// the RFC 8785 canonical JSON of the tenant, tool, operation, version and
// parameters. Key order, whitespace, number spelling and string escapes do not
// change it; any change of a value does. Clients may compute it to prove what
// they meant (spec.requestDigest), and to detect that two keys carry the same intent.
package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Prefix starts every digest, naming the hash function.
const Prefix = "sha256:"

// Request is what the digest covers.
type Request struct {
	// Tenant is the ToolAction's namespace.
	Tenant string `json:"tenant"`
	// Tool is the name of the referenced Tool.
	Tool string `json:"tool"`
	// Operation and Version are the Tool's operation contract.
	Operation string `json:"operation"`
	Version   string `json:"version"`
	// Parameters is the request's JSON object; nil counts as {}.
	Parameters json.RawMessage `json:"parameters"`
}

// Compute returns "sha256:" and the hex SHA-256 of the canonical form of r.
func Compute(r Request) (string, error) {
	// json.Marshal would replace invalid UTF-8 with U+FFFD, merging names
	// that differ; Canonicalize rejects such parameters for the same reason.
	for _, field := range [...]struct{ name, value string }{
		{"tenant", r.Tenant}, {"tool", r.Tool}, {"operation", r.Operation}, {"version", r.Version},
	} {
		if !utf8.ValidString(field.value) {
			return "", fmt.Errorf("%s %q is not valid UTF-8", field.name, field.value)
		}
	}
	if len(r.Parameters) == 0 {
		r.Parameters = json.RawMessage("{}")
	}
	params, err := Canonicalize(r.Parameters)
	if err != nil {
		return "", fmt.Errorf("cannot canonicalize parameters: %w", err)
	}
	r.Parameters = params
	return Of(r)
}

// Of returns "sha256:" and the hex SHA-256 of the canonical JSON of v, for
// digests of configuration rather than of a request (a Tool's target).
func Of(v any) (string, error) {
	encoded, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("cannot encode digest input: %w", err)
	}
	canonical, err := Canonicalize(encoded)
	if err != nil {
		return "", fmt.Errorf("cannot canonicalize digest input: %w", err)
	}
	sum := sha256.Sum256(canonical)
	return Prefix + hex.EncodeToString(sum[:]), nil
}
