package identity

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"
)

func TestIDSeesEverythingImpersonationAsserts(t *testing.T) {
	base := authenticationv1.UserInfo{Username: "ana", UID: "1", Groups: []string{"b", "a"}}
	same := authenticationv1.UserInfo{Username: "ana", UID: "1", Groups: []string{"a", "b"}}
	otherGroup := authenticationv1.UserInfo{Username: "ana", UID: "1", Groups: []string{"a"}}
	otherExtra := authenticationv1.UserInfo{Username: "ana", UID: "1", Groups: []string{"a", "b"},
		Extra: map[string]authenticationv1.ExtraValue{"scopes": {"x"}}}
	id := func(u authenticationv1.UserInfo) string {
		t.Helper()
		s, err := ID(u)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if id(base) != id(same) {
		t.Error("the order of groups changed the ID")
	}
	if id(base) == id(otherGroup) || id(base) == id(otherExtra) {
		t.Error("users who differ in a group or an extra share an ID")
	}
}

func TestImpersonatingCopiesTheUser(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "front-end"}
	user := authenticationv1.UserInfo{Username: "ana", UID: "1", Groups: []string{"approvers"},
		Extra: map[string]authenticationv1.ExtraValue{"scopes": {"x"}}}
	got := Impersonating(cfg, user)
	want := rest.ImpersonationConfig{UserName: "ana", UID: "1", Groups: []string{"approvers"}, Extra: map[string][]string{"scopes": {"x"}}}
	if diff := cmp.Diff(want, got.Impersonate); diff != "" {
		t.Errorf("impersonation (-want +got):\n%s", diff)
	}
	if cfg.Impersonate.UserName != "" || got.BearerToken != "front-end" {
		t.Error("the front end's own config was changed, or its credentials not kept")
	}
}

func TestCacheKeepsTheMostRecentlyUsed(t *testing.T) {
	c := NewCache[int](2)
	c.Add("a", 1)
	c.Add("b", 2)
	if _, ok := c.Get("a"); !ok { // a is now the most recent
		t.Fatal("a was dropped early")
	}
	if kept := c.Add("a", 9); kept != 1 {
		t.Errorf("a second Add for a kept %d, want the first value 1", kept)
	}
	c.Add("c", 3)
	if _, ok := c.Get("b"); ok {
		t.Error("b, the least recently used, was kept past the bound")
	}
	c.Put("c", 4)
	if v, _ := c.Get("c"); v != 4 {
		t.Errorf("after Put, c = %d, want 4", v)
	}
	if c.Len() != 2 {
		t.Errorf("Len = %d, want 2", c.Len())
	}
}
