package httpcall

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
	"github.com/toolledger/toolledger/pkg/jsonpointer"
)

// Lookup finds an earlier attempt of req by the Tool's strategy. Only an
// answer that proves the effect is found, and only one the Tool says proves
// absence is adapter.ErrNotFound: the controller re-sends on that. Anything
// else, including a 200 that does not yield the effect, is an inconclusive
// error, looked up again until the tool's deadline.
func (e *executor) Lookup(ctx context.Context, req adapter.Request) (adapter.Outcome, error) {
	switch {
	case e.lookup == nil:
		return adapter.Outcome{}, adapter.ErrLookupUnsupported
	case e.lookup.Strategy == v1alpha1.LookupByReplay:
		return e.replay(ctx, req)
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	// The parameters fill the URL and are what match rules compare with;
	// they are decoded once, and only when either needs them.
	params := map[string]any{}
	needParams := len(e.lookup.Match) > 0 || slices.ContainsFunc(placeholders(e.lookup.URL), func(name string) bool { return name != "key" })
	if needParams {
		decoded, err := decodeObject(req.Parameters)
		if err != nil {
			return adapter.Outcome{}, err
		}
		params = decoded
	}
	values := maps.Clone(params)
	values["key"] = req.IdempotencyKey
	target, err := expand(e.lookup.URL, values)
	if err != nil {
		return adapter.Outcome{}, fmt.Errorf("cannot build the lookup URL: %w", err)
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return adapter.Outcome{}, fmt.Errorf("cannot build lookup request: %w", adapter.ShowURL(err, e.lookup.URL))
	}
	e.setHeaders(httpReq, req)
	resp, err := e.client.Do(httpReq)
	if err != nil {
		return adapter.Outcome{}, fmt.Errorf("lookup failed: %w", adapter.ShowURL(err, e.lookup.URL))
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := readBody(resp.Body)
	if errors.Is(err, errBodyTooLarge) {
		return adapter.Outcome{}, fmt.Errorf("lookup answered %d with a body that %w, which proves nothing", resp.StatusCode, err)
	}
	if err != nil {
		return adapter.Outcome{}, fmt.Errorf("lookup response lost: %w", err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return e.found(resp.Header.Get("Content-Type"), body, params, req.IdempotencyKey)
	case resp.StatusCode == http.StatusNotFound && e.lookup.NotFoundMeansAbsent:
		return adapter.Outcome{}, adapter.ErrNotFound
	case resp.StatusCode == http.StatusNotFound:
		return adapter.Outcome{}, fmt.Errorf("lookup answered %s, which proves nothing: an ingress or a proxy answers 404 too (set lookup.notFoundMeansAbsent where the endpoint's 404 means the key is unknown)",
			e.describeError(resp.StatusCode, body, false))
	}
	return adapter.Outcome{}, fmt.Errorf("lookup answered %s", e.describeError(resp.StatusCode, body, false))
}

// found reads a lookup's 200: the candidates (the body, or the list at
// itemsPointer), the first that satisfies every match rule and yields the
// external id when the Tool has one. A 200 alone proves nothing (an ingress,
// a proxy or a single-page app answers 200 to any path), so the answer must
// be JSON, declared and parsed, and a Tool with neither an external id nor
// match rules, which would take any candidate, takes only one that carries
// the key.
func (e *executor) found(contentType string, body []byte, params map[string]any, key string) (adapter.Outcome, error) {
	lookup := e.lookup
	if !isJSON(contentType) {
		return adapter.Outcome{}, fmt.Errorf("lookup answered 200 with Content-Type %q, not JSON, which proves nothing", truncate(printableASCII(contentType), maxErrorCodeLength))
	}
	doc, err := jsonpointer.Decode(body)
	if err != nil {
		return adapter.Outcome{}, fmt.Errorf("lookup answered 200 with a body that is not JSON (%d bytes), which proves nothing", len(body))
	}
	candidates := []any{doc}
	if p := lookup.ItemsPointer; p != nil {
		items, ok := jsonpointer.Get(doc, *p)
		list, isList := items.([]any)
		if !ok || !isList {
			return adapter.Outcome{}, fmt.Errorf("lookup answered 200 without a list at %q, which proves nothing", *p)
		}
		candidates = list
	}
	// Without a proof field, the key is the proof.
	keyIsProof := e.response.ExternalIDPointer == "" && len(lookup.Match) == 0
	keys := e.keyForms(key)
	matched := 0
	var first adapter.Outcome
	var unusable error
	for _, candidate := range candidates {
		if !matches(candidate, params, lookup.Match) {
			continue
		}
		if keyIsProof && !carries(candidate, keys) {
			unusable = errors.New("lookup answered 200 with a match that does not carry the key, which proves nothing (set response.externalIDPointer or lookup.match to say what identifies the effect)")
			continue
		}
		out := e.outcomeOf(candidate)
		if e.response.ExternalIDPointer != "" && out.ExternalRef == "" {
			unusable = fmt.Errorf("lookup answered 200 with a match that has no external id at %s, which proves nothing", e.response.ExternalIDPointer)
			continue
		}
		if matched == 0 {
			first = out
		}
		matched++
	}
	switch {
	case matched > 1:
		first.Warnings = append(first.Warnings, fmt.Sprintf("the lookup matched %d effects; the first is recorded", matched))
		fallthrough
	case matched == 1:
		return first, nil
	case unusable != nil:
		return adapter.Outcome{}, unusable
	case lookup.NoMatchMeansAbsent:
		return adapter.Outcome{}, adapter.ErrNotFound
	}
	return adapter.Outcome{}, fmt.Errorf("lookup answered 200 with no match among %d candidates, which proves nothing (set lookup.noMatchMeansAbsent where the search sees every write at once)", len(candidates))
}

// isJSON reports whether a Content-Type is JSON: application/json or a
// type with the +json suffix, such as application/vnd.api+json.
func isJSON(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mediaType == "application/json" || (strings.HasPrefix(mediaType, "application/") && strings.HasSuffix(mediaType, "+json")))
}

// keyForms are the texts of the key a downstream may have stored: the
// action's key, and the key as sent, which may be shortened.
func (e *executor) keyForms(key string) []string {
	sent := e.key.value(key)
	if unquoted, err := strconv.Unquote(sent); err == nil {
		sent = unquoted
	}
	if sent == key {
		return []string{key}
	}
	return []string{key, sent}
}

// carries reports whether a string anywhere in v is one of keys, whole.
func carries(v any, keys []string) bool {
	switch v := v.(type) {
	case string:
		return slices.Contains(keys, v)
	case map[string]any:
		for _, member := range v {
			if carries(member, keys) {
				return true
			}
		}
	case []any:
		for _, item := range v {
			if carries(item, keys) {
				return true
			}
		}
	}
	return false
}

// matches reports whether every rule's field in the candidate equals its
// parameter; a field or parameter that is missing matches nothing.
func matches(candidate, params any, rules []v1alpha1.HTTPLookupMatch) bool {
	for _, rule := range rules {
		got, ok := jsonpointer.Get(candidate, rule.Field)
		want, wanted := jsonpointer.Get(params, rule.Parameter)
		if !ok || !wanted || !sameValue(got, want) {
			return false
		}
	}
	return true
}

// sameValue compares JSON values; numbers by their text, so 4417 in a
// parameter matches "4417" in a system that returns ids as strings.
func sameValue(a, b any) bool {
	textA, errA := scalarText(a, false)
	textB, errB := scalarText(b, false)
	if errA == nil && errB == nil && a != nil && b != nil {
		return textA == textB
	}
	return reflect.DeepEqual(a, b)
}

// replay is the lookup of a provider that answers a repeated key with the
// stored response of its first request: the request is sent again, as it
// was, while the provider keeps the key (lookup.replayWindow from the first
// attempt). Within the window the answer is the one effect, whether the
// first request applied or not; after it a re-send could apply twice, so
// the outcome goes to a human.
func (e *executor) replay(ctx context.Context, req adapter.Request) (adapter.Outcome, error) {
	window := e.lookup.ReplayWindow.Duration
	if req.FirstAttemptTime.IsZero() || !e.now().Before(req.FirstAttemptTime.Add(window)) {
		return adapter.Outcome{}, fmt.Errorf("%w: the provider replays a key for %s after the first attempt, which was at %s",
			adapter.ErrLookupWindowClosed, window, req.FirstAttemptTime.UTC().Format("2006-01-02T15:04:05Z"))
	}
	out, err := e.Execute(ctx, req)
	if err != nil {
		// The replay's own answer is unclear: nothing is proved either way.
		return adapter.Outcome{}, fmt.Errorf("replay of the request: %w", err)
	}
	return out, nil
}
