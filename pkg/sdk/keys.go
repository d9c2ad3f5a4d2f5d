package sdk

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/digest"
)

const (
	// MaxKeyLength is the longest key Kubernetes accepts as an object name
	// (a DNS-1123 subdomain).
	MaxKeyLength = validation.DNS1123SubdomainMaxLength

	// hashLength is the number of hex digits of SHA-256 that identify the
	// input of a derived key: 64 bits, so that collisions within one tenant
	// stay negligible even for billions of keys. A collision could only ever
	// be refused as a DuplicateConflict, never executed as the other request.
	hashLength = 16

	// derivedKeyLength keeps derived keys within a DNS-1123 label (63), so
	// they also fit where a label is required and leave room for batch items.
	derivedKeyLength = validation.DNS1123LabelMaxLength
	readableLength   = derivedKeyLength - 1 - hashLength
)

// Domains separate the hash inputs of the derivations, so that a workflow
// key, an arguments key and a batch item suffix never hash alike by accident.
const (
	workflowDomain  = "toolledger.dev/workflow-key/v1"
	argumentsDomain = "toolledger.dev/arguments-key/v1"
	batchItemDomain = "toolledger.dev/batch-item/v1"
	clientKeyDomain = "toolledger.dev/client-key/v1"
)

// MaxClientKeyLength is the longest key a caller may send in its own
// protocol, as the HTTP Idempotency-Key conventions bound it.
const MaxClientKeyLength = 255

// clientKeyHashLength is the number of hex digits of SHA-256 that identify
// a client key: 128 bits, because the caller chooses the key, and the
// action records the key as sent (spec.clientKey), so that even a
// collision is refused as a different request rather than answered.
const clientKeyHashLength = 32

// ValidClientKey reports whether key is one a caller may send: 1 to
// MaxClientKeyLength printable ASCII characters.
func ValidClientKey(key string) error {
	if key == "" {
		return errors.New("the client key is empty")
	}
	if len(key) > MaxClientKeyLength {
		return fmt.Errorf("the client key is %d characters long; at most %d are allowed", len(key), MaxClientKeyLength)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < ' ' || key[i] > '~' {
			return fmt.Errorf("the client key has a character other than printable ASCII at byte %d", i)
		}
	}
	return nil
}

// ClientKey derives the idempotency key (the ToolAction's name) of a key a
// caller sent in its own protocol (an HTTP Idempotency-Key, an MCP commerce
// binding's meta key, an A2A messageId), scoped by what the caller
// addressed: the caller and the tool's name. The same key from another
// caller, or for another tool name, is another intent; whether a Tool or a
// same-named ClusterTool answers the name when the key arrives is not part
// of it, so that a retry meets the intent it repeats whatever changed in
// the catalog meanwhile.
// It is a readable prefix of the sanitized key, '-', and 32 hex digits of a
// SHA-256 over the scope and the key as sent; at most 63 characters. Record
// the key itself in Request.ClientKey.
func ClientKey(caller, tool, key string) string {
	// The scope's kind stays Tool, as it was for a namespace Tool's keys
	// when the kind was part of it, so that their names did not change.
	return clientKey(caller, v1alpha1.KindTool, tool, key)
}

// ClusterToolClientKey is the name ClientKey gave a key sent for a
// ClusterTool while the tool's kind was part of the scope. A front looks
// it up, so that a retry of a key issued then still meets its intent.
func ClusterToolClientKey(caller, tool, key string) string {
	return clientKey(caller, v1alpha1.KindClusterTool, tool, key)
}

func clientKey(caller, kind, tool, key string) string {
	hash := hashPartsN(clientKeyHashLength, clientKeyDomain, caller, kind, tool, key)
	prefix := truncate(sanitize(key), derivedKeyLength-1-clientKeyHashLength)
	if prefix == "" {
		return hash
	}
	return prefix + "-" + hash
}

// WorkflowKey derives an idempotency key from the stable identity of a
// workflow step: the run, the step within it, and the tool's operation and
// version. Every attempt, retry and replay of the step derives the same key;
// a different run or step derives a different one. Derive it from identifiers
// the workflow engine persists, never from model output or per-attempt
// randomness. The tenant is the namespace and is not part of the key.
//
// The key is a readable prefix of the sanitized parts, '-', and 16 hex
// digits of a SHA-256 over the raw parts (see the package documentation);
// it is at most 63 characters and a valid object name.
func WorkflowKey(runID, stepID, operation, version string) string {
	return deriveKey(workflowDomain, []string{runID, stepID, operation, version}, runID, stepID, operation, version)
}

