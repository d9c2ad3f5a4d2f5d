package http

import (
	"fmt"
	"strconv"
	"strings"
)

// resolve returns the value at an RFC 6901 JSON Pointer in a decoded document.
func resolve(doc any, pointer string) (any, bool) {
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

// project copies the values at the pointers into a new document at the same
// paths; array elements are keyed by their index. Missing pointers are reported.
func project(doc any, pointers []string) (map[string]any, []string) {
	var result map[string]any
	var warnings []string
	for _, pointer := range pointers {
		value, ok := resolve(doc, pointer)
		if !ok {
			warnings = append(warnings, fmt.Sprintf("response has no result field at %s", pointer))
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
	return result, warnings
}

func tokens(pointer string) []string {
	parts := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	for i, p := range parts {
		parts[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(p)
	}
	return parts
}
