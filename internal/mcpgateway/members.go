package mcpgateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// errDuplicateMember is a JSON object that names a member twice. Parsers
// disagree on which value counts (Go's and most keep the last, others the
// first), so a proxy or a limit check on the way could read another
// request than the one executed: every entry refuses it.
var errDuplicateMember = errors.New("a JSON object names a member twice")

// uniqueMembers reports the first object of data, at any depth, that names
// a member twice, by its JSON Pointer. data is well-formed JSON or its
// syntax error is returned.
func uniqueMembers(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return walkUnique(dec, "")
}

// walkUnique reads one value from dec, whose JSON Pointer is at.
func walkUnique(dec *json.Decoder, at string) error {
	token, err := dec.Token()
	if err != nil {
		return err
	}
	switch token {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			name, err := dec.Token()
			if err != nil {
				return err
			}
			member := name.(string)
			path := at + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(member)
			if seen[member] {
				return fmt.Errorf("%w: %s", errDuplicateMember, strconv.Quote(path))
			}
			seen[member] = true
			if err := walkUnique(dec, path); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := walkUnique(dec, at+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return nil
}

// maxMCPBody bounds the MCP request bodies read for the check: a call's
// arguments and the JSON-RPC around them.
const maxMCPBody = a2aMaxRequest

// uniqueMembersOnly refuses a POST whose JSON body names a member twice
// anywhere, the JSON-RPC envelope and _meta included, with a JSON-RPC
// invalid-params error, before the MCP server decodes it (keeping the last
// value, as Go does). Other bodies go on as they came.
func uniqueMembersOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxMCPBody+1))
		if err != nil || len(body) > maxMCPBody {
			http.Error(w, fmt.Sprintf("the request cannot be read, or is larger than %d bytes", maxMCPBody), http.StatusRequestEntityTooLarge)
			return
		}
		if err := uniqueMembers(body); errors.Is(err, errDuplicateMember) {
			var envelope struct {
				ID json.RawMessage `json:"id"`
			}
			_ = json.Unmarshal(body, &envelope)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": envelope.ID,
				"error": map[string]any{"code": jsonrpc.CodeInvalidParams, "message": err.Error() + "; nothing was recorded"}})
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}
