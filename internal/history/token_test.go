package history

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"
)

type position struct {
	Key string `json:"k"`
}

func TestAContinueTokenGoesOnOnlyUnderItsFilter(t *testing.T) {
	charges := Filter{Tool: "charge", CompletedFrom: t0}
	token := EncodeContinue(charges, position{Key: "order-2"})
	for _, c := range []struct {
		name   string
		filter Filter
		token  string
		want   error
	}{
		{"its filter", charges, token, nil},
		{"its filter, its time in another zone", Filter{Tool: "charge", CompletedFrom: t0.In(time.FixedZone("CET", 3600))}, token, nil},
		{"another tool", Filter{Tool: "refund", CompletedFrom: t0}, token, ErrOtherFilter},
		{"another time", Filter{Tool: "charge", CompletedFrom: t0.Add(time.Nanosecond)}, token, ErrOtherFilter},
		{"no filter", Filter{}, token, ErrOtherFilter},
		{"not base64", charges, "%%%", ErrNotAToken},
		{"a position without its filter", charges, base64.RawURLEncoding.EncodeToString([]byte(`{"k":"order-2"}`)), ErrNotAToken},
	} {
		after, err := DecodeContinue[position](c.filter, c.token)
		switch {
		case !errors.Is(err, c.want):
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		case err == nil && after.Key != "order-2":
			t.Errorf("%s: goes on after %q, want order-2", c.name, after.Key)
		}
	}
}
