// Package jsonpointer reads RFC 6901 JSON Pointers in decoded JSON
// documents. The HTTP adapter picks response fields with it, and the request
// digest picks a tool's consequential parameters.
package jsonpointer

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// Decode parses exactly one JSON document into the form Get reads, with
// numbers as json.Number so that integers beyond 2^53, such as ids, are not
// rounded through float64.
func Decode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON document")
	}
	return doc, nil
}

// Get returns the value at a JSON Pointer in a document decoded into any
// (maps, slices and scalars), and whether it exists.
func Get(doc any, pointer string) (any, bool) {
	if pointer == "" {
		return doc, true
	}
	cur := doc
	for _, token := range tokens(pointer) {
		switch node := cur.(type) {
		case map[string]any:
			next, ok := node[token]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(token)
			if err != nil || i < 0 || i >= len(node) {
				return nil, false
			}
			cur = node[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// Project copies the values at the pointers into a new document at the same
// paths; array elements are keyed by their index. It returns nil when no
// pointer exists, and the pointers that do not.
func Project(doc any, pointers []string) (result map[string]any, missing []string) {
	for _, pointer := range pointers {
		value, ok := Get(doc, pointer)
		if !ok {
			missing = append(missing, pointer)
			continue
		}
		if result == nil {
			result = map[string]any{}
		}
		path := tokens(pointer)
		node := result
		for _, token := range path[:len(path)-1] {
			child, ok := node[token].(map[string]any)
			if !ok {
				child = map[string]any{}
				node[token] = child
			}
			node = child
		}
		node[path[len(path)-1]] = value
	}
	return result, missing
}

func tokens(pointer string) []string {
	parts := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	for i, p := range parts {
		parts[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(p)
	}
	return parts
}
