package history

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
)

// A continue token holds where the next page of a list starts (the last
// record's position, so that a page is one query however deep it starts)
// and a digest of the filter the list was made under. Under another
// filter the position would skip or repeat records: the token is refused,
// as Tekton Results refuses a page token given with another filter.
type continueToken[P any] struct {
	After  P      `json:"a"`
	Filter string `json:"f"`
}

// The errors of DecodeContinue, which the archive API answers with 400.
var (
	ErrNotAToken   = errors.New("the continue token is not one this API gave")
	ErrOtherFilter = errors.New("the continue token is for a list with another filter (fieldSelector, completedFrom, completedUntil, keyPrefix): list again from the start")
)

// EncodeContinue is the continue token of a list under f that goes on
// after the position after.
func EncodeContinue[P any](f Filter, after P) string {
	encoded, _ := json.Marshal(continueToken[P]{After: after, Filter: f.digest()})
	return base64.RawURLEncoding.EncodeToString(encoded)
}

// DecodeContinue is the position of a token EncodeContinue made under f.
func DecodeContinue[P any](f Filter, token string) (P, error) {
	var (
		t    continueToken[P]
		none P
	)
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err == nil {
		err = json.Unmarshal(raw, &t)
	}
	switch {
	case err != nil || t.Filter == "":
		return none, ErrNotAToken
	case t.Filter != f.digest():
		return none, ErrOtherFilter
	}
	return t.After, nil
}

// digest names what f selects, however its query spelled it: == or =, a
// time in any zone.
func (f Filter) digest() string {
	f.CompletedFrom, f.CompletedUntil = f.CompletedFrom.UTC(), f.CompletedUntil.UTC()
	canonical, _ := json.Marshal(f)
	sum := sha256.Sum256(canonical)
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}
