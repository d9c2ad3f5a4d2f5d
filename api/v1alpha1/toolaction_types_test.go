package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestIdempotencyKey(t *testing.T) {
	if got, want := IdempotencyKey("shop", "order-1"), "shop/order-1"; got != want {
		t.Errorf("IdempotencyKey = %q, want %q", got, want)
	}

	// The longest namespace and name: 63 + 1 + 253 characters.
	ns := strings.Repeat("n", 63)
	long := strings.Repeat("a", 253)
	key := IdempotencyKey(ns, long)
	if len(key) != maxIdempotencyKeyLength {
		t.Fatalf("len(IdempotencyKey) = %d, want %d", len(key), maxIdempotencyKeyLength)
	}
	if !strings.HasPrefix(key, ns+"/aaa") || !strings.Contains(key, "~") {
		t.Errorf("IdempotencyKey = %q, want the pair's start and a ~hash suffix", key)
	}
	if IdempotencyKey(ns, long) != key {
		t.Error("IdempotencyKey is not deterministic")
	}

	// Names that share the kept prefix still get different keys.
	other := strings.Repeat("a", 252) + "b"
	if IdempotencyKey(ns, other) == key {
		t.Errorf("names differing after the kept prefix share key %q", key)
	}
	// Tenants never share keys, even with the same name.
	if IdempotencyKey("shop-a", "x") == IdempotencyKey("shop-b", "x") {
		t.Error("two tenants share a key")
	}
	// Exactly 255 characters stay verbatim.
	exact := strings.Repeat("b", maxIdempotencyKeyLength-len("shop/"))
	if got := IdempotencyKey("shop", exact); got != "shop/"+exact {
		t.Errorf("a 255-character pair was rewritten to %q", got)
	}
}

func TestToolLabelValue(t *testing.T) {
	if got := ToolLabelValue("charge"); got != "charge" {
		t.Errorf("ToolLabelValue(charge) = %q, want the name itself", got)
	}
	long := strings.Repeat("a", 253)
	got := ToolLabelValue(long)
	if len(got) != 63 || !strings.HasPrefix(got, strings.Repeat("a", 46)+"-") {
		t.Errorf("ToolLabelValue(253 a's) = %q (%d), want 46 a's, a dash and 16 hex digits", got, len(got))
	}
	if ToolLabelValue(strings.Repeat("a", 252)+"b") == got {
		t.Error("names differing after the kept prefix share a label value")
	}
	if problems := validation.IsValidLabelValue(got); len(problems) > 0 {
		t.Errorf("ToolLabelValue = %q is not a label value: %v", got, problems)
	}
}