// ArgumentsKey derives an idempotency key from the operation, its version
// and its arguments, for tools whose arguments themselves identify the intent
// (an order id, an invoice number). The arguments are encoded with
// encoding/json and canonicalized (RFC 8785, package digest), so member
// order, whitespace and number spelling (1000, 1000.0, 1e3) do not change the
// key; any value does. Pass raw JSON text as json.RawMessage: a []byte is
// encoded as a base64 string. Identical arguments are the same intent for as
// long as the record exists, so do not use it where the same arguments may
// legitimately mean two effects.
//
// It fails when the arguments cannot be encoded or canonicalized: duplicate
// member names, or integers beyond 2^53, which a double cannot hold exactly
// (send those as strings).
func ArgumentsKey(operation, version string, arguments any) (string, error) {
	encoded, err := json.Marshal(arguments)
	if err != nil {
		return "", fmt.Errorf("cannot encode the arguments of %s %s: %w", operation, version, err)
	}
	canonical, err := digest.Canonicalize(encoded)
	if err != nil {
		return "", fmt.Errorf("cannot canonicalize the arguments of %s %s: %w", operation, version, err)
	}
	return deriveKey(argumentsDomain, []string{operation, version}, operation, version, string(canonical)), nil
}

// BatchItemKey derives the key of one item of a batch: batchKey, '-', and
// the item ID. An ID that is already lowercase alphanumerics separated by
// single '-' is used as is; any other ID is sanitized, truncated where the
// key would exceed MaxKeyLength, and followed by '-' and 16 hex digits of
// the SHA-256 of the raw ID, so that IDs differing only in case or
// punctuation get different keys. InvokeBatch refuses a batch whose items
// derive the same key.
func BatchItemKey(batchKey, itemID string) (string, error) {
	if errs := validation.IsDNS1123Subdomain(batchKey); len(errs) > 0 {
		return "", fmt.Errorf("batch key %q is not a valid object name: %s", batchKey, strings.Join(errs, "; "))
	}
	if maxBatchKey := MaxKeyLength - 1 - hashLength; len(batchKey) > maxBatchKey {
		return "", fmt.Errorf("batch key %q is longer than %d characters, leaving no room for item keys", batchKey, maxBatchKey)
	}
	if itemID == "" {
		return "", errors.New("batch item ID is empty")
	}
	readable := sanitize(itemID)
	if readable == itemID && len(batchKey)+1+len(readable) <= MaxKeyLength {
		return batchKey + "-" + readable, nil
	}
	suffix := hashParts(batchItemDomain, itemID)
	readable = truncate(readable, MaxKeyLength-len(batchKey)-1-len(suffix)-1)
	if readable == "" {
		return batchKey + "-" + suffix, nil
	}
	return batchKey + "-" + readable + "-" + suffix, nil
}

// deriveKey joins the sanitized readable parts, truncated, with the hash of
// the raw hashed parts.
func deriveKey(domain string, readable []string, hashed ...string) string {
	sanitized := make([]string, 0, len(readable))
	for _, part := range readable {
		if s := sanitize(part); s != "" {
			sanitized = append(sanitized, s)
		}
	}
	prefix := truncate(strings.Join(sanitized, "-"), readableLength)
	hash := hashParts(domain, hashed...)
	if prefix == "" {
		return hash
	}
	return prefix + "-" + hash
}

// sanitize lowercases s and turns every run of characters other than ASCII
// letters and digits into one '-', trimmed at both ends.
func sanitize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	pendingDash := false
	for _, r := range s {
		r = unicode.ToLower(r)
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			if pendingDash && b.Len() > 0 {
				b.WriteByte('-')
			}
			pendingDash = false
			b.WriteRune(r)
			continue
		}
		pendingDash = true
	}
	return b.String()
}

// truncate cuts a sanitized string to at most n bytes without leaving a
// trailing '-' (sanitized strings are ASCII).
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:max(n, 0)]
	}
	return strings.TrimRight(s, "-")
}

// hashParts returns the first hashLength hex digits of the SHA-256 of the
// domain and the parts, each prefixed by its length, so that ("a-b", "c")
// and ("a", "b-c") hash differently.
func hashParts(domain string, parts ...string) string {
	return hashPartsN(hashLength, domain, parts...)
}

// hashPartsN is hashParts with n hex digits.
func hashPartsN(n int, domain string, parts ...string) string {
	h := sha256.New()
	var length [8]byte
	for _, part := range append([]string{domain}, parts...) {
		binary.BigEndian.PutUint64(length[:], uint64(len(part)))
		h.Write(length[:])
		h.Write([]byte(part))
	}
	return hex.EncodeToString(h.Sum(nil))[:n]
}
